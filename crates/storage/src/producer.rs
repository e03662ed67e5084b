//! Idempotent-producer state of one partition, derived from the log: for each producer id,
//! its current epoch and the last few batches it wrote (Kafka keeps five, matching the
//! client's `max.in.flight.requests.per.connection` limit for idempotence).
//!
//! The rules are Kafka's: a retried batch among the cached ones is a duplicate and is
//! answered with its original offsets; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an
//! older epoch is fenced; a newer epoch must start again at sequence 0.
//!
//! Transactions, also derived from the log: a producer's first transactional batch opens
//! its transaction at that offset; its marker (commit or abort) closes it. A transaction
//! stays unstable until its marker is below the high watermark, and the first unstable
//! offset bounds the last stable offset (what `read_committed` consumers may read). Each
//! aborted transaction is remembered (producer, first offset, marker offset) until the
//! log start passes its marker, so fetches can list the aborted ones in what they return.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use runnel_wire::marker::Marker;
use runnel_wire::{BatchHeader, TxnEnd};

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

#[derive(Debug, Clone)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<CachedBatch>,
    last_write: u64,
    /// First offset of the producer's open transaction.
    txn_first: Option<i64>,
    /// Max timestamp of the producer's last batch.
    last_timestamp: i64,
    /// Last offset of the producer's last batch (markers included).
    last_offset: i64,
    /// The epoch of the transaction coordinator that wrote the producer's last marker, -1
    /// before one.
    coordinator_epoch: i32,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        ProducerEntry {
            epoch: 0,
            batches: VecDeque::new(),
            last_write: 0,
            txn_first: None,
            last_timestamp: 0,
            last_offset: 0,
            coordinator_epoch: -1,
        }
    }
}

/// One producer as DescribeProducers shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub epoch: i16,
    /// -1 when no batch with a sequence is remembered.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// First offset of its open transaction, -1 when none.
    pub current_txn_start_offset: i64,
    /// The coordinator epoch of its last marker, -1 before one.
    pub coordinator_epoch: i32,
}

/// A transaction its marker aborted: its records in `[first_offset, last_offset)` from
/// this producer are not to be read by `read_committed` consumers (`last_offset` is the
/// marker's offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
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
    /// Transactions not known stable, by first offset: the producer, and the marker's
    /// offset once it is written.
    unstable: BTreeMap<i64, (i64, Option<i64>)>,
    /// Aborted transactions in marker order (so by `last_offset`).
    aborted: VecDeque<AbortedTxn>,
}

/// The producers whose batches are all in segments already deleted (written before the
/// deletion; see [`ProducerTable::encode_below`]).
const PRODUCERS_FILE: &str = "producers.snapshot";

/// Format of [`ProducerTable::encode_below`]: 2 adds each producer's coordinator epoch
/// (version 1 is still read, with -1 for it).
const SNAPSHOT_VERSION: u8 = 2;

