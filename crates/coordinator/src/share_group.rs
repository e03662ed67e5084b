//! A share group (KIP-932): members send ShareGroupHeartbeat with the topics they subscribe
//! to, and the coordinator assigns them partitions with Kafka's `simple` assignor. Members
//! of a share group may read the same partition at once (the partition's leader hands each
//! record to one of them), so an assignment changes at once, without the revocation steps of
//! a consumer group: a member's next heartbeat, at the epoch it was last given, gets the
//! group's epoch and its new assignment.
//!
//! Membership is kept in memory: after the coordinator moves, members heartbeat to the new
//! one, get UNKNOWN_MEMBER_ID and join again, and the partitions' state (kept by the share
//! coordinator, not here) is untouched by that.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;
use uuid::Uuid;

use crate::consumer::{Topics, Tp};
use crate::records::{Key, ShareGroupValue};

pub struct ShareMember {
    pub id: String,
    pub epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub assigned: BTreeSet<Tp>,
    /// The assignment last sent to the member, so that an unchanged one is not resent.
    sent: Option<BTreeSet<Tp>>,
    last_seen: Instant,
}

#[derive(Default)]
pub struct ShareGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// Topic name → (id, partitions) as of the last assignment.
    topics: BTreeMap<String, (Uuid, i32)>,
    /// Every topic the group was assigned (or had its offsets altered on), so that its
    /// offsets can be described after its members are gone.
    pub initialized: BTreeSet<String>,
    /// What the log holds for the group, so that only changes are written.
    saved: Option<Bytes>,
}

pub struct ShareHeartbeatIn {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// None: unchanged.
    pub subscribed: Option<Vec<String>>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct ShareHeartbeatOut {
    pub member_id: String,
    pub member_epoch: i32,
    /// Sent when it changed (and always on joining).
    pub assignment: Option<Vec<Tp>>,
}

/// The limits a heartbeat is handled with.
pub struct ShareLimits {
    pub session: Duration,
    pub max_size: usize,
}

impl ShareGroup {
    /// As read back from the log.
    pub fn restore(v: ShareGroupValue, raw: Bytes) -> ShareGroup {
        ShareGroup {
            group_epoch: v.group_epoch,
            assignment_epoch: v.group_epoch,
            initialized: v.topics.into_iter().collect(),
            saved: Some(raw),
            ..ShareGroup::default()
        }
    }

    /// The record to write if the group's epoch or topics changed since the last one.
    pub fn changes(&mut self, group_id: &str) -> Vec<(Bytes, Option<Bytes>)> {
        let value =
            ShareGroupValue { group_epoch: self.group_epoch, topics: self.initialized.iter().cloned().collect() };
        let raw = value.encode();
        if self.saved.as_ref() == Some(&raw) {
            return Vec::new();
        }
        self.saved = Some(raw.clone());
        vec![(Key::ShareGroup { group: group_id.to_string() }.encode(), Some(raw))]
    }

    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// Every topic some member subscribes to.
    pub fn subscribed_topics(&self) -> BTreeSet<&String> {
        self.members.values().flat_map(|m| m.subscribed.iter()).collect()
    }

