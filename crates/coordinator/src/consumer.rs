//! A consumer group under the KIP-848 protocol (`group.protocol=consumer`): members send
//! ConsumerGroupHeartbeat with their subscription and the partitions they own; the
//! coordinator computes the target assignment itself (assignors `uniform` and `range`) and
//! hands each member its part step by step, so that no partition is ever owned by two
//! members: a partition moves to its new owner only after the previous owner stopped
//! reporting it.
//!
//! Epochs: the group epoch grows with every membership or subscription change; the
//! target assignment is computed for it; a member's epoch catches up once it has no
//! partitions left to revoke. OffsetCommit fences on the member epoch (STALE_MEMBER_EPOCH).
//!
//! Durability: [`ConsumerGroup::changes`] turns every change into log records (one for the
//! group's epochs and topics, one per member; a tombstone when a member goes), which the
//! coordinator writes before it answers. A restarted coordinator restores members, epochs
//! and assignments from them, so members carry on where they were.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;
use uuid::Uuid;

use crate::records::{ConsumerGroupValue, ConsumerMemberValue, Key};

/// (topic id, partition).
pub type Tp = (Uuid, i32);

/// What the coordinator needs to know about the cluster's topics.
pub trait Topics {
    /// (id, partition count) of a topic, if it exists.
    fn resolve(&self, name: &str) -> Option<(Uuid, i32)>;
    /// Every topic a regular-expression subscription may match (no internal topics).
    fn names(&self) -> Vec<String>;
}

/// How often regular-expression subscriptions are matched against the topics again, so
/// that new topics are picked up.
const REGEX_REFRESH: Duration = Duration::from_secs(1);

/// A subscription regex as Kafka applies it (RE2 syntax, matching the whole topic name).
fn compile_regex(re: &str) -> Result<regex::Regex, (E, String)> {
    regex::Regex::new(&format!("^(?:{re})$"))
        .map_err(|e| (E::InvalidRegularExpression, format!("invalid regular expression {re}: {e}")))
}

impl CMember {
    fn value(&self) -> ConsumerMemberValue {
        ConsumerMemberValue {
            epoch: self.epoch,
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            assignor: self.assignor.clone(),
            subscribed: self.subscribed.clone(),
            assigned: self.assigned.iter().copied().collect(),
            target: self.target.iter().copied().collect(),
            regex: self.regex.clone(),
            matched: self.matched.clone(),
            rebalance_timeout_ms: self.rebalance_timeout.as_millis().min(i32::MAX as u128) as i32,
        }
    }

    /// Every topic the member subscribes to: by name and through its regex.
    pub fn topics(&self) -> impl Iterator<Item = &String> {
        self.subscribed.iter().chain(self.matched.iter())
    }

    fn subscribes_to(&self, topic: &str) -> bool {
        self.topics().any(|t| t == topic)
    }
}

pub struct CMember {
    pub id: String,
    pub epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    /// Regular-expression subscription and the topics it currently matches.
    pub regex: Option<String>,
    pub matched: Vec<String>,
    pub assignor: Option<String>,
    /// What the member was last told it owns.
    pub assigned: BTreeSet<Tp>,
    /// What the member last reported owning.
    pub owned: BTreeSet<Tp>,
    pub target: BTreeSet<Tp>,
    sent: Option<BTreeSet<Tp>>,
    session_timeout: Duration,
    last_seen: Instant,
    /// How long the member may take to give up partitions it was asked to revoke.
    pub rebalance_timeout: Duration,
    /// Since when it has been asked to revoke partitions it still owns.
    revoking_since: Option<Instant>,
}

pub struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: BTreeMap<String, CMember>,
    /// Topic name → (id, partitions) as of the last target computation.
    topics: BTreeMap<String, (Uuid, i32)>,
    /// What the log holds for this group and for each member (encoded values), so that
    /// only changes are written.
    saved_group: Option<Bytes>,
    saved_members: BTreeMap<String, Bytes>,
    /// Compiled subscription regexes, and when they were last matched against the topics.
    compiled: HashMap<String, regex::Regex>,
    regex_refreshed: Option<Instant>,
}

/// Log records: (key, value), a `None` value being a tombstone.
pub type LogRecords = Vec<(Bytes, Option<Bytes>)>;

