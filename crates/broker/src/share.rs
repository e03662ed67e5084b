//! Share groups on a partition leader (KIP-932): the share-partitions this broker serves
//! (one [`SharePartition`] per group and partition it leads), the members' share sessions,
//! and the state kept durable through the share coordinator (`runnel-share`'s
//! [`StateStore`] over `__share_group_state`, here or on the broker leading the key's state
//! partition).
//!
//! A share-partition is read back from its state the first time it is used in a leader's
//! term, with the state epoch raised (so a former leader's late write is fenced), and
//! dropped when leadership moves. Every acknowledgement is durable before it is answered:
//! writes of one share-partition go one at a time, each with its state as of the write.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;
pub use runnel_share::Acquired;
use runnel_share::{state_key, Ack, Limits, SharePartition, Snapshot};
use runnel_sync::LockExt;
use runnel_wire::Batches;
use uuid::Uuid;

use runnel_security::acl::Operation;
use std::collections::HashMap;

use crate::broker::Broker;
use crate::ctx::Ctx;
use crate::errors;
use crate::partition::{Isolation, Partition};

pub use crate::share_session::Tp;
use crate::share_session::{Entry, Loaded};

/// What a ShareFetch of one partition got.
pub struct Fetched {
    pub records: Bytes,
    pub acquired: Vec<Acquired>,
}

fn limits(b: &Broker, group: &str) -> Limits {
    let configs = b.controller().group_configs(group);
    let settings = b.catalog.settings();
    let g = |name: &str| crate::group_configs::value(&configs, &settings, name);
    Limits {
        lock_ms: g("share.record.lock.duration.ms").max(1),
        delivery_limit: g("share.delivery.count.limit").clamp(1, i16::MAX as i64) as i16,
        max_locks: g("share.partition.max.record.locks").max(1) as usize,
    }
}

/// The group's `share.isolation.level`.
fn isolation(b: &Broker, group: &str) -> Isolation {
    let configs = b.controller().group_configs(group);
    match crate::group_configs::get(&configs, &b.catalog.settings(), "share.isolation.level").as_str() {
        "read_committed" => Isolation::ReadCommitted,
        _ => Isolation::ReadUncommitted,
    }
}

pub fn lock_duration_ms(b: &Broker, group: &str) -> i32 {
    limits(b, group).lock_ms.min(i32::MAX as i64) as i32
}

fn leader_partition(b: &Broker, topic: Uuid, p: i32) -> Result<Arc<Partition>, E> {
    let t = b.catalog.topic_by_id(topic).ok_or(E::UnknownTopicOrPartition)?;
    let part = t.partitions.get(p as usize).cloned().ok_or(E::UnknownTopicOrPartition)?;
    if let Some(e) = part.leader_error() {
        return Err(errors::partition(&e));
    }
    Ok(part)
}

