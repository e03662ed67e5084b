//! The coordinator: all groups behind one lock, persistence through [`GroupLog`], and
//! waiting for rebalances outside the lock. Committed offsets (OffsetCommit, OffsetFetch,
//! OffsetDelete, retention) are in `coordinator/offsets.rs`, a child module so that it
//! shares the coordinator's private state without widening its visibility.

use runnel_sync::LockExt;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;

use crate::consumer::{ConsumerGroup, HeartbeatIn, HeartbeatOut, Topics, Tp};
use crate::group::{Group, JoinRequest, JoinResult, Pending, State, SyncResult, Timing};
use crate::records::{partition_for, ConsumerGroupValue, ConsumerMemberValue, GroupValue, Key, OffsetValue};
use crate::share_group::ShareGroup;

mod offsets;
mod share;

pub use share::{ShareGroupSummary, ShareMemberSummary};

pub type LogFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// A coordinator's records (key, value; a `None` value is a tombstone).
pub type Records = Vec<(Bytes, Option<Bytes>)>;

/// A partition of a coordinator's log as read back.
#[derive(Debug, Default)]
pub struct Replay {
    /// Every record in effect, in the order it took effect: records written in a
    /// transaction appear where its commit marker is (those of aborted transactions not at
    /// all).
    pub records: Records,
    /// Records of transactions still open at the end of the log, by producer id.
    pub open: Vec<(i64, Records)>,
}

/// Where the coordinator keeps its records: the partitions of `__consumer_offsets`.
/// Contract: `append` places the records in the log during the call (so callers order
/// writes by calling it under their own lock) and its future resolves once they are durable
/// (as an acks=all produce would); later reads see them in order. `append_txn` writes
/// records in a producer's transaction (TxnOffsetCommit): they take effect when the
/// transaction's commit marker is written. `read_all` reads a partition back.
pub trait GroupLog: Send + Sync + 'static {
    fn partitions(&self) -> i32;
    fn append(&self, partition: i32, records: Records) -> LogFuture;
    fn append_txn(&self, partition: i32, producer_id: i64, producer_epoch: i16, records: Records) -> LogFuture;
    fn read_all(&self, partition: i32) -> Result<Replay, String>;
    /// This broker leads the partition, so its coordinator is (or is about to be) the one
    /// that reads it back and serves its groups.
    fn leads(&self, partition: i32) -> bool;
}

#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub session_timeout_ms_min: i32,
    pub session_timeout_ms_max: i32,
    pub initial_rebalance_delay_ms: u64,
    pub offset_metadata_bytes_max: usize,
    /// KIP-848 groups: session timeout and heartbeat interval the coordinator imposes.
    pub consumer_session_timeout_ms: i32,
    pub consumer_heartbeat_interval_ms: i32,
    pub consumer_default_assignor: String,
    /// `offsets.retention.minutes` in ms (KIP-211).
    pub offsets_retention_ms: i64,
    /// `group.max.size` (classic groups, members and member ids handed out but not yet
    /// joined) and `group.consumer.max.size` (KIP-848 groups): a new member past it gets
    /// GROUP_MAX_SIZE_REACHED.
    pub group_max_size: usize,
    pub consumer_group_max_size: usize,
    /// Share groups: `group.share.session.timeout.ms`, `group.share.max.size`.
    pub share_session_timeout_ms: i32,
    pub share_group_max_size: usize,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            session_timeout_ms_min: 6_000,
            session_timeout_ms_max: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            offset_metadata_bytes_max: 4096,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_default_assignor: "uniform".into(),
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            group_max_size: i32::MAX as usize,
            consumer_group_max_size: i32::MAX as usize,
            share_session_timeout_ms: 45_000,
            share_group_max_size: 200,
        }
    }
}

pub type Committed = OffsetValue;
/// OffsetFetch's answer: each (topic, partition) asked for, with its commit if any.
pub type CommittedOffsets = Vec<((String, i32), Option<Committed>)>;

