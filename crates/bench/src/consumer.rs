//! The benchmark's consumer: assigned partitions (no group), one Fetch request per leader
//! at a time, from the log end as it was when the run started. Each record's first eight
//! value bytes hold when the producer wrote it (µs since the run's start, same process), so
//! end-to-end latency is the time from the produce call to the record arriving here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use kafka_protocol::records::RecordBatchDecoder;
use runnel_wire::Batches;
use tokio::sync::watch;

use crate::client::Connection;
use crate::cluster::{topic_name, TopicLayout, FETCH_VERSION};
use crate::producer::micros_since;
use crate::stats::{Live, Recorder};

pub struct ConsumerPlan {
    pub topic: String,
    pub layout: TopicLayout,
    pub addresses: std::collections::HashMap<i32, String>,
    /// Partition → offset to start from.
    pub start: BTreeMap<usize, i64>,
    pub t0: Instant,
    pub index: usize,
    pub live: Arc<Live>,
    /// Once this holds the final log-end offsets, the consumer stops on reaching them.
    pub end: watch::Receiver<Option<Vec<i64>>>,
    /// Hard stop, reached or not.
    pub deadline: Instant,
}

/// The first eight bytes of a value as a big-endian u64: the producer's stamp (or, for
/// `runnel verify`, the value's identity).
pub fn value_stamp(value: &[u8]) -> Option<u64> {
    value.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
}

/// Calls `f(offset, value)` for every record at or after `from` in one partition's fetched
/// data (whole batches only; a batch cut at the size limit ends it). Returns the offset
/// after the last batch past `from`.
pub fn for_each_record(data: &[u8], from: i64, mut f: impl FnMut(i64, &[u8])) -> Result<Option<i64>> {
    let mut next = None;
    for item in Batches::new(data) {
        let Ok((h, range)) = item else { break };
        if h.next_offset() <= from {
            continue;
        }
        if h.is_control() {
            // Transaction markers and Raft's own entries: no records, but they take offsets.
            next = Some(h.next_offset());
            continue;
        }
        let mut raw = Bytes::copy_from_slice(&data[range]);
        let set = RecordBatchDecoder::decode(&mut raw).map_err(|e| anyhow::anyhow!("{e}"))?;
        for r in set.records.iter().filter(|r| r.offset >= from) {
            f(r.offset, r.value.as_deref().unwrap_or_default());
        }
        next = Some(h.next_offset());
    }
    Ok(next)
}

pub async fn run(plan: ConsumerPlan) -> Result<Recorder> {
    let mut rec = Recorder::new(plan.t0);
    let client_id = format!("runnel-bench-consumer-{}", plan.index);
    let mut by_leader: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for p in plan.start.keys() {
        by_leader.entry(plan.layout.leaders[*p]).or_default().push(*p);
    }
    let mut conns = BTreeMap::new();
    for leader in by_leader.keys() {
        let addr = plan.addresses.get(leader).context("leader address")?;
        conns.insert(*leader, Connection::connect(addr, &client_id, 1).await?);
    }
    let mut position = plan.start.clone();
    loop {
        let end = plan.end.borrow().clone();
        if let Some(end) = &end {
            if position.iter().all(|(p, o)| *o >= end[*p]) {
                break;
            }
        }
        if Instant::now() > plan.deadline {
            rec.error("consumer deadline before reaching the log end", 0);
            break;
        }
        // One fetch per leader, concurrently.
        let mut answers = Vec::new();
        for (leader, ps) in &by_leader {
            let partitions = ps
                .iter()
                .map(|p| {
                    FetchPartition::default()
                        .with_partition(*p as i32)
                        .with_fetch_offset(position[p])
                        .with_partition_max_bytes(1 << 20)
                })
                .collect();
            let req = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(200)
                .with_min_bytes(1)
                .with_max_bytes(32 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(&plan.topic))
                    .with_partitions(partitions)]);
            answers.push(conns[leader].send(&req, FETCH_VERSION).await?);
        }
        for a in answers {
            let (resp, arrived) = a.await?;
            let now_us = micros_since(plan.t0, arrived);
            for t in resp.responses {
                for p in t.partitions {
                    let idx = p.partition_index as usize;
                    if p.error_code != 0 {
                        rec.error(&format!("fetch error code {}", p.error_code), 0);
                        continue;
                    }
                    let Some(records) = p.records else { continue };
                    let mut n = 0;
                    let next = for_each_record(&records, position[&idx], |_, v| {
                        let latency = value_stamp(v).map_or(0, |s| now_us.saturating_sub(s));
                        rec.record(arrived, latency, v.len() as u64);
                        n += 1;
                    })?;
                    Live::add(&plan.live.consumed, n);
                    if let Some(o) = next {
                        position.insert(idx, o);
                    }
                }
            }
        }
    }
    Ok(rec)
}
