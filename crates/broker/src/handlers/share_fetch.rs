//! ShareFetch (key 78, KIP-932): a share-group member's fetch from the partition leaders.
//! It opens, continues or closes the member's share session (epoch 0, n, -1), applies the
//! acknowledgements it carries (durable before the answer), then hands the member records
//! of the session's partitions under acquisition locks, long-polling up to `max_wait_ms`
//! until some are there. The records go back as the log holds them (whole batches), with
//! the offset ranges acquired; the client keeps only those.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{BrokerId, ShareFetchRequest, ShareFetchResponse};
use tokio::time::Instant;

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use crate::share::{self, acknowledge_all, leader_of, member_of, readable, Tp};

struct Part {
    tp: Tp,
    error: i16,
    records: Bytes,
    acquired: Vec<share::Acquired>,
}

pub fn handle(b: &Arc<Broker>, r: ShareFetchRequest, _v: i16, ctx: &Ctx) -> Reply {
    let top = |code: ResponseError, msg: &str| {
        now(ShareFetchResponse::default().with_error_code(code.code()).with_error_message(Some(str_bytes(msg))))
    };
    let (group, member) = match member_of(r.group_id.as_ref(), r.member_id.as_ref(), ctx) {
        Ok(ids) => ids,
        Err((code, msg)) => return top(code, msg),
    };
    let epoch = r.share_session_epoch;
    let mut added = Vec::new();
    // Partitions that do not exist are answered with an error and not kept in the session,
    // so a session holds only real partitions, however many requests name others.
    let mut unknown = Vec::new();
    let mut acks = Vec::new();
    for t in &r.topics {
        let partitions = b.catalog.topic_by_id(t.topic_id).map(|topic| topic.partitions.len());
        for p in &t.partitions {
            let tp = (t.topic_id, p.partition_index);
            match partitions {
                None => unknown.push((tp, ResponseError::UnknownTopicId)),
                Some(n) if tp.1 < 0 || tp.1 as usize >= n => unknown.push((tp, ResponseError::UnknownTopicOrPartition)),
                Some(_) => added.push(tp),
            }
            if !p.acknowledgement_batches.is_empty() {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|a| (a.first_offset, a.last_offset, a.acknowledge_types.clone()))
                    .collect();
                acks.push((tp, readable(b, ctx, &tp).map(|_| batches)));
            }
        }
    }
    let forgotten: Vec<Tp> =
        r.forgotten_topics_data.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p))).collect();
    let max_sessions = b.config.settings.usize("group.share.max.share.sessions").max(1);
    let view = match b.shares.session(&group, &member, epoch, &added, &forgotten, max_sessions) {
        Ok(view) => view,
        Err(e) => return top(e, e.to_string().as_str()),
    };
    let denied: HashMap<Tp, ResponseError> =
        view.parts.iter().filter_map(|tp| readable(b, ctx, tp).err().map(|e| (*tp, e))).collect();
    let listener = ctx.listener.to_string();
    let b = b.clone();
    Box::pin(async move {
        let ack_codes = acknowledge_all(&b, &group, &member, acks).await;
        let lock_ms = share::lock_duration_ms(&b, &group);
        if epoch == -1 {
            // The session closed: what the member still holds goes back.
            share::close_session(&b, &group, &member, &view.parts).await;
            let parts = ack_codes.keys().map(|tp| Part { tp: *tp, error: 0, records: Bytes::new(), acquired: vec![] });
            return Some(respond(&b, parts.collect(), &ack_codes, lock_ms, &listener).into());
        }
        let wait_max = b.config.settings.i64("fetch.max.wait.ms.max").max(0);
        let deadline = Instant::now() + Duration::from_millis(r.max_wait_ms.clamp(0, wait_max as i32) as u64);
        let broker_max = b.config.settings.i64("fetch.max.bytes").max(1024) as usize;
        let max_bytes = (r.max_bytes.max(0) as usize).min(broker_max);
        let max_records = if r.max_records > 0 { r.max_records as usize } else { 500 };
        // Start at a different partition each time, so that one busy partition does not
        // take every fetch.
        let n = view.parts.len().max(1);
        let first = (epoch.max(0) as usize) % n;
        let order: Vec<Tp> = view.parts.iter().cycle().skip(first).take(view.parts.len()).copied().collect();
        let parts = loop {
            let arrived = b.arrivals.watch(order.iter().filter_map(|tp| share::partition_of(&b, tp)?.group()));
            let mut parts = Vec::new();
            let (mut records_left, mut bytes_left) = (max_records, max_bytes);
            for tp in &order {
                if let Some(e) = denied.get(tp) {
                    parts.push(Part { tp: *tp, error: e.code(), records: Bytes::new(), acquired: vec![] });
                    continue;
                }
                if records_left == 0 || bytes_left == 0 {
                    continue;
                }
                match share::fetch(&b, &group, &member, *tp, records_left, bytes_left).await {
                    Ok(f) => {
                        let n: i64 = f.acquired.iter().map(|a| a.last - a.first + 1).sum();
                        records_left = records_left.saturating_sub(n as usize);
                        bytes_left = bytes_left.saturating_sub(f.records.len());
                        parts.push(Part { tp: *tp, error: 0, records: f.records, acquired: f.acquired });
                    }
                    Err(e) => parts.push(Part { tp: *tp, error: e.code(), records: Bytes::new(), acquired: vec![] }),
                }
            }
            let got = parts.iter().any(|p| p.error != 0 || !p.acquired.is_empty());
            if got || Instant::now() >= deadline || b.is_shutting_down() {
                break parts;
            }
            // Wait for new records, or for a lock to run out (its records come free).
            let lock_end = share::next_deadline(&b, &group, &view.parts).map(|ms| {
                let in_ms = (ms - crate::now_ms()).max(1) as u64;
                Instant::now() + Duration::from_millis(in_ms)
            });
            let wake = lock_end.map_or(deadline, |l| l.min(deadline));
            let _ = tokio::time::timeout_at(wake, arrived.changed()).await;
        };
        let parts: Vec<Part> = parts
            .into_iter()
            .filter(|p| view.full || p.error != 0 || !p.acquired.is_empty() || ack_codes.contains_key(&p.tp))
            .collect();
        let mut parts = parts;
        for (tp, e) in &unknown {
            parts.push(Part { tp: *tp, error: e.code(), records: Bytes::new(), acquired: vec![] });
        }
        for tp in ack_codes.keys() {
            if !parts.iter().any(|p| p.tp == *tp) {
                parts.push(Part { tp: *tp, error: 0, records: Bytes::new(), acquired: vec![] });
            }
        }
        Some(respond(&b, parts, &ack_codes, lock_ms, &listener).into())
    })
}