pub struct HeartbeatIn {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Option<Vec<String>>,
    /// None: unchanged; an empty string clears it.
    pub regex: Option<String>,
    pub assignor: Option<String>,
    pub owned: Option<Vec<Tp>>,
    pub session_timeout: Duration,
    /// Sent when joining; None: unchanged.
    pub rebalance_timeout: Option<Duration>,
}

/// Kafka's default `max.poll.interval.ms`, which clients send as their rebalance timeout.
pub const REBALANCE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct HeartbeatOut {
    pub member_id: String,
    pub member_epoch: i32,
    /// Present when the member's assignment changed since the last answer.
    pub assignment: Option<Vec<Tp>>,
}

pub const ASSIGNORS: &[&str] = &["uniform", "range"];

impl ConsumerGroup {
    pub fn new(default_assignor: &str) -> ConsumerGroup {
        ConsumerGroup {
            group_epoch: 0,
            assignment_epoch: 0,
            assignor: default_assignor.to_string(),
            members: BTreeMap::new(),
            topics: BTreeMap::new(),
            saved_group: None,
            saved_members: BTreeMap::new(),
            compiled: HashMap::new(),
            regex_refreshed: None,
        }
    }

    fn group_value(&self) -> ConsumerGroupValue {
        ConsumerGroupValue {
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: self.assignor.clone(),
            topics: self.topics.iter().map(|(name, (id, n))| (name.clone(), *id, *n)).collect(),
        }
    }

    /// Records that bring the log up to date with this group: its own record and each
    /// member's if they changed, a tombstone for each member that left. `touched` is the
    /// member a heartbeat came from: unless the group's own record changed (new targets or
    /// regex matches move its epochs), no other member's record can have changed, so only
    /// that one is compared, which keeps a heartbeat's cost independent of the group size.
    pub fn changes(&mut self, group_id: &str, touched: Option<&str>) -> LogRecords {
        let mut out = Vec::new();
        let group = self.group_value().encode();
        let group_changed = self.saved_group.as_ref() != Some(&group);
        if group_changed {
            out.push((Key::ConsumerGroup { group: group_id.into() }.encode(), Some(group.clone())));
            self.saved_group = Some(group);
        }
        let candidates: Vec<&CMember> = match touched {
            Some(id) if !group_changed => self.members.get(id).into_iter().collect(),
            _ => self.members.values().collect(),
        };
        for m in candidates {
            let v = m.value().encode();
            if self.saved_members.get(&m.id) != Some(&v) {
                let key = Key::ConsumerMember { group: group_id.into(), member_id: m.id.clone() };
                out.push((key.encode(), Some(v.clone())));
                self.saved_members.insert(m.id.clone(), v);
            }
        }
        let gone: Vec<String> =
            self.saved_members.keys().filter(|id| !self.members.contains_key(*id)).cloned().collect();
        for id in gone {
            self.saved_members.remove(&id);
            out.push((Key::ConsumerMember { group: group_id.into(), member_id: id }.encode(), None));
        }
        out
    }

    /// Tombstones for everything the log holds about this group (DeleteGroups).
    pub fn tombstones(&self, group_id: &str) -> LogRecords {
        let members = self
            .saved_members
            .keys()
            .map(|id| (Key::ConsumerMember { group: group_id.into(), member_id: id.clone() }.encode(), None));
        let group = self.saved_group.as_ref().map(|_| (Key::ConsumerGroup { group: group_id.into() }.encode(), None));
        members.chain(group).collect()
    }

    /// Replay: the group's own record.
    pub fn restore_group(&mut self, v: ConsumerGroupValue, raw: Bytes) {
        self.group_epoch = v.group_epoch;
        self.assignment_epoch = v.assignment_epoch;
        self.assignor = v.assignor;
        self.topics = v.topics.into_iter().map(|(name, id, n)| (name, (id, n))).collect();
        self.saved_group = Some(raw);
    }