/// The share-partition of (group, topic, p), read back if this term has not used it yet.
async fn open(b: &Broker, group: &str, topic: Uuid, p: i32) -> Result<(Arc<Entry>, Arc<Partition>), E> {
    let part = leader_partition(b, topic, p)?;
    let term = part.current_leader_term().ok_or(E::NotLeaderOrFollower)?;
    let key = (group.to_string(), topic, p);
    let entry = b.shares.entry(&key);
    let current = |entry: &Entry| entry.state.lock_or_stop().as_ref().is_some_and(|l| l.term == term);
    if current(&entry) {
        return Ok((entry, part));
    }
    let gate = entry.gate.lock().await;
    if current(&entry) {
        return Ok((entry.clone(), part));
    }
    let skey = state_key(group, topic, p);
    let mut sp = match crate::share_state::read(b, &skey).await? {
        Some(snapshot) => SharePartition::from_snapshot(&snapshot),
        None => {
            let reset = crate::group_configs::get(
                &b.controller().group_configs(group),
                &b.catalog.settings(),
                "share.auto.offset.reset",
            );
            let start = match reset.strip_prefix("by_duration:").and_then(crate::group_configs::duration_ms) {
                // The first record at or after that time, else the end (ListOffsets' rule).
                Some(ago) => {
                    let (at, p) = (crate::now_ms() - ago, part.clone());
                    let lookup = move || Ok(crate::handlers::list_offsets::lookup(&p, at, Isolation::ReadUncommitted));
                    let found = b.disk_reads.run(runnel_metrics::DiskRead::ByTime, lookup).await;
                    let offset = found.ok().and_then(Result::ok).map(|(offset, _)| offset);
                    offset.filter(|o| *o >= 0).unwrap_or_else(|| part.high_watermark())
                }
                None if reset == "earliest" => part.log_start_offset(),
                None => part.high_watermark(),
            };
            SharePartition::new(start, 0)
        }
    };
    // A new epoch for this leader: what an earlier leader still writes is fenced.
    let snapshot = Snapshot { state_epoch: sp.state_epoch() + 1, ..sp.snapshot() };
    sp = SharePartition::from_snapshot(&snapshot);
    crate::share_state::write(b, &skey, snapshot).await?;
    *entry.state.lock_or_stop() = Some(Loaded { part: sp, term });
    drop(gate);
    tracing::debug!(group, %topic, partition = p, term, "share-partition loaded");
    Ok((entry, part))
}

/// Writes the share-partition's state as it is now; durable when it returns.
async fn persist(b: &Broker, group: &str, topic: Uuid, p: i32, entry: &Entry) -> Result<(), E> {
    let _gate = entry.gate.lock().await;
    let snapshot = entry.state.lock_or_stop().as_ref().map(|l| l.part.snapshot());
    let Some(snapshot) = snapshot else { return Err(E::NotLeaderOrFollower) };
    let written = crate::share_state::write(b, &state_key(group, topic, p), snapshot).await;
    if written == Err(E::FencedStateEpoch) {
        // The state was replaced since it was read (a newer leader, or the group's offsets
        // altered): what is in memory is stale, the next use reads it back.
        *entry.state.lock_or_stop() = None;
    }
    written
}

/// Hands `member` records of (topic, p): at most `max_records`, read within `max_bytes`.
pub async fn fetch(
    b: &Broker,
    group: &str,
    member: &str,
    (topic, p): Tp,
    max_records: usize,
    max_bytes: usize,
) -> Result<Fetched, E> {
    let (entry, part) = open(b, group, topic, p).await?;
    let limits = limits(b, group);
    let isolation = isolation(b, group);
    let now = crate::now_ms();
    let (from, hw) = {
        let mut state = entry.state.lock_or_stop();
        let l = state.as_mut().ok_or(E::NotLeaderOrFollower)?;
        l.part.expire(now, &limits);
        l.part.truncate_to(part.log_start_offset());
        // What may be handed out: up to the high watermark, or with read_committed up to
        // the last stable offset.
        let hw = match isolation {
            Isolation::ReadCommitted => part.last_stable_offset(),
            Isolation::ReadUncommitted => part.high_watermark(),
        };
        if !l.part.has_available(hw, &limits) {
            return Ok(Fetched { records: Bytes::new(), acquired: Vec::new() });
        }
        (l.part.next_fetch_offset(), hw)
    };
    if from >= hw {
        return Ok(Fetched { records: Bytes::new(), acquired: Vec::new() });
    }
    let read = part.read(from, max_bytes, true, isolation, false).map_err(|e| errors::partition(&e))?;
    let aborted = read.aborted;
    let plan = read.plan.map_err(|e| errors::read(&e))?;
    let bytes = b.disk_reads.read(plan, |span, _| span.execute()).await.map_err(|e| errors::read(&e.into()))?;
    // Control batches, and with read_committed the batches of aborted transactions, are
    // never handed out (the client skips them as gaps).
    let skipped = |h: &runnel_wire::BatchHeader| {
        h.is_control()
            || (h.is_transactional()
                && aborted.iter().any(|a| {
                    a.producer_id == h.producer_id
                        && a.first_offset <= h.base_offset
                        && h.last_offset() <= a.last_offset
                }))
    };
    let batches: Vec<(i64, i64, bool)> = Batches::new(&bytes)
        .filter_map(Result::ok)
        .map(|(h, _)| (h.base_offset, h.last_offset(), skipped(&h)))
        .collect();
    let acquired = {
        let mut state = entry.state.lock_or_stop();
        let l = state.as_mut().ok_or(E::NotLeaderOrFollower)?;
        l.part.acquire(member, &batches, max_records, now, &limits)
    };
    if acquired.is_empty() {
        return Ok(Fetched { records: Bytes::new(), acquired });
    }
    Ok(Fetched { records: Bytes::from(bytes), acquired })
}

