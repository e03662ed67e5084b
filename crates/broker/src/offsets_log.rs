//! The coordinator's log: the partitions of the internal `__consumer_offsets` topic,
//! written and read through the same `Partition` path as user data (validated batches,
//! group commit for durability), so that replicating partitions replicates groups too.
//! In a cluster the topic is replicated like any other (created through the controller on
//! the first FindCoordinator), and an append is a Raft proposal answered once committed.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use runnel_coordinator::{GroupLog, LogFuture};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use runnel_wire::{BatchHeader, Batches};

use crate::broker::Broker;
use crate::catalog::Topic;
use crate::config::Settings;
use crate::partition::Partition;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// How much one read of the offsets log fetches while replaying it.
const REPLAY_READ_BYTES: usize = 1 << 20;

pub struct OffsetsLog {
    pub broker: Weak<Broker>,
    pub partitions: i32,
}

impl OffsetsLog {
    fn topic(&self, create: bool) -> Result<Option<Arc<Topic>>, String> {
        let b = self.broker.upgrade().ok_or("broker is gone")?;
        if let Some(t) = b.catalog.topic(OFFSETS_TOPIC) {
            return Ok(Some(t));
        }
        if !create {
            return Ok(None);
        }
        if b.cluster.get().is_some() {
            return Err("the offsets topic is not created yet".into());
        }
        let configs = topic_configs(&b.catalog.settings());
        match b.catalog.create_topic(OFFSETS_TOPIC, self.partitions, configs) {
            Ok(t) => Ok(Some(t)),
            Err(crate::catalog::CatalogError::TopicExists(_)) => Ok(b.catalog.topic(OFFSETS_TOPIC)),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// As Kafka's: compacted, so it holds each group's and offset's latest record.
pub fn topic_configs(s: &Settings) -> BTreeMap<String, String> {
    [
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.bytes".to_string(), s.get("offsets.topic.segment.bytes").to_string()),
    ]
    .into_iter()
    .collect()
}

/// Where `append` put the records: in a local log (durable once flushed), or proposed to
/// the partition's Raft group (durable once committed, given up after the timeout).
enum Placed {
    Local(Arc<Broker>, Arc<Partition>),
    Proposed(tokio::sync::oneshot::Receiver<bool>, Duration),
}

impl OffsetsLog {
    fn place(&self, partition: i32, records: &[(Bytes, Option<Bytes>)]) -> Result<Placed, String> {
        let topic = self.topic(true)?.ok_or("offsets topic missing")?;
        let part = topic.partitions.get(partition as usize).cloned().ok_or("offsets partition out of range")?;
        let batch = encode(records)?;
        let h = BatchHeader::validate_for_append(&batch).map_err(|e| e.to_string())?;
        let b = self.broker.upgrade().ok_or("broker is gone")?;
        let Some((replica, group)) = part.replica() else {
            part.append(&[(&batch, h)], crate::now_ms()).map_err(|e| e.to_string())?;
            return Ok(Placed::Local(b, part));
        };
        let committed = {
            let mut r = runnel_raft::driver::lock(replica);
            let p = r.propose_batch(&batch, &h).map_err(|e| crate::errors::propose(e).1)?;
            r.wait(p.index, p.term, runnel_raft::Durability::Committed)
        };
        if let Some(cluster) = b.cluster.get() {
            cluster.kick(group);
        }
        let timeout = b.catalog.settings().i64("offsets.commit.timeout.ms").max(1) as u64;
        Ok(Placed::Proposed(committed, Duration::from_millis(timeout)))
    }
}

fn encode(records: &[(Bytes, Option<Bytes>)]) -> Result<Vec<u8>, String> {
    let now = crate::now_ms();
    let mut batch = BatchBuilder::new(now);
    for (k, v) in records {
        batch.push(now, Some(k), v.as_deref());
    }
    batch.finish(CODEC_NONE, ProducerFields::NONE).map_err(|e| e.to_string())
}

impl GroupLog for OffsetsLog {
    fn partitions(&self) -> i32 {
        self.partitions
    }

    fn append(&self, partition: i32, records: Vec<(Bytes, Option<Bytes>)>) -> LogFuture {
        match self.place(partition, &records) {
            Err(e) => Box::pin(std::future::ready(Err(e))),
            Ok(Placed::Local(b, part)) => Box::pin(async move {
                let end = part.log_end_offset();
                match &b.flusher {
                    Some(f) => f.flush(vec![(part, end)]).await,
                    None => {
                        part.advance_high_watermark(end);
                        b.data_arrived.notify_waiters();
                        Ok(())
                    }
                }
            }),
            Ok(Placed::Proposed(committed, timeout)) => Box::pin(async move {
                match tokio::time::timeout(timeout, committed).await {
                    Ok(Ok(true)) => Ok(()),
                    Ok(_) => Err("leadership moved before the write committed".into()),
                    Err(_) => Err(format!("not committed within {} ms", timeout.as_millis())),
                }
            }),
        }
    }

    fn read_all(&self, partition: i32) -> Result<Vec<(Bytes, Option<Bytes>)>, String> {
        let Some(topic) = self.topic(false)? else { return Ok(Vec::new()) };
        let Some(part) = topic.partitions.get(partition as usize) else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut offset = part.log_start_offset();
        while offset < part.high_watermark() {
            let bytes = part
                .read(offset, REPLAY_READ_BYTES, true)
                .map_err(|e| e.to_string())?
                .execute()
                .map_err(|e| e.to_string())?;
            if bytes.is_empty() {
                break;
            }
            for item in Batches::new(&bytes) {
                let (h, range) = item.map_err(|e| e.to_string())?;
                offset = h.next_offset();
                if h.is_control() {
                    continue; // a replicated log's Raft entries (leader no-ops)
                }
                let mut batch = Bytes::copy_from_slice(&bytes[range]);
                let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| e.to_string())?;
                out.extend(set.records.into_iter().filter_map(|r| r.key.map(|k| (k, r.value))));
            }
        }
        Ok(out)
    }
}
