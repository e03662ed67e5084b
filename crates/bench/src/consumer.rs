//! The benchmark's consumer: assigned partitions (no group), one Fetch request per leader
//! at a time, from the log end as it was when the run started. Each record's first eight
//! value bytes hold when the producer wrote it (µs since the run's start, same process), so
//! end-to-end latency is the time from the produce call to the record arriving here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use runnel_client::{for_each_record, topic_name, value_stamp, Connection, TopicLayout, FETCH_VERSION};
use tokio::sync::watch;

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
    // One partition's records of an answer: (latency µs, bytes), reused.
    let mut read: Vec<(u64, u64)> = Vec::new();
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
                    read.clear();
                    let next = for_each_record(&records, position[&idx], |_, v| {
                        let latency = value_stamp(v).map_or(0, |s| now_us.saturating_sub(s));
                        read.push((latency, v.len() as u64));
                    })?;
                    Live::add(&plan.live.consumed, read.len() as u64);
                    rec.record_all(arrived, read.iter().copied());
                    if let Some(o) = next {
                        position.insert(idx, o);
                    }
                }
            }
        }
    }
    Ok(rec)
}