    pub fn heartbeat(
        &mut self,
        req: ShareHeartbeatIn,
        topics: &dyn Topics,
        now: Instant,
        limits: &ShareLimits,
    ) -> Result<ShareHeartbeatOut, (E, String)> {
        self.expire(now, limits.session);
        let id = req.member_id.clone();
        match req.member_epoch {
            -1 => {
                if self.members.remove(&id).is_some() {
                    self.group_epoch += 1;
                    self.assign(topics);
                }
                return Ok(ShareHeartbeatOut { member_id: id, member_epoch: -1, assignment: None });
            }
            0 => {
                let subscribed = match &req.subscribed {
                    Some(s) if !s.is_empty() => s.clone(),
                    _ => return Err((E::InvalidRequest, "SubscribedTopicNames must be set in first request.".into())),
                };
                if !self.members.contains_key(&id) && self.members.len() >= limits.max_size {
                    return Err((
                        E::GroupMaxSizeReached,
                        format!("The share group has reached its maximum capacity of {} members.", limits.max_size),
                    ));
                }
                self.members.insert(
                    id.clone(),
                    ShareMember {
                        id: id.clone(),
                        epoch: 0,
                        rack_id: req.rack_id,
                        client_id: req.client_id,
                        client_host: req.client_host,
                        subscribed,
                        assigned: BTreeSet::new(),
                        sent: None,
                        last_seen: now,
                    },
                );
                self.group_epoch += 1;
            }
            epoch => {
                let Some(m) = self.members.get_mut(&id) else {
                    return Err((E::UnknownMemberId, format!("Member {id} is not a member of the share group.")));
                };
                if epoch != m.epoch {
                    return Err((
                        E::FencedMemberEpoch,
                        format!(
                            "The share group member has a different epoch ({epoch}) than the coordinator's ({}).",
                            m.epoch
                        ),
                    ));
                }
                m.last_seen = now;
                if let Some(s) = req.subscribed.filter(|s| *s != m.subscribed) {
                    m.subscribed = s;
                    self.group_epoch += 1;
                }
            }
        }
        if self.group_epoch == self.assignment_epoch && self.topics_changed(topics) {
            self.group_epoch += 1;
        }
        if self.group_epoch > self.assignment_epoch {
            self.assign(topics);
        }
        let Some(m) = self.members.get_mut(&id) else {
            return Err((E::UnknownMemberId, format!("Member {id} is not a member of the share group.")));
        };
        // A member's epoch moves only in its own heartbeats, so the one it sends next (the
        // epoch it was given) is the one it is checked against.
        m.epoch = self.assignment_epoch;
        let assignment = (m.sent.as_ref() != Some(&m.assigned)).then(|| {
            m.sent = Some(m.assigned.clone());
            m.assigned.iter().copied().collect()
        });
        Ok(ShareHeartbeatOut { member_id: id, member_epoch: m.epoch, assignment })
    }

    /// Drops members whose session ran out; returns how many.
    pub fn expire(&mut self, now: Instant, session: Duration) -> usize {
        let before = self.members.len();
        self.members.retain(|_, m| now.duration_since(m.last_seen) <= session);
        let gone = before - self.members.len();
        if gone > 0 {
            self.group_epoch += 1;
        }
        gone
    }

    /// A topic was created, deleted or grew since the last assignment.
    fn topics_changed(&self, topics: &dyn Topics) -> bool {
        self.subscribed_topics().into_iter().any(|t| topics.resolve(t) != self.topics.get(t).copied())
    }