fn respond(
    b: &Broker,
    parts: Vec<Part>,
    ack_codes: &HashMap<Tp, i16>,
    lock_ms: i32,
    listener: &str,
) -> ShareFetchResponse {
    let mut topics: BTreeMap<uuid::Uuid, Vec<PartitionData>> = BTreeMap::new();
    let mut endpoints: BTreeMap<i32, NodeEndpoint> = BTreeMap::new();
    for p in parts {
        let (leader, epoch, endpoint) = leader_of(b, &p.tp, listener);
        if let (Some((host, port)), true) = (endpoint, p.error == ResponseError::NotLeaderOrFollower.code()) {
            endpoints.insert(
                leader,
                NodeEndpoint::default()
                    .with_node_id(BrokerId(leader))
                    .with_host(str_bytes(&host))
                    .with_port(port as i32),
            );
        }
        let acquired = p
            .acquired
            .iter()
            .map(|a| {
                AcquiredRecords::default()
                    .with_first_offset(a.first)
                    .with_last_offset(a.last)
                    .with_delivery_count(a.delivery_count)
            })
            .collect();
        let data = PartitionData::default()
            .with_partition_index(p.tp.1)
            .with_error_code(p.error)
            .with_acknowledge_error_code(ack_codes.get(&p.tp).copied().unwrap_or(0))
            .with_current_leader(LeaderIdAndEpoch::default().with_leader_id(leader).with_leader_epoch(epoch))
            .with_records(Some(p.records))
            .with_acquired_records(acquired);
        topics.entry(p.tp.0).or_default().push(data);
    }
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    ShareFetchableTopicResponse::default().with_topic_id(id).with_partitions(partitions)
                })
                .collect(),
        )
        .with_node_endpoints(endpoints.into_values().collect())
}