    /// Replay: one member's record (or its tombstone). A restored member's session starts
    /// now; it is assumed to own what it was last given.
    pub fn restore_member(
        &mut self,
        id: &str,
        v: Option<(ConsumerMemberValue, Bytes)>,
        session: Duration,
        now: Instant,
    ) {
        let Some((v, raw)) = v else {
            self.members.remove(id);
            self.saved_members.remove(id);
            return;
        };
        let assigned: BTreeSet<Tp> = v.assigned.into_iter().collect();
        self.members.insert(
            id.to_string(),
            CMember {
                id: id.to_string(),
                epoch: v.epoch,
                instance_id: v.instance_id,
                rack_id: v.rack_id,
                client_id: v.client_id,
                client_host: v.client_host,
                subscribed: v.subscribed,
                regex: v.regex,
                matched: v.matched,
                assignor: v.assignor,
                owned: assigned.clone(),
                assigned,
                target: v.target.into_iter().collect(),
                sent: None,
                session_timeout: session,
                last_seen: now,
                rebalance_timeout: Duration::from_millis(v.rebalance_timeout_ms.max(0) as u64),
                revoking_since: None,
            },
        );
        self.saved_members.insert(id.to_string(), raw);
    }

    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self.members.values().any(|m| m.epoch != self.assignment_epoch || m.assigned != m.target) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// One heartbeat; `topics` answers for the cluster's topics. A new member finds room
    /// only while the group has fewer than `max_members`.
    pub fn heartbeat(
        &mut self,
        req: HeartbeatIn,
        topics: &dyn Topics,
        now: Instant,
        max_members: usize,
    ) -> Result<HeartbeatOut, (E, String)> {
        if req.member_epoch == -1 || req.member_epoch == -2 {
            if self.members.remove(&req.member_id).is_some() {
                self.group_epoch += 1;
            }
            return Ok(HeartbeatOut { member_id: req.member_id, member_epoch: req.member_epoch, assignment: None });
        }
        if let Some(a) = &req.assignor {
            if !ASSIGNORS.contains(&a.as_str()) {
                return Err((E::UnsupportedAssignor, format!("assignor {a} is not one of {ASSIGNORS:?}")));
            }
        }
        if let Some(re) = req.regex.as_deref().filter(|re| !re.is_empty() && !self.compiled.contains_key(*re)) {
            let compiled = compile_regex(re)?;
            self.compiled.insert(re.to_string(), compiled);
        }
        let member_id =
            if req.member_id.is_empty() { Uuid::new_v4().simple().to_string() } else { req.member_id.clone() };
        if req.member_epoch == 0 {
            let rejoin = self.members.contains_key(&member_id)
                || req
                    .instance_id
                    .as_ref()
                    .is_some_and(|i| self.members.values().any(|m| m.instance_id.as_ref() == Some(i)));
            if !rejoin && self.members.len() >= max_members {
                return Err((
                    E::GroupMaxSizeReached,
                    format!("the group has {max_members} members (group.consumer.max.size)"),
                ));
            }
            // A (re)join: a member that lost its state starts over, and so does the group
            // view of it.
            if self.members.remove(&member_id).is_some() {
                self.group_epoch += 1;
            }
            if let Some(inst) = &req.instance_id {
                let previous: Vec<String> = self
                    .members
                    .values()
                    .filter(|m| m.instance_id.as_ref() == Some(inst))
                    .map(|m| m.id.clone())
                    .collect();
                for id in previous {
                    self.members.remove(&id);
                }
            }
            self.members.insert(
                member_id.clone(),
                CMember {
                    id: member_id.clone(),
                    epoch: 0,
                    instance_id: req.instance_id.clone(),
                    rack_id: req.rack_id.clone(),
                    client_id: req.client_id.clone(),
                    client_host: req.client_host.clone(),
                    subscribed: Vec::new(),
                    regex: None,
                    matched: Vec::new(),
                    assignor: None,
                    assigned: BTreeSet::new(),
                    owned: BTreeSet::new(),
                    target: BTreeSet::new(),
                    sent: None,
                    session_timeout: req.session_timeout,
                    last_seen: now,
                    rebalance_timeout: REBALANCE_TIMEOUT_DEFAULT,
                    revoking_since: None,
                },
            );
            self.group_epoch += 1;
        }
        let m = self.members.get_mut(&member_id).ok_or_else(|| (E::UnknownMemberId, "unknown member".to_string()))?;
        if req.member_epoch > 0 && req.member_epoch != m.epoch && req.member_epoch + 1 != m.epoch {
            return Err((E::FencedMemberEpoch, format!("member epoch {} is not {}", req.member_epoch, m.epoch)));
        }
        m.last_seen = now;
        m.session_timeout = req.session_timeout;
        if let Some(t) = req.rebalance_timeout {
            m.rebalance_timeout = t;
        }
        if let Some(owned) = req.owned {
            m.owned = owned.into_iter().collect();
        }
        let mut changed = false;
        if let Some(mut subs) = req.subscribed {
            subs.sort();
            subs.dedup();
            if subs != m.subscribed {
                m.subscribed = subs;
                changed = true;
            }
        }
        if req.assignor.is_some() && req.assignor != m.assignor {
            m.assignor = req.assignor;
            changed = true;
        }
        let mut rematch = false;
        if let Some(re) = req.regex {
            let re = (!re.is_empty()).then_some(re);
            if re != m.regex {
                m.regex = re;
                if m.regex.is_none() {
                    m.matched.clear();
                }
                changed = true;
                rematch = true;
            }
        }
        if changed {
            self.group_epoch += 1;
        }
        self.refresh_regexes(topics, now, rematch);
        self.refresh_target(topics);
        Ok(self.reconcile(&member_id, now))
    }