    /// Kafka's `simple` assignor: each subscribed topic's partitions go round-robin over its
    /// subscribers; with more subscribers than partitions, each subscriber gets one and
    /// partitions are shared.
    fn assign(&mut self, topics: &dyn Topics) {
        self.topics =
            self.subscribed_topics().into_iter().filter_map(|t| Some((t.clone(), topics.resolve(t)?))).collect();
        for m in self.members.values_mut() {
            m.assigned.clear();
        }
        for (rotation, (name, (id, partitions))) in self.topics.iter().enumerate() {
            let subscribers: Vec<String> =
                self.members.values().filter(|m| m.subscribed.contains(name)).map(|m| m.id.clone()).collect();
            if subscribers.is_empty() || *partitions <= 0 {
                continue;
            }
            let n = subscribers.len();
            let slots = (*partitions as usize).max(n);
            for slot in 0..slots {
                let member = &subscribers[(slot + rotation) % n];
                let p = (slot % *partitions as usize) as i32;
                if let Some(m) = self.members.get_mut(member) {
                    m.assigned.insert((*id, p));
                }
            }
        }
        self.assignment_epoch = self.group_epoch;
        self.initialized.extend(self.topics.keys().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Fixed(HashMap<String, (Uuid, i32)>);

    impl Topics for Fixed {
        fn resolve(&self, name: &str) -> Option<(Uuid, i32)> {
            self.0.get(name).copied()
        }
        fn names(&self) -> Vec<String> {
            self.0.keys().cloned().collect()
        }
    }

    const LIMITS: ShareLimits = ShareLimits { session: Duration::from_secs(45), max_size: 3 };

    fn join(id: &str, topics: &[&str]) -> ShareHeartbeatIn {
        ShareHeartbeatIn {
            member_id: id.into(),
            member_epoch: 0,
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed: Some(topics.iter().map(|t| t.to_string()).collect()),
        }
    }

    fn beat(id: &str, epoch: i32) -> ShareHeartbeatIn {
        ShareHeartbeatIn { member_epoch: epoch, subscribed: None, ..join(id, &[]) }
    }

    #[test]
    fn members_share_partitions_and_get_new_assignments_at_once() {
        let t = Uuid::new_v4();
        let topics = Fixed([("t".to_string(), (t, 2))].into());
        let mut g = ShareGroup::default();
        let now = Instant::now();
        let a = g.heartbeat(join("a", &["t"]), &topics, now, &LIMITS).unwrap();
        assert_eq!(
            a,
            ShareHeartbeatOut { member_id: "a".into(), member_epoch: 1, assignment: Some(vec![(t, 0), (t, 1)]) }
        );
        let b = g.heartbeat(join("b", &["t"]), &topics, now, &LIMITS).unwrap();
        assert_eq!(b.member_epoch, 2);
        assert_eq!(b.assignment.map(|a| a.len()), Some(1));
        // a heartbeats at the epoch it was given (1) and gets the group's with its new
        // assignment; epoch 0 (a join) must name topics, and an epoch it never had is fenced.
        assert_eq!(g.heartbeat(beat("a", 0), &topics, now, &LIMITS).unwrap_err().0, E::InvalidRequest);
        assert_eq!(g.heartbeat(beat("a", 2), &topics, now, &LIMITS).unwrap_err().0, E::FencedMemberEpoch);
        let a = g.heartbeat(beat("a", 1), &topics, now, &LIMITS).unwrap();
        assert_eq!((a.member_epoch, a.assignment.map(|a| a.len())), (2, Some(1)));
        // b, at its epoch, is not fenced by a's heartbeat either. Unchanged: not resent.
        assert_eq!(g.heartbeat(beat("b", 2), &topics, now, &LIMITS).unwrap().assignment, None);
        assert_eq!(g.heartbeat(beat("a", 2), &topics, now, &LIMITS).unwrap().assignment, None);
        // A third member on two partitions: one partition is shared.
        g.heartbeat(join("c", &["t"]), &topics, now, &LIMITS).unwrap();
        let total: usize = g.members.values().map(|m| m.assigned.len()).sum();
        assert_eq!(total, 3);
        assert!(g.members.values().all(|m| m.assigned.len() == 1));
        assert_eq!(g.heartbeat(join("d", &["t"]), &topics, now, &LIMITS).unwrap_err().0, E::GroupMaxSizeReached);
        assert_eq!(g.heartbeat(beat("zz", 3), &topics, now, &LIMITS).unwrap_err().0, E::UnknownMemberId);
    }

    #[test]
    fn leaving_expiring_and_new_partitions_reassign() {
        let t = Uuid::new_v4();
        let mut topics = Fixed([("t".to_string(), (t, 4))].into());
        let mut g = ShareGroup::default();
        let now = Instant::now();
        g.heartbeat(join("a", &["t"]), &topics, now, &LIMITS).unwrap();
        g.heartbeat(join("b", &["t"]), &topics, now, &LIMITS).unwrap();
        let a = g.heartbeat(beat("a", 1), &topics, now, &LIMITS).unwrap();
        assert_eq!(a.assignment.map(|a| a.len()), Some(2));
        let left = g.heartbeat(beat("b", -1), &topics, now, &LIMITS).unwrap();
        assert_eq!(left.member_epoch, -1);
        let a = g.heartbeat(beat("a", 2), &topics, now, &LIMITS).unwrap();
        assert_eq!((a.member_epoch, a.assignment.map(|a| a.len())), (3, Some(4)));
        topics.0.insert("t".into(), (t, 6));
        let a = g.heartbeat(beat("a", 3), &topics, now, &LIMITS).unwrap();
        assert_eq!((a.member_epoch, a.assignment.map(|a| a.len())), (4, Some(6)));
        assert_eq!(g.expire(now + Duration::from_secs(46), LIMITS.session), 1);
        assert_eq!(g.state(), "Empty");
    }
}