/// Applies `member`'s acknowledgements on (topic, p) and makes them durable.
pub async fn acknowledge(
    b: &Broker,
    group: &str,
    member: &str,
    (topic, p): Tp,
    batches: &[(i64, i64, Vec<i8>)],
) -> Result<(), E> {
    let (entry, part) = open(b, group, topic, p).await?;
    let limits = limits(b, group);
    {
        let mut state = entry.state.lock_or_stop();
        let l = state.as_mut().ok_or(E::NotLeaderOrFollower)?;
        l.part.acknowledge(member, batches, &limits)?;
    }
    persist(b, group, topic, p, &entry).await?;
    let releases = batches.iter().flat_map(|(_, _, types)| types).any(|t| Ack::from_code(*t) == Some(Ack::Release));
    if releases {
        wake_fetches(b, &part);
    }
    Ok(())
}

/// The partition `tp` names, if its topic exists.
pub fn partition_of(b: &Broker, tp: &Tp) -> Option<Arc<Partition>> {
    b.catalog.topic_by_id(tp.0).and_then(|t| t.partitions.get(tp.1 as usize).cloned())
}

/// Records of `part` came free: share fetches waiting on it look again.
fn wake_fetches(b: &Broker, part: &Partition) {
    if let Some(group) = part.group() {
        b.arrivals.moved(group);
    }
}

/// A member's share session closed: what it holds on these partitions is released. The
/// group's last session here takes its share-partitions out of memory.
pub async fn close_session(b: &Broker, group: &str, member: &str, parts: &[Tp]) {
    release(b, group, member, parts).await;
    if !b.shares.has_sessions(group) {
        b.shares.forget_group(group);
    }
}

/// How long a share session may go unused before it is ended: a member may go without
/// fetching for as long as its client lets it go without polling (Kafka's
/// `max.poll.interval.ms`, 5 minutes by default) and still be in the group.
const SESSION_IDLE_MAX: Duration = Duration::from_secs(300);

/// Ends share sessions idle for longer than a member could stay in its group without
/// fetching (crashed clients), every second, as if their members had closed them.
pub async fn sweep_sessions(broker: std::sync::Weak<Broker>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(b) = broker.upgrade() else { return };
        let session = Duration::from_millis(b.config.settings.i64("group.share.session.timeout.ms").max(1) as u64);
        let idle = SESSION_IDLE_MAX + session;
        for (group, member, parts) in b.shares.expire_idle(idle) {
            tracing::debug!(group, member, "share session expired");
            close_session(&b, &group, &member, &parts).await;
        }
    }
}

/// What `member` holds on these partitions goes back to the group.
async fn release(b: &Broker, group: &str, member: &str, parts: &[Tp]) {
    for &(topic, p) in parts {
        let key = (group.to_string(), topic, p);
        let Some(entry) = b.shares.parts.lock_or_stop().get(&key).cloned() else { continue };
        let limits = limits(b, group);
        let released = entry.state.lock_or_stop().as_mut().map_or(0, |l| l.part.release_member(member, &limits));
        if released > 0 {
            if let Err(e) = persist(b, group, topic, p, &entry).await {
                tracing::debug!(group, %topic, partition = p, ?e, "released records not persisted");
            }
            if let Some(part) = partition_of(b, &(topic, p)) {
                wake_fetches(b, &part);
            }
        }
    }
}