    /// Matches regex subscriptions against the topics again (when one changed, and at most
    /// every [`REGEX_REFRESH`] otherwise); a member whose matches changed bumps the epoch.
    fn refresh_regexes(&mut self, topics: &dyn Topics, now: Instant, force: bool) {
        if !self.members.values().any(|m| m.regex.is_some()) {
            return;
        }
        if !force && self.regex_refreshed.is_some_and(|t| now.duration_since(t) < REGEX_REFRESH) {
            return;
        }
        self.regex_refreshed = Some(now);
        let mut names = topics.names();
        names.sort();
        let mut changed = false;
        for m in self.members.values_mut() {
            let Some(re) = &m.regex else { continue };
            if !self.compiled.contains_key(re) {
                // Restored from the log: it compiled when the member sent it.
                match compile_regex(re) {
                    Ok(c) => {
                        self.compiled.insert(re.clone(), c);
                    }
                    Err(_) => continue,
                }
            }
            let c = &self.compiled[re];
            let matched: Vec<String> = names.iter().filter(|n| c.is_match(n)).cloned().collect();
            if matched != m.matched {
                m.matched = matched;
                changed = true;
            }
        }
        let used: BTreeSet<&String> = self.members.values().filter_map(|m| m.regex.as_ref()).collect();
        self.compiled.retain(|re, _| used.contains(re));
        if changed {
            self.group_epoch += 1;
        }
    }

