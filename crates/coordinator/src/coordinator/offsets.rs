//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and offset retention
//! (KIP-211). The same coordinator and the same locks as the groups (lock order: `groups`
//! before `consumer_groups`), kept apart from the membership protocols.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;

use super::{now_ms, CommittedOffsets, Coordinator};
use crate::group::{Group, State};
use crate::records::{Key, OffsetValue};

impl Coordinator {
    /// OffsetCommit: checks membership, writes the commits durably, then applies them.
    /// `offsets`: (topic, partition, offset, leader epoch, metadata). Returns one error per
    /// offset, or a group-level error for all of them.
    pub async fn commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        offsets: Vec<(String, i32, i64, i32, String)>,
    ) -> Result<Vec<Result<(), E>>, E> {
        self.begin_commit(group_id, generation, member_id, instance_id, false)?;
        let results = self.write_commits(group_id, offsets).await;
        self.end_commit(group_id);
        results
    }

    /// The checks before a commit (the group is served here; the member, if any, is in the
    /// current generation), then the commit counts as pending until [`end_commit`]. A
    /// transactional commit (KIP-447) names a member only when the producer knows its
    /// group metadata; without one, nothing about membership is checked.
    ///
    /// [`end_commit`]: Coordinator::end_commit
    fn begin_commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        transactional: bool,
    ) -> Result<(), E> {
        if group_id.is_empty() {
            return Err(E::InvalidGroupId);
        }
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let mut groups = self.lock();
        let now = Instant::now();
        let g = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id, now));
        if !transactional || !member_id.is_empty() || generation >= 0 {
            let consumer = self.lock_consumer();
            match consumer.get(group_id).filter(|cg| !cg.members.is_empty()) {
                // KIP-848 groups fence commits on the member epoch.
                Some(cg) if transactional || !member_id.is_empty() => cg.check_commit(member_id, generation)?,
                Some(_) => return Err(E::UnknownMemberId),
                None => g.check_commit(generation, member_id, instance_id)?,
            }
        }
        g.pending_commits += 1;
        Ok(())
    }

    fn end_commit(&self, group_id: &str) {
        if let Some(g) = self.lock().get_mut(group_id) {
            g.pending_commits = g.pending_commits.saturating_sub(1);
        }
    }

    /// The records of a commit, and each offset's answer (metadata past
    /// `offset.metadata.max.bytes` is refused), and the values to apply once durable.
    #[allow(clippy::type_complexity)]
    fn offset_records(
        &self,
        group_id: &str,
        offsets: Vec<(String, i32, i64, i32, String)>,
    ) -> (Vec<Result<(), E>>, Vec<(Bytes, Option<Bytes>)>, Vec<((String, i32), OffsetValue)>) {
        let ts = now_ms();
        let mut results = Vec::with_capacity(offsets.len());
        let mut records = Vec::new();
        let mut values = Vec::new();
        for (topic, partition, offset, leader_epoch, metadata) in offsets {
            if metadata.len() > self.config.offset_metadata_bytes_max {
                results.push(Err(E::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue { offset, leader_epoch, metadata, commit_timestamp: ts };
            let key = Key::Offset { group: group_id.to_string(), topic: topic.clone(), partition };
            records.push((key.encode(), Some(value.encode())));
            values.push(((topic, partition), value));
            results.push(Ok(()));
        }
        (results, records, values)
    }

    /// TxnOffsetCommit: offsets committed in a producer's transaction. Written to the log in
    /// the transaction (so its marker settles them), kept aside until then: the commit
    /// marker makes them the group's offsets, the abort marker drops them
    /// ([`Coordinator::complete_txn`]). With a member id or a generation (KIP-447), the
    /// member must be in the group at that generation, as for OffsetCommit.
    #[allow(clippy::too_many_arguments)]
    pub async fn txn_commit(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        offsets: Vec<(String, i32, i64, i32, String)>,
    ) -> Result<Vec<Result<(), E>>, E> {
        self.begin_commit(group_id, generation, member_id, instance_id, true)?;
        let (results, records, pending) = self.offset_records(group_id, offsets);
        let written = match records.is_empty() {
            true => Ok(()),
            false => self.log.append_txn(self.partition_for(group_id), producer_id, producer_epoch, records).await,
        };
        let mut groups = self.lock();
        let now = Instant::now();
        let g = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id, now));
        g.pending_commits = g.pending_commits.saturating_sub(1);
        if let Err(e) = written {
            drop(groups);
            tracing::warn!(group = group_id, error = %e, "transactional offset commit not durable");
            return Err(self.not_durable(group_id));
        }
        if !pending.is_empty() {
            g.txn_offsets.entry(producer_id).or_default().extend(pending);
        }
        Ok(results)
    }

    /// A producer's transaction ended on offsets-log partition `partition` (its marker is
    /// committed there): the offsets it committed for the partition's groups take effect,
    /// or, aborted, go.
    /// While the partition is loading, the load applies it once done.
    pub fn complete_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        {
            let mut owned = self.lock_owned();
            if owned.loading.contains(&partition) {
                owned.ended_while_loading.push((partition, producer_id, commit));
                return;
            }
        }
        let parts = self.log.partitions();
        end_txn_in(&mut self.lock(), partition, parts, producer_id, commit);
    }

    /// The partitions among `partitions` with offsets committed in a transaction that has
    /// not ended (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them).
    pub fn unstable(&self, group_id: &str, partitions: &[(String, i32)]) -> Vec<(String, i32)> {
        let groups = self.lock();
        let Some(g) = groups.get(group_id) else { return Vec::new() };
        partitions.iter().filter(|k| g.txn_offsets.values().any(|o| o.contains_key(k))).cloned().collect()
    }

    async fn write_commits(
        &self,
        group_id: &str,
        offsets: Vec<(String, i32, i64, i32, String)>,
    ) -> Result<Vec<Result<(), E>>, E> {
        let (results, records, applied) = self.offset_records(group_id, offsets);
        if !records.is_empty() {
            if let Err(e) = self.persist(group_id, records).await {
                tracing::warn!(group = group_id, error = %e, "offset commit not durable");
                return Err(self.not_durable(group_id));
            }
            let mut groups = self.lock();
            let now = Instant::now();
            let g = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id, now));
            g.offsets.extend(applied);
        }
        Ok(results)
    }

    /// Offset retention (KIP-211), run every `offsets.retention.check.interval.ms`. Offsets
    /// of an empty group expire `offsets.retention.minutes` after it became empty; a group
    /// that only ever committed (no members) loses each offset that long after its commit;
    /// a group with members keeps the offsets of topics they subscribe to and loses the
    /// others by commit time. An empty group left without offsets is deleted. Returns how
    /// many offsets expired.
    pub async fn expire_offsets(&self) -> usize {
        let now = now_ms();
        let retention = self.config.offsets_retention_ms;
        let expired_by = |since: i64| since.saturating_add(retention) <= now;
        let mut writes = Vec::new();
        let mut expired_total = 0;
        {
            let mut groups = self.lock();
            let mut consumer = self.lock_consumer();
            for g in groups.values().filter(|g| g.pending_commits == 0) {
                let cg_members = consumer.get(&g.id).filter(|cg| !cg.members.is_empty());
                // Which offsets can expire, and from when: a live group keeps the topics its
                // members subscribe to; an empty one counts from when it emptied (or, if it
                // never had members, from each commit).
                let (subscribed, empty_since): (HashSet<String>, Option<i64>) = if let Some(cg) = cg_members {
                    (cg.members.values().flat_map(|m| m.topics().cloned()).collect(), None)
                } else if g.state == State::Empty {
                    (HashSet::new(), g.protocol_type.is_some().then_some(g.state_timestamp))
                } else if g.protocol_type.as_deref() == Some("consumer") {
                    (g.subscribed_topics(), None)
                } else {
                    continue;
                };
                let expired: Vec<(String, i32)> = g
                    .offsets
                    .iter()
                    .filter(|((t, _), v)| {
                        !subscribed.contains(t) && expired_by(empty_since.unwrap_or(v.commit_timestamp))
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                let dead = g.state == State::Empty
                    && g.txn_offsets.is_empty()
                    && !g.has_pending_members()
                    && cg_members.is_none()
                    && expired.len() == g.offsets.len();
                if expired.is_empty() && !dead {
                    continue;
                }
                let mut records: Vec<(Bytes, Option<Bytes>)> = expired
                    .iter()
                    .map(|(topic, partition)| {
                        let key = Key::Offset { group: g.id.clone(), topic: topic.clone(), partition: *partition };
                        (key.encode(), None)
                    })
                    .collect();
                if dead {
                    records.push((Key::Group { group: g.id.clone() }.encode(), None));
                    records.extend(consumer.get(&g.id).map(|cg| cg.tombstones(&g.id)).unwrap_or_default());
                }
                expired_total += expired.len();
                // Appended under the lock: the tombstones take their place in the log
                // before any later commit to this group.
                let written = self.log.append(self.partition_for(&g.id), records);
                writes.push((g.id.clone(), expired, dead, written));
            }
            // Applied at once: a commit that arrives now lands after the tombstones in the
            // log and in memory alike.
            for (id, expired, dead, _) in &writes {
                if *dead {
                    groups.remove(id);
                    consumer.remove(id);
                } else if let Some(g) = groups.get_mut(id) {
                    for k in expired {
                        g.offsets.remove(k);
                    }
                }
            }
        }
        for (id, expired, dead, written) in writes {
            match written.await {
                Ok(()) => {
                    tracing::info!(group = %id, offsets = expired.len(), deleted = dead, "expired committed offsets")
                }
                // Not durable: after a restart the offsets come back and expire again.
                Err(e) => tracing::warn!(group = %id, error = %e, "offset expiry not durable"),
            }
        }
        expired_total
    }

    /// Committed offsets of a group: for the given partitions, or all when `None`.
    pub fn fetch(&self, group_id: &str, partitions: Option<&[(String, i32)]>) -> Result<CommittedOffsets, E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let groups = self.lock();
        let offsets = groups.get(group_id).map(|g| &g.offsets);
        Ok(match partitions {
            Some(list) => list.iter().map(|k| (k.clone(), offsets.and_then(|o| o.get(k).cloned()))).collect(),
            None => offsets.map(|o| o.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect()).unwrap_or_default(),
        })
    }

    /// OffsetDelete: refuses partitions of topics the group's members subscribe to.
    pub async fn delete_offsets(&self, group_id: &str, partitions: &[(String, i32)]) -> Result<Vec<Result<(), E>>, E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let (results, records, removed) = {
            let groups = self.lock();
            let Some(g) = groups.get(group_id) else { return Err(E::GroupIdNotFound) };
            let mut subscribed = g.subscribed_topics();
            if let Some(cg) = self.lock_consumer().get(group_id) {
                subscribed.extend(cg.members.values().flat_map(|m| m.topics().cloned()));
            }
            let mut results = Vec::new();
            let mut records = Vec::new();
            let mut removed = Vec::new();
            for (topic, partition) in partitions {
                if subscribed.contains(topic) {
                    results.push(Err(E::GroupSubscribedToTopic));
                    continue;
                }
                let k = (topic.clone(), *partition);
                if g.offsets.contains_key(&k) {
                    let key = Key::Offset { group: group_id.into(), topic: topic.clone(), partition: *partition };
                    records.push((key.encode(), None));
                    removed.push(k);
                }
                results.push(Ok(()));
            }
            (results, records, removed)
        };
        if !records.is_empty() {
            if let Err(e) = self.persist(group_id, records).await {
                tracing::warn!(group = group_id, error = %e, "offset deletion not durable");
                return Err(self.not_durable(group_id));
            }
            let mut groups = self.lock();
            if let Some(g) = groups.get_mut(group_id) {
                for k in &removed {
                    g.offsets.remove(k);
                }
            }
        }
        Ok(results)
    }
}

/// Ends a producer's transaction for the groups of offsets-log partition `partition`: its
/// offsets take effect, or (aborted) go.
pub(super) fn end_txn_in(
    groups: &mut HashMap<String, Group>,
    partition: i32,
    parts: i32,
    producer_id: i64,
    commit: bool,
) {
    for (id, g) in groups.iter_mut() {
        if crate::records::partition_for(id, parts) != partition {
            continue;
        }
        if let Some(offsets) = g.txn_offsets.remove(&producer_id) {
            if commit {
                g.offsets.extend(offsets);
            }
        }
    }
}