/// The earliest lock deadline among `group`'s share-partitions of `parts` (a waiting fetch
/// looks again then: the records come free).
pub fn next_deadline(b: &Broker, group: &str, parts: &[Tp]) -> Option<i64> {
    let entries: Vec<Arc<Entry>> = {
        let map = b.shares.parts.lock_or_stop();
        parts.iter().filter_map(|(topic, p)| map.get(&(group.to_string(), *topic, *p)).cloned()).collect()
    };
    entries.iter().filter_map(|e| e.state.lock_or_stop().as_ref().and_then(|l| l.part.next_deadline())).min()
}

/// Acknowledgement batches: (first offset, last offset, types).
pub type AckBatches = Vec<(i64, i64, Vec<i8>)>;

/// Whether the topic of `tp` exists (Some) and may be read by this client (true).
pub fn readable(b: &Broker, ctx: &Ctx, tp: &Tp) -> Result<(), E> {
    let topic = b.catalog.topic_by_id(tp.0).ok_or(E::UnknownTopicId)?;
    if !ctx.access.topic(Operation::Read, &topic.name) {
        return Err(E::TopicAuthorizationFailed);
    }
    Ok(())
}

/// Applies each partition's acknowledgements; the error code of each.
pub async fn acknowledge_all(
    b: &Broker,
    group: &str,
    member: &str,
    acks: Vec<(Tp, Result<AckBatches, E>)>,
) -> HashMap<Tp, i16> {
    let mut out = HashMap::new();
    for (tp, batches) in acks {
        let result = match batches {
            Ok(batches) => acknowledge(b, group, member, tp, &batches).await,
            Err(e) => Err(e),
        };
        out.insert(tp, result.err().map_or(0, |e| e.code()));
    }
    out
}

/// The leader of (topic, p) as the client should see it, and its endpoint for the listener.
pub fn leader_of(b: &Broker, tp: &Tp, listener: &str) -> (i32, i32, Option<(String, u16)>) {
    let Some(part) = partition_of(b, tp) else { return (-1, -1, None) };
    let (leader, epoch) = b.partition_leader(&part);
    let endpoint = b
        .controller()
        .live_brokers()
        .into_iter()
        .find(|i| i.id == leader)
        .and_then(|i| i.endpoint(listener).map(|(h, p)| (h.to_string(), p)));
    (leader, epoch, endpoint)
}

/// The (group, member) a share request comes from, once checked: both named, and READ on
/// the group.
pub fn member_of(
    group: Option<&kafka_protocol::messages::GroupId>,
    member: Option<&kafka_protocol::protocol::StrBytes>,
    ctx: &Ctx,
) -> Result<(String, String), (E, &'static str)> {
    let group = group.map(|g| g.0.to_string()).unwrap_or_default();
    let member = member.map(|m| m.to_string()).unwrap_or_default();
    if group.is_empty() || member.is_empty() {
        return Err((E::InvalidRequest, "A share request needs a group id and a member id."));
    }
    if !ctx.access.group(Operation::Read, &group) {
        return Err((E::GroupAuthorizationFailed, "Group authorization failed."));
    }
    Ok((group, member))
}

/// Forgets the state of every partition of `topic` for `group`.
pub(crate) async fn forget_topic(b: &Broker, group: &str, topic: uuid::Uuid, partitions: usize) -> Result<(), E> {
    for p in 0..partitions as i32 {
        crate::share_state::delete(b, &state_key(group, topic, p)).await?;
        b.shares.forget(&(group.to_string(), topic, p));
    }
    Ok(())
}