    /// Recomputes the target assignment when the group or the topics changed.
    fn refresh_target(&mut self, resolve: &dyn Topics) {
        let names: BTreeSet<&String> = self.members.values().flat_map(|m| m.topics()).collect();
        let topics: BTreeMap<String, (Uuid, i32)> =
            names.into_iter().filter_map(|n| resolve.resolve(n).map(|t| (n.clone(), t))).collect();
        if topics != self.topics {
            self.topics = topics;
            self.group_epoch += 1;
        }
        if self.assignment_epoch == self.group_epoch {
            return;
        }
        // The most requested assignor among members wins; the group default otherwise.
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            *votes.entry(m.assignor.as_deref().unwrap_or(self.assignor.as_str())).or_default() += 1;
        }
        let assignor = votes.iter().max_by_key(|(_, n)| **n).map(|(a, _)| a.to_string()).unwrap_or_default();
        let targets = match assignor.as_str() {
            "range" => self.range(),
            _ => self.uniform(),
        };
        for (id, t) in targets {
            if let Some(m) = self.members.get_mut(&id) {
                m.target = t;
            }
        }
        self.assignment_epoch = self.group_epoch;
    }

    fn subscribers(&self, topic: &str) -> Vec<&String> {
        self.members.values().filter(|m| m.subscribes_to(topic)).map(|m| &m.id).collect()
    }

    /// Each topic's partitions in contiguous ranges over its (sorted) subscribers.
    fn range(&self) -> BTreeMap<String, BTreeSet<Tp>> {
        let mut out: BTreeMap<String, BTreeSet<Tp>> =
            self.members.keys().map(|id| (id.clone(), BTreeSet::new())).collect();
        for (name, (id, count)) in &self.topics {
            let subs = self.subscribers(name);
            if subs.is_empty() {
                continue;
            }
            let (per, extra) = (*count as usize / subs.len(), *count as usize % subs.len());
            let mut p = 0;
            for (i, member) in subs.iter().enumerate() {
                let n = per + usize::from(i < extra);
                for q in p..p + n {
                    out.entry((*member).clone()).or_default().insert((*id, q as i32));
                }
                p += n;
            }
        }
        out
    }

    /// All partitions spread evenly, keeping each where it already is when that fits.
    fn uniform(&self) -> BTreeMap<String, BTreeSet<Tp>> {
        let mut out: BTreeMap<String, BTreeSet<Tp>> =
            self.members.keys().map(|id| (id.clone(), BTreeSet::new())).collect();
        let mut free = Vec::new();
        let all: Vec<(String, Tp)> =
            self.topics.iter().flat_map(|(name, (id, n))| (0..*n).map(move |p| (name.clone(), (*id, p)))).collect();
        let eligible = |name: &str| self.subscribers(name);
        let quota = |name: &str| {
            let n = eligible(name).len().max(1);
            all.len().div_ceil(n)
        };
        for (name, tp) in &all {
            let keeper =
                self.members.values().find(|m| m.target.contains(tp) && m.subscribes_to(name)).map(|m| m.id.clone());
            match keeper {
                Some(k) if out[&k].len() < quota(name) => {
                    out.entry(k).or_default().insert(*tp);
                }
                _ => free.push((name.clone(), *tp)),
            }
        }
        for (name, tp) in free {
            if let Some(m) = eligible(&name).into_iter().min_by_key(|id| (out[*id].len(), (*id).clone())) {
                out.entry(m.clone()).or_default().insert(tp);
            }
        }
        out
    }

    /// Moves a member toward its target: revoke what it must give up at once, add what
    /// nobody else holds or still reports owning; its epoch catches up once nothing it
    /// owns is being revoked.
    fn reconcile(&mut self, member_id: &str, now: Instant) -> HeartbeatOut {
        let taken: BTreeSet<Tp> = self
            .members
            .values()
            .filter(|m| m.id != member_id)
            .flat_map(|m| m.assigned.iter().chain(m.owned.iter()).copied())
            .collect();
        let assignment_epoch = self.assignment_epoch;
        let m = self.members.get_mut(member_id).expect("member exists: inserted or checked by the caller");
        let mut next: BTreeSet<Tp> = m.assigned.intersection(&m.target).copied().collect();
        let revoking = m.owned.iter().any(|tp| !m.target.contains(tp));
        m.revoking_since = if revoking { Some(m.revoking_since.unwrap_or(now)) } else { None };
        if !revoking {
            next.extend(m.target.iter().filter(|tp| !taken.contains(tp)).copied());
            m.epoch = assignment_epoch;
        }
        m.assigned = next;
        let assignment = (m.sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.iter().copied().collect());
        if assignment.is_some() {
            m.sent = Some(m.assigned.clone());
        }
        HeartbeatOut { member_id: m.id.clone(), member_epoch: m.epoch, assignment }
    }

    /// Drops members whose session ran out, and members that held on to partitions they
    /// were asked to revoke for longer than their rebalance timeout. Returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.members.len();
        self.members.retain(|_, m| {
            let alive = now.duration_since(m.last_seen) <= m.session_timeout;
            let stuck = m.revoking_since.is_some_and(|t| now.duration_since(t) > m.rebalance_timeout);
            alive && !stuck
        });
        let gone = before - self.members.len();
        if gone > 0 {
            self.group_epoch += 1;
        }
        gone
    }

    /// OffsetCommit from a member of this group: it must exist and be at its epoch.
    pub fn check_commit(&self, member_id: &str, epoch: i32) -> Result<(), E> {
        match self.members.get(member_id) {
            None => Err(E::UnknownMemberId),
            Some(m) if m.epoch != epoch => Err(E::StaleMemberEpoch),
            Some(_) => Ok(()),
        }
    }

    pub fn topic_name(&self, id: Uuid) -> Option<&str> {
        self.topics.iter().find(|(_, (tid, _))| *tid == id).map(|(n, _)| n.as_str())
    }
}