pub struct MemberSummary {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

pub struct GroupSummary {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberSummary>,
}

/// A ConsumerGroupDescribe answer (KIP-848 groups).
pub struct ConsumerGroupSummary {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberSummary>,
}

pub struct ConsumerMemberSummary {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub regex: Option<String>,
    pub assigned: Vec<Tp>,
    pub target: Vec<Tp>,
}

/// One ListGroups row.
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// "classic" or "consumer".
    pub group_type: &'static str,
}

/// Which partitions of the offsets log this coordinator serves. A single broker serves
/// them all; in a cluster, the leader of a partition serves the groups it holds, once it
/// has read them back (Kafka's election/resignation of a group coordinator).
#[derive(Default)]
struct Owned {
    loaded: HashSet<i32>,
    loading: HashSet<i32>,
    /// Transactions whose marker landed on a partition while it was loading, in order:
    /// (partition, producer id, committed). The load may have read the log before the
    /// marker, so it applies them once it has rebuilt the partition's groups (a load that
    /// read the marker finds nothing left to apply).
    ended_while_loading: Vec<(i32, i64, bool)>,
}

pub struct Coordinator {
    /// Lock order: `groups`, then `consumer_groups`, then `share_groups`.
    groups: Mutex<HashMap<String, Group>>,
    consumer_groups: Mutex<HashMap<String, ConsumerGroup>>,
    share_groups: Mutex<HashMap<String, ShareGroup>>,
    owned: Mutex<Owned>,
    log: Arc<dyn GroupLog>,
    config: CoordinatorConfig,
}

fn now_ms() -> i64 {
    runnel_sync::clock::wall_ms()
}

impl Coordinator {
    pub fn new(log: Arc<dyn GroupLog>, config: CoordinatorConfig) -> Coordinator {
        Coordinator {
            groups: Mutex::new(HashMap::new()),
            consumer_groups: Mutex::new(HashMap::new()),
            share_groups: Mutex::new(HashMap::new()),
            owned: Mutex::new(Owned::default()),
            log,
            config,
        }
    }