/// Reads fixed-size fields off the front of a byte slice, refusing a short one.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if self.0.len() < N {
            return Err("producer snapshot cut short".into());
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("split at N"))
    }
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
            // An idempotent producer this partition does not know may go on where it was
            // (its state gone), as in Kafka. A transactional one that wrote nothing here yet
            // starts at 0 (Runnel keeps producer state through retention, so nothing else
            // explains a gap): a later batch that arrives first, its predecessor refused
            // while the coordinator was busy, is refused too, and the producer resends both
            // in order instead of finding its first batch out of order for good.
            return match h.base_sequence {
                got if h.is_transactional() && got != 0 => Err(ProducerError::OutOfOrder { expected: 0, got }),
                _ => Ok(None),
            };
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
        // No batch at this epoch yet (a marker moved the producer to it, as transactions
        // version 2 does at every end): it starts at 0, as Kafka has it. A later batch
        // that arrives first (its predecessor refused, say, while the transaction's
        // coordinator was busy) is refused too, so the producer resends both in order.
        let expected = e.batches.back().map_or(0, |last| next_seq(last.last_seq));
        if h.base_sequence != expected {
            return Err(ProducerError::OutOfOrder { expected, got: h.base_sequence });
        }
        Ok(None)
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
            // A marker's kind does not matter to idempotence: any marker closes the
            // transaction and may move the epoch.
            view.record(p, p.is_control().then_some(Marker { end: TxnEnd::Abort, coordinator_epoch: -1 }));
        }
        view.check(h)
    }

    /// Checks a transaction marker before it is appended: an older epoch than the
    /// producer's is fenced (a zombie coordinator or producer cannot end a newer
    /// transaction).
    pub fn check_marker(&self, producer_id: i64, epoch: i16) -> Result<(), ProducerError> {
        match self.producers.get(&producer_id) {
            Some(e) if epoch < e.epoch => Err(ProducerError::Fenced),
            _ => Ok(()),
        }
    }

    /// Records a batch that is now in the log (appended, or found while scanning on open).
    /// `marker` is what a transaction marker records (None for any other batch).
    pub fn record(&mut self, h: &BatchHeader, marker: Option<Marker>) {
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
        e.last_timestamp = h.max_timestamp;
        e.last_offset = h.last_offset();
        if let Some(m) = marker {
            e.coordinator_epoch = m.coordinator_epoch;
        }
        let end = marker.map(|m| m.end);
        if h.is_transactional() {
            match (end, e.txn_first) {
                (Some(end), Some(first)) => {
                    e.txn_first = None;
                    self.unstable.insert(first, (h.producer_id, Some(h.base_offset)));
                    if end == TxnEnd::Abort {
                        self.aborted.push_back(AbortedTxn {
                            producer_id: h.producer_id,
                            first_offset: first,
                            last_offset: h.base_offset,
                        });
                    }
                }
                // A marker for a transaction that wrote nothing here closes nothing.
                (Some(_), None) => {}
                (None, Some(_)) => {}
                (None, None) if !h.is_control() => {
                    e.txn_first = Some(h.base_offset);
                    self.unstable.insert(h.base_offset, (h.producer_id, None));
                }
                (None, None) => {}
            }
        }
        if h.base_sequence < 0 || h.is_control() {
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

    /// Forgets the least recently written producer that has no open transaction (one with
    /// an open transaction holds the last stable offset back, and its marker must find it;
    /// transactions end by the coordinator's timeout, so those are bounded there).
    fn evict_oldest(&mut self) {
        let idle = self.producers.iter().filter(|(_, e)| e.txn_first.is_none());
        if let Some(pid) = idle.min_by_key(|(_, e)| e.last_write).map(|(p, _)| *p) {
            self.producers.remove(&pid);
        }
    }

    /// The first offset of the oldest transaction that is open or whose marker is not below
    /// `high_watermark`: the last stable offset is the smaller of it and the high
    /// watermark.
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        self.unstable
            .iter()
            .find(|(_, (_, marker))| marker.is_none_or(|m| m >= high_watermark))
            .map(|(first, _)| *first)
    }

    /// Forgets transactions whose marker is below `high_watermark` (they are stable).
    pub fn settle(&mut self, high_watermark: i64) {
        if !self.unstable.is_empty() {
            self.unstable.retain(|_, (_, marker)| marker.is_none_or(|m| m >= high_watermark));
        }
    }

    /// The aborted transactions that overlap `[from, upto)`, oldest marker first.
    pub fn aborted_in(&self, from: i64, upto: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted.iter().skip(start).filter(|a| a.first_offset < upto).copied().collect()
    }

    /// Forgets aborted transactions whose marker is below the log start (no fetch can read
    /// any of them any more).
    pub fn forget_below(&mut self, log_start_offset: i64) {
        while self.aborted.front().is_some_and(|a| a.last_offset < log_start_offset) {
            self.aborted.pop_front();
        }
    }

    /// The producers whose last batch is below `end`, encoded: what a replica whose log
    /// starts at `end` cannot rebuild from its batches (a Raft snapshot carries it, and a log
    /// whose first segments are deleted keeps it in a file). Producers that wrote at or past
    /// `end` are rebuilt from those batches.
    pub fn encode_below(&self, end: i64) -> Vec<u8> {
        let kept: Vec<(&i64, &ProducerEntry)> = self.producers.iter().filter(|(_, e)| e.last_offset < end).collect();
        let mut out = Vec::with_capacity(5 + kept.len() * 64);
        out.push(SNAPSHOT_VERSION);
        out.extend_from_slice(&(kept.len() as u32).to_be_bytes());
        for (pid, e) in kept {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.last_offset.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.txn_first.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
        out
    }

    /// Adds the producers [`ProducerTable::encode_below`] wrote (read from a file or a
    /// snapshot: every field is checked, and the table's bound holds). Returns how many.
    pub fn load(&mut self, data: &[u8]) -> Result<usize, String> {
        let mut r = Reader(data);
        let version = r.take::<1>()?[0];
        if !(1..=SNAPSHOT_VERSION).contains(&version) {
            return Err("unknown producer snapshot version".into());
        }
        let count = u32::from_be_bytes(r.take()?) as usize;
        if count > PRODUCERS_PER_PARTITION_MAX {
            return Err(format!("{count} producers is past the bound {PRODUCERS_PER_PARTITION_MAX}"));
        }
        let mut loaded = Vec::with_capacity(count.min(data.len() / 35));
        for _ in 0..count {
            let pid = i64::from_be_bytes(r.take()?);
            let mut e = ProducerEntry {
                epoch: i16::from_be_bytes(r.take()?),
                last_offset: i64::from_be_bytes(r.take()?),
                last_timestamp: i64::from_be_bytes(r.take()?),
                ..ProducerEntry::default()
            };
            let txn_first = i64::from_be_bytes(r.take()?);
            e.txn_first = (txn_first >= 0).then_some(txn_first);
            if version >= 2 {
                e.coordinator_epoch = i32::from_be_bytes(r.take()?);
            }
            let n = r.take::<1>()?[0] as usize;
            if n > CACHED_BATCHES_PER_PRODUCER {
                return Err(format!("{n} cached batches for producer {pid}"));
            }
            for _ in 0..n {
                e.batches.push_back(CachedBatch {
                    first_seq: i32::from_be_bytes(r.take()?),
                    last_seq: i32::from_be_bytes(r.take()?),
                    base_offset: i64::from_be_bytes(r.take()?),
                    last_offset: i64::from_be_bytes(r.take()?),
                });
            }
            loaded.push((pid, e));
        }
        if !r.0.is_empty() {
            return Err("trailing bytes after the producer snapshot".into());
        }
        for (pid, e) in loaded {
            if self.producers.len() >= PRODUCERS_PER_PARTITION_MAX && !self.producers.contains_key(&pid) {
                self.evict_oldest();
            }
            if let Some(first) = e.txn_first {
                self.unstable.insert(first, (pid, None));
            }
            self.producers.insert(pid, e);
        }
        Ok(count)
    }

    /// The producers a log directory keeps from its deleted segments, if any (an unreadable
    /// file is warned about and ignored: idempotence then starts afresh for those
    /// producers, as Kafka's does without its snapshot).
    pub(crate) fn read_file(dir: &Path) -> ProducerTable {
        let mut table = ProducerTable::default();
        match fs::read(dir.join(PRODUCERS_FILE)) {
            Ok(data) => {
                if let Err(e) = table.load(&data) {
                    tracing::warn!(dir = %dir.display(), error = %e, "ignoring an unreadable producer snapshot");
                    table = ProducerTable::default();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot read the producer snapshot"),
        }
        table
    }

    /// Writes a producer snapshot to a log directory atomically (temporary file, fsync,
    /// rename, directory fsync).
    pub(crate) fn write_file(dir: &Path, data: &[u8]) -> io::Result<()> {
        let tmp = dir.join(format!("{PRODUCERS_FILE}.tmp"));
        let mut f = fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(PRODUCERS_FILE))?;
        fs::File::open(dir)?.sync_all()
    }

    /// Removes a log directory's producer snapshot (the log restarts empty).
    pub(crate) fn remove_file(dir: &Path) -> io::Result<()> {
        match fs::remove_file(dir.join(PRODUCERS_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every producer remembered here, by id.
    pub fn describe(&self) -> Vec<ProducerInfo> {
        let mut out: Vec<ProducerInfo> = self
            .producers
            .iter()
            .map(|(&producer_id, e)| ProducerInfo {
                producer_id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.last_timestamp,
                current_txn_start_offset: e.txn_first.unwrap_or(-1),
                coordinator_epoch: e.coordinator_epoch,
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    /// Whether the producer has a transaction open here at `epoch`.
    pub fn in_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers.get(&producer_id).is_some_and(|e| e.txn_first.is_some() && e.epoch == epoch)
    }

    /// Producers with an open transaction, and where it started.
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        let mut open: Vec<(i64, i64)> =
            self.producers.iter().filter_map(|(&pid, e)| Some((pid, e.txn_first?))).collect();
        open.sort_unstable_by_key(|(_, first)| *first);
        open
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
        t.record(&a, None);
        // The retry of the same batch maps to its original offsets.
        assert_eq!(t.check(&batch(1, 0, 0, 5, -1)), Ok(Some((100, 104))));
        // The next batch must start at sequence 5.
        assert_eq!(t.check(&batch(1, 0, 6, 1, -1)), Err(ProducerError::OutOfOrder { expected: 5, got: 6 }));
        assert_eq!(t.check(&batch(1, 0, 5, 1, -1)), Ok(None));
        // A new epoch restarts at 0; an older one is fenced.
        t.record(&batch(1, 1, 0, 1, 105), None);
        assert_eq!(t.check(&batch(1, 0, 1, 1, -1)), Err(ProducerError::Fenced));
        assert_eq!(t.check(&batch(1, 2, 3, 1, -1)), Err(ProducerError::OutOfOrder { expected: 0, got: 3 }));
        // Only the last five batches are remembered.
        for i in 1..=6 {
            t.record(&batch(1, 1, i, 1, 105 + i as i64), None);
        }
        assert_eq!(t.check(&batch(1, 1, 1, 1, -1)), Err(ProducerError::OutOfOrder { expected: 7, got: 1 }));
        assert_eq!(t.check(&batch(1, 1, 2, 1, -1)), Ok(Some((107, 107))));
    }

    #[test]
    fn a_transactional_producer_new_here_starts_at_sequence_0() {
        let t = ProducerTable::default();
        assert_eq!(t.check(&txn_batch(5, 0, 7, -1)), Err(ProducerError::OutOfOrder { expected: 0, got: 7 }));
        assert_eq!(t.check(&txn_batch(5, 0, 0, -1)), Ok(None));
        assert_eq!(t.check(&batch(5, 0, 7, 1, -1)), Ok(None), "an idempotent one may go on where it was");
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut t = ProducerTable::default();
        t.record(&batch(9, 0, i32::MAX - 1, 2, 0), None);
        assert_eq!(t.check(&batch(9, 0, 0, 1, -1)), Ok(None));
    }

    fn txn_batch(pid: i64, epoch: i16, seq: i32, base_offset: i64) -> BatchHeader {
        BatchHeader { attributes: 0x10, ..batch(pid, epoch, seq, 1, base_offset) }
    }

    fn marker(pid: i64, epoch: i16, base_offset: i64) -> BatchHeader {
        BatchHeader { attributes: 0x30, ..batch(pid, epoch, -1, 1, base_offset) }
    }

    #[test]
    fn transactions_bound_the_stable_offset_until_their_markers_commit() {
        let mut t = ProducerTable::default();
        t.record(&batch(1, 0, 0, 1, 0), None); // not transactional
        t.record(&txn_batch(2, 0, 0, 1), None);
        t.record(&txn_batch(3, 0, 0, 2), None);
        t.record(&txn_batch(2, 0, 1, 3), None);
        assert_eq!(t.first_unstable_offset(10), Some(1));
        assert_eq!(t.open_transactions(), vec![(2, 1), (3, 2)]);
        // Producer 2 aborts at offset 4: still unstable until the high watermark passes it.
        t.record(&marker(2, 0, 4), Some(Marker { end: TxnEnd::Abort, coordinator_epoch: 0 }));
        assert_eq!(t.first_unstable_offset(4), Some(1));
        assert_eq!(t.first_unstable_offset(5), Some(2));
        t.settle(5);
        assert_eq!(t.first_unstable_offset(5), Some(2));
        assert_eq!(t.aborted_in(0, 10), vec![AbortedTxn { producer_id: 2, first_offset: 1, last_offset: 4 }]);
        assert_eq!(t.aborted_in(5, 10), vec![]);
        assert_eq!(t.aborted_in(0, 1), vec![]);
        // Producer 3 commits: nothing is unstable once its marker is below the watermark.
        t.record(&marker(3, 0, 5), Some(Marker { end: TxnEnd::Commit, coordinator_epoch: 0 }));
        assert_eq!(t.first_unstable_offset(6), None);
        t.settle(6);
        assert!(t.unstable.is_empty() && t.open_transactions().is_empty());
        assert_eq!(t.aborted_in(0, 10).len(), 1);
        // A marker for a transaction that wrote nothing here changes nothing.
        t.record(&marker(1, 0, 6), Some(Marker { end: TxnEnd::Abort, coordinator_epoch: 0 }));
        assert_eq!(t.aborted_in(0, 10).len(), 1);
        t.forget_below(5);
        assert!(t.aborted_in(0, 10).is_empty());
        // Markers from an older epoch are fenced; the sequence goes on after a marker.
        assert_eq!(t.check_marker(2, 0), Ok(()));
        t.record(&txn_batch(2, 1, 0, 7), None);
        assert_eq!(t.check_marker(2, 0), Err(ProducerError::Fenced));
        t.record(&marker(2, 1, 8), Some(Marker { end: TxnEnd::Commit, coordinator_epoch: 0 }));
        assert_eq!(t.check(&txn_batch(2, 1, 1, -1)), Ok(None));
    }

    #[test]
    fn producers_with_open_transactions_are_not_evicted() {
        let mut t = ProducerTable::default();
        t.record(&txn_batch(0, 0, 0, 0), None);
        for pid in 1..=PRODUCERS_PER_PARTITION_MAX as i64 {
            t.record(&batch(pid, 0, 0, 1, pid), None);
        }
        assert_eq!(t.len(), PRODUCERS_PER_PARTITION_MAX);
        assert_eq!(t.open_transactions(), vec![(0, 0)]);
    }

    #[test]
    fn producers_below_a_point_round_trip_and_garbage_is_refused() {
        let mut t = ProducerTable::default();
        t.record(&batch(1, 2, 0, 3, 10), None);
        t.record(&batch(1, 2, 3, 2, 13), None);
        t.record(&txn_batch(2, 0, 0, 20), None);
        t.record(&marker(1, 2, 16), Some(Marker { end: TxnEnd::Commit, coordinator_epoch: 9 }));
        t.record(&batch(3, 0, 0, 1, 30), None); // at the point: rebuilt from the log instead
        let data = t.encode_below(30);
        let mut copy = ProducerTable::default();
        assert_eq!(copy.load(&data), Ok(2));
        let coordinator_epochs: Vec<(i64, i32)> =
            copy.describe().iter().map(|p| (p.producer_id, p.coordinator_epoch)).collect();
        assert_eq!(coordinator_epochs, vec![(1, 9), (2, -1)], "DescribeProducers shows the last marker's");
        assert_eq!(copy.check(&batch(1, 2, 3, 2, -1)), Ok(Some((13, 14))), "a retry is still a duplicate");
        assert_eq!(copy.check(&batch(1, 1, 5, 1, -1)), Err(ProducerError::Fenced));
        assert_eq!(copy.check(&batch(1, 2, 9, 1, -1)), Err(ProducerError::OutOfOrder { expected: 5, got: 9 }));
        assert_eq!(copy.open_transactions(), vec![(2, 20)]);
        assert_eq!(copy.first_unstable_offset(100), Some(20));
        assert!(!copy.producers.contains_key(&3));
        for len in 0..data.len() {
            assert!(ProducerTable::default().load(&data[..len]).is_err(), "cut at {len}");
        }
        let mut huge = data.clone();
        huge[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(ProducerTable::default().load(&huge).is_err());
        let mut extra = data;
        extra.push(0);
        assert!(ProducerTable::default().load(&extra).is_err());
    }

    #[test]
    fn a_version_1_snapshot_still_loads() {
        // Version 1: no coordinator epoch. Producer 4: epoch 1, last offset 7, timestamp 5,
        // no open transaction, one cached batch (sequences 0-1, offsets 6-7).
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.extend_from_slice(&4i64.to_be_bytes());
        v1.extend_from_slice(&1i16.to_be_bytes());
        v1.extend_from_slice(&7i64.to_be_bytes());
        v1.extend_from_slice(&5i64.to_be_bytes());
        v1.extend_from_slice(&(-1i64).to_be_bytes());
        v1.push(1);
        for field in [0i32, 1] {
            v1.extend_from_slice(&field.to_be_bytes());
        }
        for field in [6i64, 7] {
            v1.extend_from_slice(&field.to_be_bytes());
        }
        let mut t = ProducerTable::default();
        assert_eq!(t.load(&v1), Ok(1));
        assert_eq!(t.check(&batch(4, 1, 0, 2, -1)), Ok(Some((6, 7))));
        assert_eq!(t.describe()[0].coordinator_epoch, -1);
    }
}
