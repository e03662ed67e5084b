//! The coordinator's share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe and
//! their rows in ListGroups. Membership is in memory (see `share_group.rs`); the state of
//! the partitions they read is the share coordinator's (`runnel-share`).

use std::collections::HashMap;

use bytes::Bytes;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError as E;
use runnel_sync::LockExt;

use super::{Coordinator, GroupListing};
use crate::consumer::{Topics, Tp};
use crate::records::{Key, ShareGroupValue};
use crate::share_group::{ShareGroup, ShareHeartbeatIn, ShareHeartbeatOut, ShareLimits};

/// A ShareGroupDescribe answer.
pub struct ShareGroupSummary {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<ShareMemberSummary>,
    /// The topics its members subscribe to or were assigned (DescribeShareGroupOffsets).
    pub topics: Vec<String>,
}

pub struct ShareMemberSummary {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub assigned: Vec<Tp>,
}

impl Coordinator {
    pub(super) fn lock_share(&self) -> MutexGuard<'_, HashMap<String, ShareGroup>> {
        self.share_groups.lock_or_stop()
    }

    fn share_limits(&self) -> ShareLimits {
        ShareLimits {
            session: Duration::from_millis(self.config.share_session_timeout_ms.max(0) as u64),
            max_size: self.config.share_group_max_size,
        }
    }

    /// Whether `group_id` is taken by a group of another type: a consumer group, or a
    /// classic group with members or committed offsets.
    fn other_type(&self, group_id: &str) -> bool {
        let classic = self.lock();
        let taken = classic.get(group_id).is_some_and(|g| !g.is_empty() || !g.offsets.is_empty());
        taken || self.lock_consumer().contains_key(group_id)
    }

    /// ShareGroupHeartbeat. A group id taken by a classic or consumer group is refused. A
    /// change of the group's epoch or topics is durable before the answer.
    pub async fn share_heartbeat(
        &self,
        group_id: &str,
        req: ShareHeartbeatIn,
        topics: &(dyn Topics + Sync),
    ) -> Result<ShareHeartbeatOut, (E, String)> {
        if group_id.is_empty() {
            return Err((E::InvalidGroupId, "empty group id".into()));
        }
        if let Some(e) = self.owner_error(group_id) {
            return Err((e, "this broker does not coordinate the group now".into()));
        }
        if self.other_type(group_id) {
            return Err((E::GroupIdNotFound, format!("Group {group_id} is not a share group.")));
        }
        let (out, written) = {
            let mut groups = self.lock_share();
            let g = groups.entry(group_id.to_string()).or_default();
            let out = g.heartbeat(req, topics, Instant::now(), &self.share_limits());
            let records = g.changes(group_id);
            (out, (!records.is_empty()).then(|| self.log.append(self.partition_for(group_id), records)))
        };
        if let Some(written) = written {
            written.await.map_err(|e| (self.not_durable(group_id), format!("group state not durable: {e}")))?;
        }
        out
    }

    pub fn describe_share(&self, group_id: &str) -> Result<Option<ShareGroupSummary>, E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let groups = self.lock_share();
        let Some(g) = groups.get(group_id) else { return Ok(None) };
        Ok(Some(ShareGroupSummary {
            state: g.state(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            topics: g
                .subscribed_topics()
                .into_iter()
                .chain(g.initialized.iter())
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
            members: g
                .members
                .values()
                .map(|m| ShareMemberSummary {
                    member_id: m.id.clone(),
                    rack_id: m.rack_id.clone(),
                    epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed: m.subscribed.clone(),
                    assigned: m.assigned.iter().copied().collect(),
                })
                .collect(),
        }))
    }

    /// A share group whose offsets are about to change (AlterShareGroupOffsets,
    /// DeleteShareGroupOffsets): created empty if it does not exist, refused while it has
    /// members. `added` join the topics it has read, `removed` leave them. Returns the
    /// topics it had read before the change.
    pub async fn share_offsets_change(
        &self,
        group_id: &str,
        added: &[String],
        removed: &[String],
    ) -> Result<Vec<String>, E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        if self.other_type(group_id) {
            return Err(E::GroupIdNotFound);
        }
        let (before, written) = {
            let mut groups = self.lock_share();
            let g = groups.entry(group_id.to_string()).or_default();
            if !g.members.is_empty() {
                return Err(E::NonEmptyGroup);
            }
            let before = g.initialized.iter().cloned().collect();
            g.initialized.extend(added.iter().cloned());
            for t in removed {
                g.initialized.remove(t);
            }
            let records = g.changes(group_id);
            (before, (!records.is_empty()).then(|| self.log.append(self.partition_for(group_id), records)))
        };
        if let Some(written) = written {
            written.await.map_err(|_| self.not_durable(group_id))?;
        }
        Ok(before)
    }

    /// DeleteGroups of a share group: only an empty one; its record gets a tombstone.
    pub async fn delete_share(&self, group_id: &str) -> Result<bool, E> {
        let written = {
            let mut groups = self.lock_share();
            match groups.get(group_id) {
                None => return Ok(false),
                Some(g) if !g.members.is_empty() => return Err(E::NonEmptyGroup),
                Some(_) => {
                    groups.remove(group_id);
                    let tombstone = vec![(Key::ShareGroup { group: group_id.to_string() }.encode(), None)];
                    self.log.append(self.partition_for(group_id), tombstone)
                }
            }
        };
        written.await.map_err(|_| self.not_durable(group_id))?;
        Ok(true)
    }

    /// A share group read back from the log.
    pub(super) fn restore_share(&self, groups: &mut HashMap<String, ShareGroup>, key: Key, value: Option<Bytes>) {
        let Key::ShareGroup { group } = key else { return };
        match value.map(|raw| ShareGroupValue::decode(raw.clone()).map(|v| (v, raw))) {
            None => {
                groups.remove(&group);
            }
            Some(Ok((v, raw))) => {
                groups.insert(group, ShareGroup::restore(v, raw));
            }
            Some(Err(e)) => tracing::warn!(error = %e, "skipping an unreadable share group record"),
        }
    }

    pub(super) async fn expire_share_members(&self, now: Instant) {
        let session = self.share_limits().session;
        let mut written = Vec::new();
        for (id, g) in self.lock_share().iter_mut() {
            let gone = g.expire(now, session);
            if gone > 0 {
                tracing::info!(group = %id, members = gone, "share group member sessions expired");
                written.push((id.clone(), self.log.append(self.partition_for(id), g.changes(id))));
            }
        }
        for (id, w) in written {
            if let Err(e) = w.await {
                tracing::warn!(group = %id, error = %e, "could not persist a share group's new epoch");
            }
        }
    }

    pub(super) fn share_listings(&self) -> Vec<GroupListing> {
        self.lock_share()
            .iter()
            .map(|(id, g)| GroupListing {
                group_id: id.clone(),
                protocol_type: "share".into(),
                state: g.state(),
                group_type: "share",
            })
            .collect()
    }
}