    fn lock_owned(&self) -> MutexGuard<'_, Owned> {
        self.owned.lock_or_stop()
    }

    /// Why this coordinator cannot serve the group now, if it cannot: another broker
    /// coordinates it (NOT_COORDINATOR, the client looks it up again), or its partition is
    /// led here but not read back yet (COORDINATOR_LOAD_IN_PROGRESS, the client retries
    /// here, as it does with Kafka after a restart or a failover).
    pub fn owner_error(&self, group_id: &str) -> Option<E> {
        let p = self.partition_for(group_id);
        let loading = {
            let owned = self.lock_owned();
            if owned.loaded.contains(&p) {
                return None;
            }
            owned.loading.contains(&p)
        };
        if loading || self.log.leads(p) {
            Some(E::CoordinatorLoadInProgress)
        } else {
            Some(E::NotCoordinator)
        }
    }

    /// The partitions of the offsets log this coordinator serves.
    pub fn loaded_partitions(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.lock_owned().loaded.iter().copied().collect();
        v.sort_unstable();
        v
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock_or_stop()
    }

    fn lock_consumer(&self) -> MutexGuard<'_, HashMap<String, ConsumerGroup>> {
        self.consumer_groups.lock_or_stop()
    }

    fn has_consumer_members(&self, group_id: &str) -> bool {
        self.lock_consumer().get(group_id).is_some_and(|g| !g.members.is_empty())
    }

    pub fn consumer_heartbeat_interval_ms(&self) -> i32 {
        self.config.consumer_heartbeat_interval_ms
    }

    fn consumer_session(&self) -> Duration {
        Duration::from_millis(self.config.consumer_session_timeout_ms.max(0) as u64)
    }

    /// ConsumerGroupHeartbeat (KIP-848). `resolve` maps topic names to (id, partitions).
    /// Whatever the heartbeat changed is durable in the log before the answer goes out.
    pub async fn consumer_heartbeat(
        &self,
        group_id: &str,
        mut req: HeartbeatIn,
        topics: &(dyn Topics + Sync),
    ) -> Result<HeartbeatOut, (E, String)> {
        if group_id.is_empty() {
            return Err((E::InvalidGroupId, "empty group id".into()));
        }
        if let Some(e) = self.owner_error(group_id) {
            return Err((e, "this broker does not coordinate the group now".into()));
        }
        let (out, written) = {
            let classic = self.lock();
            if classic.get(group_id).is_some_and(|g| !g.is_empty()) {
                return Err((E::InconsistentGroupProtocol, "the group has classic-protocol members".into()));
            }
            req.session_timeout = self.consumer_session();
            let mut groups = self.lock_consumer();
            let g = groups
                .entry(group_id.to_string())
                .or_insert_with(|| ConsumerGroup::new(&self.config.consumer_default_assignor));
            let out = g.heartbeat(req, topics, Instant::now(), self.config.consumer_group_max_size);
            let touched = out.as_ref().ok().map(|o| o.member_id.as_str());
            let records = g.changes(group_id, touched);
            (out, (!records.is_empty()).then(|| self.log.append(self.partition_for(group_id), records)))
        };
        if let Some(written) = written {
            written.await.map_err(|e| (self.not_durable(group_id), format!("group state not durable: {e}")))?;
        }
        out
    }

    pub fn describe_consumer(&self, group_id: &str) -> Result<Option<ConsumerGroupSummary>, E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let groups = self.lock_consumer();
        let Some(g) = groups.get(group_id) else { return Ok(None) };
        Ok(Some(ConsumerGroupSummary {
            state: g.state(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.assignor.clone(),
            members: g
                .members
                .values()
                .map(|m| ConsumerMemberSummary {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed: m.subscribed.clone(),
                    regex: m.regex.clone(),
                    assigned: m.assigned.iter().copied().collect(),
                    target: m.target.iter().copied().collect(),
                })
                .collect(),
        }))
    }

    fn timing(&self) -> Timing {
        Timing {
            initial_rebalance_delay: Duration::from_millis(self.config.initial_rebalance_delay_ms),
            now: Instant::now(),
            now_ms: now_ms(),
        }
    }

    /// Replays every partition of the offsets log and serves them all (a single broker).
    pub fn load(&self) -> Result<usize, String> {
        let mut records = 0;
        for p in 0..self.log.partitions() {
            records += self.load_partition(p)?;
        }
        Ok(records)
    }

    /// Reads one partition of the offsets log back (last write wins, tombstones delete) and
    /// starts serving its groups; whatever was in memory for them is replaced. Returns how
    /// many records it read. Until it returns, the groups answer COORDINATOR_LOAD_IN_PROGRESS.
    pub fn load_partition(&self, p: i32) -> Result<usize, String> {
        self.lock_owned().loading.insert(p);
        let read = self.log.read_all(p);
        let mut groups = self.lock();
        let mut consumer = self.lock_consumer();
        let parts = self.log.partitions();
        groups.retain(|id, _| partition_for(id, parts) != p);
        consumer.retain(|id, _| partition_for(id, parts) != p);
        let mut share = self.lock_share();
        share.retain(|id, _| partition_for(id, parts) != p);
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                self.lock_owned().loading.remove(&p);
                return Err(e);
            }
        };
        let now = Instant::now();
        let records = read.records.len();
        for (key, value) in read.records {
            let key = match Key::decode(key) {
                Ok(k) => k,
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "skipping unreadable offsets-log key");
                    continue;
                }
            };
            if let Key::ShareGroup { .. } = key {
                self.restore_share(&mut share, key, value);
                continue;
            }
            let group = groups.entry(key.group().to_string()).or_insert_with(|| Group::new(key.group(), now));
            match (key, value) {
                (Key::Offset { topic, partition, .. }, Some(v)) => match OffsetValue::decode(v) {
                    Ok(v) => {
                        group.offsets.insert((topic, partition), v);
                    }
                    Err(e) => tracing::warn!(error = %e, "skipping unreadable offset commit"),
                },
                (Key::Offset { topic, partition, .. }, None) => {
                    group.offsets.remove(&(topic, partition));
                }
                (Key::Group { .. }, Some(v)) => match GroupValue::decode(v) {
                    Ok(v) => group.restore(v, now),
                    Err(e) => tracing::warn!(error = %e, "skipping unreadable group metadata"),
                },
                (Key::Group { group: id }, None) => {
                    groups.remove(&id);
                }
                (Key::ConsumerGroup { group: id }, Some(raw)) => match ConsumerGroupValue::decode(raw.clone()) {
                    Ok(v) => consumer
                        .entry(id)
                        .or_insert_with(|| ConsumerGroup::new(&self.config.consumer_default_assignor))
                        .restore_group(v, raw),
                    Err(e) => tracing::warn!(error = %e, "skipping unreadable consumer group record"),
                },
                (Key::ConsumerGroup { group: id }, None) => {
                    consumer.remove(&id);
                }
                // Read above, before a classic group would be made for its id.
                (Key::ShareGroup { .. }, _) => {}
                (Key::ConsumerMember { group: id, member_id }, value) => {
                    let decoded = match value.map(|raw| ConsumerMemberValue::decode(raw.clone()).map(|v| (v, raw))) {
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "skipping unreadable consumer member record");
                            continue;
                        }
                        Some(Ok(v)) => Some(v),
                        None => None,
                    };
                    consumer
                        .entry(id)
                        .or_insert_with(|| ConsumerGroup::new(&self.config.consumer_default_assignor))
                        .restore_member(&member_id, decoded, self.consumer_session(), now);
                }
            }
        }
        for (producer_id, open) in read.open {
            for (key, value) in open {
                if let (Ok(Key::Offset { group, topic, partition }), Some(v)) = (Key::decode(key), value) {
                    match OffsetValue::decode(v) {
                        Ok(v) => {
                            let g = groups.entry(group.clone()).or_insert_with(|| Group::new(&group, now));
                            g.txn_offsets.entry(producer_id).or_default().insert((topic, partition), v);
                        }
                        Err(e) => tracing::warn!(error = %e, "skipping an unreadable transactional offset commit"),
                    }
                }
            }
        }
        let ended = {
            let mut owned = self.lock_owned();
            owned.loading.remove(&p);
            owned.loaded.insert(p);
            let (ended, others) = owned.ended_while_loading.drain(..).partition(|(q, _, _)| *q == p);
            owned.ended_while_loading = others;
            ended
        };
        for (_, producer_id, commit) in ended {
            offsets::end_txn_in(&mut groups, p, parts, producer_id, commit);
        }
        groups.retain(|id, g| {
            partition_for(id, parts) != p
                || !(g.is_empty() && g.offsets.is_empty() && g.txn_offsets.is_empty() && g.generation == 0)
        });
        Ok(records)
    }

    /// Stops serving one partition's groups (its leadership moved away): they leave
    /// memory, and members waiting on a rebalance are answered NOT_COORDINATOR.
    pub fn unload_partition(&self, p: i32) {
        let parts = self.log.partitions();
        let mut groups = self.lock();
        let mut consumer = self.lock_consumer();
        {
            let mut owned = self.lock_owned();
            owned.loaded.remove(&p);
            owned.loading.remove(&p);
            owned.ended_while_loading.retain(|(q, _, _)| *q != p);
        }
        groups.retain(|id, _| partition_for(id, parts) != p);
        consumer.retain(|id, _| partition_for(id, parts) != p);
        self.lock_share().retain(|id, _| partition_for(id, parts) != p);
    }

    pub fn partition_for(&self, group: &str) -> i32 {
        partition_for(group, self.log.partitions())
    }

    /// A waiting member's group left memory: it moved to another coordinator, or (one
    /// broker) it was removed.
    fn gone(&self, group_id: &str) -> E {
        self.owner_error(group_id).unwrap_or(E::UnknownMemberId)
    }

    /// A write that did not become durable: the client finds the coordinator again.
    fn not_durable(&self, group_id: &str) -> E {
        self.owner_error(group_id).unwrap_or(E::CoordinatorNotAvailable)
    }

    async fn persist(&self, group: &str, records: Vec<(Bytes, Option<Bytes>)>) -> Result<(), String> {
        self.log.append(self.partition_for(group), records).await
    }

    async fn persist_group(&self, group: &str, value: GroupValue) {
        let record = (Key::Group { group: group.to_string() }.encode(), Some(value.encode()));
        if let Err(e) = self.persist(group, vec![record]).await {
            // Losing group metadata costs a rebalance after a restart, never offsets.
            tracing::warn!(group, error = %e, "could not persist group metadata");
        }
    }

    pub async fn join(&self, group_id: &str, req: JoinRequest) -> JoinResult {
        if group_id.is_empty() {
            return JoinResult::error(E::InvalidGroupId, &req.member_id);
        }
        let c = &self.config;
        if req.session_timeout_ms < c.session_timeout_ms_min || req.session_timeout_ms > c.session_timeout_ms_max {
            return JoinResult::error(E::InvalidSessionTimeout, &req.member_id);
        }
        if req.protocol_type.is_empty() || req.protocols.is_empty() {
            return JoinResult::error(E::InconsistentGroupProtocol, &req.member_id);
        }
        if let Some(e) = self.owner_error(group_id) {
            return JoinResult::error(e, &req.member_id);
        }
        let member_id = req.member_id.clone();
        let t = self.timing();
        let pending = {
            let mut groups = self.lock();
            if self.has_consumer_members(group_id) {
                return JoinResult::error(E::InconsistentGroupProtocol, &member_id);
            }
            let g = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id, t.now));
            g.join(req, &t, c.group_max_size)
        };
        match pending {
            Pending::Now(r) => r,
            // The group left memory while the member waited: its coordinator moved.
            Pending::Wait(rx) => rx.await.unwrap_or_else(|_| JoinResult::error(self.gone(group_id), &member_id)),
        }
    }

    pub async fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        if let Some(e) = self.owner_error(group_id) {
            return SyncResult::error(e);
        }
        let t = self.timing();
        let (pending, stable) = {
            let mut groups = self.lock();
            match groups.get_mut(group_id) {
                Some(g) => g.sync(generation, member_id, instance_id, assignments, &t),
                None => (Pending::Now(SyncResult::error(E::UnknownMemberId)), None),
            }
        };
        if let Some(value) = stable {
            self.persist_group(group_id, value).await;
        }
        match pending {
            Pending::Now(r) => r,
            Pending::Wait(rx) => rx.await.unwrap_or_else(|_| SyncResult::error(self.gone(group_id))),
        }
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let t = self.timing();
        match self.lock().get_mut(group_id) {
            Some(g) => g.heartbeat(generation, member_id, instance_id, &t),
            None => Err(E::UnknownMemberId),
        }
    }

    /// LeaveGroup; one result per (member id, instance id).
    pub async fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Result<Vec<Result<(), E>>, E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let t = self.timing();
        let (results, empty_value) = {
            let mut groups = self.lock();
            let Some(g) = groups.get_mut(group_id) else { return Err(E::UnknownMemberId) };
            let results: Vec<Result<(), E>> =
                members.iter().map(|(id, inst)| g.leave(id, inst.as_deref(), &t)).collect();
            (results, (g.state == State::Empty).then(|| g.value()))
        };
        if let Some(v) = empty_value {
            self.persist_group(group_id, v).await;
        }
        Ok(results)
    }

    /// Periodic work: session timeouts and rebalance deadlines.
    pub async fn tick(&self) {
        let t = self.timing();
        let mut written = Vec::new();
        for (id, g) in self.lock_consumer().iter_mut() {
            let gone = g.expire(t.now);
            if gone > 0 {
                tracing::info!(group = %id, members = gone, "consumer-protocol member sessions expired");
                written.push((id.clone(), self.log.append(self.partition_for(id), g.changes(id, None))));
            }
        }
        self.expire_share_members(t.now).await;
        for (id, w) in written {
            if let Err(e) = w.await {
                tracing::warn!(group = %id, error = %e, "could not persist expired members");
            }
        }
        let emptied: Vec<(String, GroupValue)> = {
            let mut groups = self.lock();
            groups.values_mut().filter_map(|g| g.tick(&t).then(|| (g.id.clone(), g.value()))).collect()
        };
        for (id, v) in emptied {
            self.persist_group(&id, v).await;
        }
    }

    pub fn describe(&self, group_id: &str) -> Result<Option<GroupSummary>, E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let groups = self.lock();
        let Some(g) = groups.get(group_id) else { return Ok(None) };
        let protocol = g.protocol.clone().unwrap_or_default();
        Ok(Some(GroupSummary {
            state: g.state.name(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            members: g
                .members
                .values()
                .map(|m| MemberSummary {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if g.state == State::Stable { m.metadata(&protocol) } else { Bytes::new() },
                    assignment: if g.state == State::Stable { m.assignment.clone() } else { Bytes::new() },
                })
                .collect(),
        }))
    }

    /// Every group, classic or KIP-848.
    pub fn list(&self) -> Vec<GroupListing> {
        let groups = self.lock();
        let consumer = self.lock_consumer();
        let mut out: Vec<GroupListing> = consumer
            .iter()
            .map(|(id, g)| GroupListing {
                group_id: id.clone(),
                protocol_type: "consumer".into(),
                state: g.state(),
                group_type: "consumer",
            })
            .collect();
        out.extend(groups.values().filter(|g| !consumer.contains_key(&g.id)).map(|g| GroupListing {
            group_id: g.id.clone(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            state: g.state.name(),
            group_type: "classic",
        }));
        out.extend(self.share_listings());
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// DeleteGroups: only an empty group; its metadata and offsets get tombstones.
    pub async fn delete(&self, group_id: &str) -> Result<(), E> {
        if let Some(e) = self.owner_error(group_id) {
            return Err(e);
        }
        let records = {
            let groups = self.lock();
            if self.has_consumer_members(group_id) {
                return Err(E::NonEmptyGroup);
            }
            let consumer_records = self.lock_consumer().get(group_id).map(|cg| cg.tombstones(group_id));
            let mut r: Vec<(Bytes, Option<Bytes>)> = match (groups.get(group_id), &consumer_records) {
                (None, None) => return Err(E::GroupIdNotFound),
                (Some(g), _) if !g.is_empty() => return Err(E::NonEmptyGroup),
                (Some(g), _) => g
                    .offsets
                    .keys()
                    .map(|(topic, partition)| {
                        let key = Key::Offset { group: group_id.into(), topic: topic.clone(), partition: *partition };
                        (key.encode(), None)
                    })
                    .chain([(Key::Group { group: group_id.into() }.encode(), None)])
                    .collect(),
                (None, Some(_)) => Vec::new(),
            };
            r.extend(consumer_records.unwrap_or_default());
            r
        };
        if records.is_empty() {
            self.lock_consumer().remove(group_id);
            return Ok(());
        }
        if let Err(e) = self.persist(group_id, records).await {
            tracing::warn!(group = group_id, error = %e, "group deletion not durable");
            return Err(self.not_durable(group_id));
        }
        let mut groups = self.lock();
        if groups.get(group_id).is_some_and(|g| g.is_empty()) {
            groups.remove(group_id);
        }
        self.lock_consumer().remove(group_id);
        Ok(())
    }
}
