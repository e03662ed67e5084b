//! Idempotent-producer state of one partition, derived from the log: for each producer id,
//! its current epoch and the last few batches it wrote (Kafka keeps five, matching the
//! client's `max.in.flight.requests.per.connection` limit for idempotence).
//!
//! The rules are Kafka's: a retried batch among the cached ones is a duplicate and is
//! answered with its original offsets; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an
//! older epoch is fenced; a newer epoch must start again at sequence 0.

use std::collections::{HashMap, VecDeque};

use runnel_wire::BatchHeader;

pub const CACHED_BATCHES_PER_PRODUCER: usize = 5;
/// A bound on the table so a flood of producer ids cannot exhaust memory; the oldest
/// (by last write) are forgotten first, as Kafka expires idle producers.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CachedBatch {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
    last_offset: i64,
}

#[derive(Debug, Default, Clone)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<CachedBatch>,
    last_write: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerError {
    /// The batch's epoch is older than the producer's current one.
    Fenced,
    /// The batch does not follow the last one written by this producer.
    OutOfOrder { expected: i32, got: i32 },
}

#[derive(Debug, Default)]
pub struct ProducerTable {
    producers: HashMap<i64, ProducerEntry>,
    clock: u64,
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerTable {
    /// Last offset of each producer's most recent batch.
    pub fn last_offsets(&self) -> HashMap<i64, i64> {
        self.producers.iter().filter_map(|(&pid, e)| Some((pid, e.batches.back()?.last_offset))).collect()
    }

    /// Checks a batch before it is appended. `Ok(Some((base, last)))` means it duplicates a
    /// batch already in the log at those offsets; `Ok(None)` means append it.
    pub fn check(&self, h: &BatchHeader) -> Result<Option<(i64, i64)>, ProducerError> {
        if !h.has_producer_id() || h.base_sequence < 0 {
            return Ok(None);
        }
        let Some(e) = self.producers.get(&h.producer_id) else {
            return Ok(None);
        };
        if h.producer_epoch < e.epoch {
            return Err(ProducerError::Fenced);
        }
        if h.producer_epoch > e.epoch {
            return match h.base_sequence {
                0 => Ok(None),
                got => Err(ProducerError::OutOfOrder { expected: 0, got }),
            };
        }
        if let Some(b) = e.batches.iter().find(|b| b.first_seq == h.base_sequence && b.last_seq == h.last_sequence()) {
            return Ok(Some((b.base_offset, b.last_offset)));
        }
        match e.batches.back() {
            Some(last) if h.base_sequence != next_seq(last.last_seq) => {
                Err(ProducerError::OutOfOrder { expected: next_seq(last.last_seq), got: h.base_sequence })
            }
            _ => Ok(None),
        }
    }

    /// [`ProducerTable::check`] as if `pending` (batches not yet in the log) had been
    /// recorded first.
    pub fn check_after(&self, h: &BatchHeader, pending: &[BatchHeader]) -> Result<Option<(i64, i64)>, ProducerError> {
        let mine = |p: &&BatchHeader| p.producer_id == h.producer_id && p.has_producer_id();
        if !pending.iter().any(|p| mine(&p)) {
            return self.check(h);
        }
        let mut view = ProducerTable::default();
        if let Some(e) = self.producers.get(&h.producer_id) {
            view.producers.insert(h.producer_id, e.clone());
        }
        for p in pending.iter().filter(mine) {
            view.record(p);
        }
        view.check(h)
    }

    /// Records a batch that is now in the log (appended, or found while scanning on open).
    pub fn record(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() {
            return;
        }
        self.clock += 1;
        if self.producers.len() >= PRODUCERS_PER_PARTITION_MAX && !self.producers.contains_key(&h.producer_id) {
            self.evict_oldest();
        }
        let e = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != e.epoch {
            e.epoch = h.producer_epoch;
            e.batches.clear();
        }
        e.last_write = self.clock;
        if h.base_sequence < 0 {
            return;
        }
        if e.batches.len() == CACHED_BATCHES_PER_PRODUCER {
            e.batches.pop_front();
        }
        e.batches.push_back(CachedBatch {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
    }

    fn evict_oldest(&mut self) {
        if let Some(pid) = self.producers.iter().min_by_key(|(_, e)| e.last_write).map(|(p, _)| *p) {
            self.producers.remove(&pid);
        }
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    #[test]
    fn duplicates_gaps_and_fencing() {
        let mut t = ProducerTable::default();
        let a = batch(1, 0, 0, 5, 100);
        assert_eq!(t.check(&a), Ok(None));
        t.record(&a);
        // The retry of the same batch maps to its original offsets.
        assert_eq!(t.check(&batch(1, 0, 0, 5, -1)), Ok(Some((100, 104))));
        // The next batch must start at sequence 5.
        assert_eq!(t.check(&batch(1, 0, 6, 1, -1)), Err(ProducerError::OutOfOrder { expected: 5, got: 6 }));
        assert_eq!(t.check(&batch(1, 0, 5, 1, -1)), Ok(None));
        // A new epoch restarts at 0; an older one is fenced.
        t.record(&batch(1, 1, 0, 1, 105));
        assert_eq!(t.check(&batch(1, 0, 1, 1, -1)), Err(ProducerError::Fenced));
        assert_eq!(t.check(&batch(1, 2, 3, 1, -1)), Err(ProducerError::OutOfOrder { expected: 0, got: 3 }));
        // Only the last five batches are remembered.
        for i in 1..=6 {
            t.record(&batch(1, 1, i, 1, 105 + i as i64));
        }
        assert_eq!(t.check(&batch(1, 1, 1, 1, -1)), Err(ProducerError::OutOfOrder { expected: 7, got: 1 }));
        assert_eq!(t.check(&batch(1, 1, 2, 1, -1)), Ok(Some((107, 107))));
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut t = ProducerTable::default();
        t.record(&batch(9, 0, i32::MAX - 1, 2, 0));
        assert_eq!(t.check(&batch(9, 0, 0, 1, -1)), Ok(None));
    }
}
