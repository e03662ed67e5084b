//! The coordinators' logs: the partitions of the internal topics `__consumer_offsets`
//! (groups and offsets) and `__transaction_state` (transactional ids), written and read
//! through the same [`Partition`](crate::partition::Partition) seam as user data
//! (validated batches, appended with acks=all), so that replicating partitions replicates
//! coordinators too. Each topic is created through the controller on the first
//! FindCoordinator that needs it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use runnel_coordinator::{GroupLog, LogFuture};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use runnel_wire::{BatchHeader, Batches};

use crate::catalog::{Catalog, Topic};
use crate::config::Settings;
use crate::partition::{Acks, Isolation};

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
pub const TXN_TOPIC: &str = "__transaction_state";
/// How much one read of the offsets log fetches while replaying it.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// Whether clients may not produce to the topic: only its coordinator writes it.
pub fn is_internal(topic: &str) -> bool {
    topic == OFFSETS_TOPIC || topic == TXN_TOPIC
}

pub struct InternalLog {
    pub catalog: Arc<Catalog>,
    pub topic: &'static str,
    pub partitions: i32,
}

impl InternalLog {
    fn topic(&self) -> Result<Option<Arc<Topic>>, String> {
        Ok(self.catalog.topic(self.topic))
    }
}

/// As Kafka's: compacted, so it holds the latest record of each group, offset or
/// transactional id. `segment_setting`: the topic's `*.segment.bytes` broker setting.
pub fn topic_configs(s: &Settings, segment_setting: &str) -> BTreeMap<String, String> {
    [
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.bytes".to_string(), s.get(segment_setting).to_string()),
    ]
    .into_iter()
    .collect()
}

fn encode(records: &[(Bytes, Option<Bytes>)]) -> Result<Vec<u8>, String> {
    let now = crate::now_ms();
    let mut batch = BatchBuilder::new(now);
    for (k, v) in records {
        batch.push(now, Some(k), v.as_deref());
    }
    batch.finish(CODEC_NONE, ProducerFields::NONE).map_err(|e| e.to_string())
}

impl GroupLog for InternalLog {
    fn partitions(&self) -> i32 {
        self.partitions
    }

    fn append(&self, partition: i32, records: Vec<(Bytes, Option<Bytes>)>) -> LogFuture {
        let appended = (|| {
            // The topic exists once a FindCoordinator created it (`coordinators::locate`).
            let topic = self.topic()?.ok_or_else(|| format!("{} is not created yet", self.topic))?;
            let part = topic.partitions.get(partition as usize).cloned().ok_or("partition out of range")?;
            let batch = encode(&records)?;
            let h = BatchHeader::validate_for_append(&batch).map_err(|e| e.to_string())?;
            let appended = part.append(&[(&batch, h)], Acks::All).map_err(|e| e.to_string())?;
            let timeout = self.catalog.settings().i64("offsets.commit.timeout.ms").max(1) as u64;
            Ok::<_, String>((appended, Duration::from_millis(timeout)))
        })();
        Box::pin(async move {
            let (appended, timeout) = appended?;
            appended.durable(timeout).await.map_err(|e| e.to_string())
        })
    }

    fn leads(&self, partition: i32) -> bool {
        let topic = self.topic().ok().flatten();
        topic.and_then(|t| t.partitions.get(partition as usize).map(|p| p.leader_error().is_none())).unwrap_or(false)
    }

    fn read_all(&self, partition: i32) -> Result<Vec<(Bytes, Option<Bytes>)>, String> {
        let Some(topic) = self.topic()? else { return Ok(Vec::new()) };
        let Some(part) = topic.partitions.get(partition as usize) else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut offset = part.log_start_offset();
        loop {
            let read =
                part.read(offset, REPLAY_READ_BYTES, true, Isolation::ReadUncommitted).map_err(|e| e.to_string())?;
            if offset >= read.high_watermark {
                break;
            }
            let bytes = read.plan.map_err(|e| e.to_string())?.execute().map_err(|e| e.to_string())?;
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
