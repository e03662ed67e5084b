//! The coordinators' logs: the partitions of the internal topics `__consumer_offsets`
//! (groups and offsets) and `__transaction_state` (transactional ids), written and read
//! through the same [`Partition`](crate::partition::Partition) seam as user data
//! (validated batches, appended with acks=all), so that replicating partitions replicates
//! coordinators too. Each topic is created through the controller on the first
//! FindCoordinator that needs it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use runnel_coordinator::{GroupLog, LogFuture, Records, Replay};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use runnel_wire::marker::txn_end;
use runnel_wire::TxnEnd;
use runnel_wire::{BatchHeader, Batches};

use crate::catalog::{Catalog, Topic};
use crate::config::Settings;
use crate::partition::{Acks, Isolation};

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
pub const TXN_TOPIC: &str = "__transaction_state";
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";
/// How much one read of the offsets log fetches while replaying it.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// Whether clients may not produce to the topic: only its coordinator writes it.
pub fn is_internal(topic: &str) -> bool {
    topic == OFFSETS_TOPIC || topic == TXN_TOPIC || topic == SHARE_STATE_TOPIC
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
/// Below segment.bytes' 1 MiB floor (tests), the size goes in `internal.segment.bytes`.
pub fn topic_configs(s: &Settings, segment_setting: &str) -> BTreeMap<String, String> {
    let segment = s.get(segment_setting);
    let key = match segment.parse::<i64>() {
        Ok(bytes) if bytes < 1 << 20 => "internal.segment.bytes",
        _ => "segment.bytes",
    };
    [("cleanup.policy".to_string(), "compact".to_string()), (key.to_string(), segment.to_string())]
        .into_iter()
        .collect()
}

/// One batch of records; in a producer's transaction when `txn` is (producer id, epoch).
fn encode(records: &[(Bytes, Option<Bytes>)], txn: Option<(i64, i16)>) -> Result<Vec<u8>, String> {
    let now = crate::now_ms();
    let mut batch = BatchBuilder::new(now);
    for (k, v) in records {
        batch.push(now, Some(k), v.as_deref());
    }
    match txn {
        None => batch.finish(CODEC_NONE, ProducerFields::NONE),
        // As Kafka writes transactional offset commits: no sequence number.
        Some((producer_id, producer_epoch)) => {
            batch.finish_transactional(CODEC_NONE, ProducerFields { producer_id, producer_epoch, base_sequence: -1 })
        }
    }
    .map_err(|e| e.to_string())
}

impl InternalLog {
    fn write(&self, partition: i32, records: Records, txn: Option<(i64, i16)>) -> LogFuture {
        let appended = (|| {
            // The topic exists once a FindCoordinator created it (`coordinators::locate`).
            let topic = self.topic()?.ok_or_else(|| format!("{} is not created yet", self.topic))?;
            let part = topic.partitions.get(partition as usize).cloned().ok_or("partition out of range")?;
            let batch = encode(&records, txn)?;
            let h = BatchHeader::validate_for_append(&batch).map_err(|e| e.to_string())?;
            let appended = part.append(&[(batch.into(), h)], Acks::All).map_err(|e| e.to_string())?;
            let timeout = self.catalog.settings().i64("offsets.commit.timeout.ms").max(1) as u64;
            Ok::<_, String>((appended, Duration::from_millis(timeout)))
        })();
        Box::pin(async move {
            let (appended, timeout) = appended?;
            appended.durable(timeout).await.map_err(|e| e.to_string())
        })
    }
}

impl GroupLog for InternalLog {
    fn partitions(&self) -> i32 {
        self.partitions
    }

    fn append(&self, partition: i32, records: Records) -> LogFuture {
        self.write(partition, records, None)
    }

    fn append_txn(&self, partition: i32, producer_id: i64, producer_epoch: i16, records: Records) -> LogFuture {
        self.write(partition, records, Some((producer_id, producer_epoch)))
    }

    fn leads(&self, partition: i32) -> bool {
        let topic = self.topic().ok().flatten();
        topic.and_then(|t| t.partitions.get(partition as usize).map(|p| p.leader_error().is_none())).unwrap_or(false)
    }

    fn read_all(&self, partition: i32) -> Result<Replay, String> {
        let Some(topic) = self.topic()? else { return Ok(Replay::default()) };
        let Some(part) = topic.partitions.get(partition as usize) else { return Ok(Replay::default()) };
        let mut out = Vec::new();
        // Records of transactions not ended yet, by producer: a commit marker puts them in
        // effect where it stands, an abort marker drops them.
        let mut open: HashMap<i64, Records> = HashMap::new();
        let mut offset = part.log_start_offset();
        loop {
            let read = part
                .read(offset, REPLAY_READ_BYTES, true, Isolation::ReadUncommitted, false)
                .map_err(|e| e.to_string())?;
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
                    // A transaction marker, or one of Raft's own entries (leader no-ops).
                    let end = txn_end(&h, &bytes[range]);
                    if let (Some(end), Some(records)) = (end, open.remove(&h.producer_id)) {
                        if end == TxnEnd::Commit {
                            out.extend(records);
                        }
                    }
                    continue;
                }
                let mut batch = Bytes::copy_from_slice(&bytes[range]);
                let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| e.to_string())?;
                let records = set.records.into_iter().filter_map(|r| r.key.map(|k| (k, r.value)));
                if h.is_transactional() {
                    open.entry(h.producer_id).or_default().extend(records);
                } else {
                    out.extend(records);
                }
            }
        }
        Ok(Replay { records: out, open: open.into_iter().collect() })
    }
}
