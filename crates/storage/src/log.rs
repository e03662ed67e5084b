//! One partition's log: an ordered list of segments, the last one active.
//!
//! Invariants (asserted where cheap): segments are contiguous and ordered by base offset;
//! `log_start_offset <= log_end_offset`; offsets only grow; the checkpoint's recovery point
//! never passes data that has not been fsynced.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use runnel_wire::batch::{stamp, BatchHeader, HEADER_BYTES};
use runnel_wire::marker::marker;
use thiserror::Error;
use tracing::{info, warn};

use crate::cleaner::{self, CleanPlan, CleanStats, Cleaned, SegmentSnapshot};
use crate::config::roll_jitter;
pub use crate::config::{LogConfig, SEGMENT_BYTES_MAX};
use crate::producer::{AbortedTxn, ProducerError, ProducerTable};
use crate::segment::{file_name, Segment};
use crate::tail::{Written, PAGE};

mod checkpoint;

use crate::read::{First, ReadPlan, TimestampRead, Want, WarmPlan};

use checkpoint::{read_checkpoint, Closing};

/// Rolled segments' unsynced rests a log holds for [`Log::take_written`] at most; a log
/// whose writes no one takes (no page-cache tail) holds no more than this.
const ROLLED_MAX: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The batch was a retry of one already in the log; nothing was written.
    pub duplicate: bool,
}

#[derive(Debug, Error)]
pub enum AppendError {
    #[error("producer state: {0:?}")]
    Producer(ProducerError),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("offset {offset} is outside [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange { offset: i64, log_start_offset: i64, log_end_offset: i64 },
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    /// Never empty; the last one is active.
    segments: Vec<Segment>,
    log_start_offset: i64,
    /// Everything below this offset was fsynced and validated; recovery checks from here.
    recovery_point: i64,
    /// Offsets below this have been through the cleaner (compacted logs only).
    cleaner_point: i64,
    producers: ProducerTable,
    leader_epoch: i32,
    /// Checkpoints written so far; a staged close ([`Log::close_stage`]) is only committed
    /// if no other was written (or the log truncated) in between.
    checkpoints: u64,
    /// What a staged close wrote, or that it left the checkpoint as it was.
    closing: Option<Closing>,
    /// The checkpoint's values in the file, as this log last read or wrote them: a close
    /// that would write the same, with nothing appended since, writes nothing.
    checkpoint_on_disk: Option<(i64, i64, i64)>,
    /// How far [`Log::take_written`] has handed out the writes to a segment file: the file
    /// (held weakly: it is only compared) and a page-aligned position in it.
    written_mark: (Weak<File>, u64),
    /// The parts of segments that rolled which [`Log::take_written`] has not handed out,
    /// oldest first: the appends of one round can roll several times. At most
    /// [`ROLLED_MAX`]; beyond that the oldest is left to the kernel's reclaim.
    rolled: Vec<Written>,
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering from a crash if needed: batches from
    /// the last recovery point on are CRC-checked and a torn or corrupt tail is truncated.
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> io::Result<Log> {
        Log::open_visiting(dir, config, now_ms, |_| {})
    }

    /// [`Log::open`], handing the header of every batch that survives recovery to `visit`,
    /// in offset order (the Raft layer rebuilds its index-to-offset map from them).
    pub fn open_visiting(
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
        mut visit: impl FnMut(&BatchHeader),
    ) -> io::Result<Log> {
        fs::create_dir_all(dir)?;
        cleaner::recover_swaps(dir)?;
        let checkpoint_on_disk = read_checkpoint(dir)?;
        let (recovery_point, mut log_start_offset, cleaner_point) = checkpoint_on_disk.unwrap_or((0, 0, 0));
        let mut bases: Vec<i64> = fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                // A negative base offset names no segment this log writes.
                name.strip_suffix(".log")?.parse::<i64>().ok().filter(|base| *base >= 0)
            })
            .collect();
        bases.sort_unstable();
        let mut producers = ProducerTable::read_file(dir);
        let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
        let mut truncated = false;
        for base in bases {
            if truncated {
                warn!(dir = %dir.display(), base, "deleting segment after a truncated one");
                Segment::open(dir, base, config.index_interval_bytes, now_ms)?.delete()?;
                continue;
            }
            let mut seg = Segment::open(dir, base, config.index_interval_bytes, now_ms)?;
            if let Some(prev) = segments.last() {
                if prev.next_offset > base {
                    warn!(dir = %dir.display(), base, "segment overlaps its predecessor; deleting it");
                    seg.delete()?;
                    truncated = true;
                    continue;
                }
            }
            let outcome = seg.scan(recovery_point, |h, end| {
                producers.record(h, end);
                visit(h);
            })?;
            if let Some(why) = outcome.torn {
                warn!(dir = %dir.display(), base, valid_bytes = outcome.valid_bytes, %why, "truncating torn log tail");
                seg.truncate_to(outcome.valid_bytes)?;
                truncated = true;
            }
            if let Some(prev) = segments.last_mut() {
                prev.forget_recent();
            }
            segments.push(seg);
        }
        if segments.is_empty() {
            segments.push(Segment::create(dir, log_start_offset.max(0), config.index_interval_bytes, now_ms)?);
        }
        log_start_offset = log_start_offset.max(segments[0].base_offset);
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset,
            recovery_point,
            cleaner_point,
            producers,
            leader_epoch: 0,
            checkpoints: 0,
            closing: None,
            checkpoint_on_disk,
            written_mark: (Weak::new(), 0),
            rolled: Vec::new(),
        };
        log.log_start_offset = log.log_start_offset.min(log.log_end_offset());
        if truncated {
            info!(dir = %dir.display(), log_end_offset = log.log_end_offset(), "recovered");
        }
        log.recovery_point = log.recovery_point.min(log.log_end_offset());
        Ok(log)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }

    /// Whether everything in the log was on disk, synced, when it was opened (the last
    /// shutdown was clean and nothing was written since).
    pub fn synced_to_end(&self) -> bool {
        self.recovery_point >= self.log_end_offset()
    }

    /// Offsets below this have been through a cleaning pass.
    pub fn cleaner_point(&self) -> i64 {
        self.cleaner_point
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    fn active(&self) -> &Segment {
        self.segments.last().expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments.last_mut().expect("a log always has an active segment")
    }

    /// Appends one validated batch, assigning its offsets. A retry of a batch the producer
    /// already wrote is not stored again: its original offsets come back as a duplicate.
    pub fn append(&mut self, batch: &[u8], h: &BatchHeader, now_ms: i64) -> Result<AppendInfo, AppendError> {
        if let Some((base_offset, last_offset)) = self.producers.check(h).map_err(AppendError::Producer)? {
            return Ok(AppendInfo { base_offset, last_offset, duplicate: true });
        }
        let stamped = self.append_at_end(batch, self.leader_epoch, now_ms)?;
        assert_eq!(self.log_end_offset(), stamped.next_offset(), "log end must follow the appended batch");
        Ok(AppendInfo { base_offset: stamped.base_offset, last_offset: stamped.last_offset(), duplicate: false })
    }

    /// Appends a batch at the log end, stamping its offsets (from the log end) and
    /// `leader_epoch` into its header as it is written (a replicated entry, or a validated
    /// batch): the batch itself is not copied or changed. The CRC does not cover those
    /// fields. Producer state follows it, so a follower that becomes leader answers retries
    /// as the old leader would have. Returns the header as written.
    pub fn append_at_end(&mut self, batch: &[u8], leader_epoch: i32, now_ms: i64) -> io::Result<BatchHeader> {
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        let mut head = [0u8; HEADER_BYTES];
        head.copy_from_slice(
            batch.get(..HEADER_BYTES).ok_or_else(|| invalid(format!("a batch of {} bytes", batch.len())))?,
        );
        stamp(&mut head, self.log_end_offset(), leader_epoch);
        let h = BatchHeader::parse(&head).map_err(|e| invalid(e.to_string()))?;
        if h.total_bytes() != batch.len() {
            return Err(invalid(format!("a batch of {} bytes says it has {}", batch.len(), h.total_bytes())));
        }
        self.maybe_roll(batch.len() as u64, h.last_offset(), now_ms)?;
        if let Err(e) = self.active_mut().append_split(&head, &batch[HEADER_BYTES..], &h) {
            // The tail may now hold a partial batch; cut it so the next append lands cleanly.
            let size = self.active().size;
            let _ = self.active_mut().truncate_to(size);
            return Err(e);
        }
        self.producers.record(&h, marker(&h, batch));
        Ok(h)
    }

    /// Removes every batch at or after `offset` (Raft replaced them with the leader's
    /// entries). `offset` must be a batch boundary. Producer state is rebuilt from what
    /// stays, which means reading every remaining batch header: truncation is rare.
    pub fn truncate_from(&mut self, offset: i64, now_ms: i64) -> io::Result<()> {
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        while self.segments.len() > 1 && self.active().base_offset >= offset {
            let seg = self.segments.pop().expect("more than one segment");
            seg.delete()?;
        }
        let base = self.active().base_offset;
        if offset >= self.log_end_offset() {
            // The cut fell on a segment boundary: dropping later segments was all of it.
        } else if offset <= base {
            let seg = self.segments.pop().expect("a log always has an active segment");
            seg.delete()?;
            self.segments.push(Segment::create(&self.dir, offset.max(0), self.config.index_interval_bytes, now_ms)?);
        } else {
            let pos = match self.active().position_of(offset)? {
                Some((pos, h)) if h.base_offset == offset => pos,
                found => {
                    let found = found.map(|(_, h)| (h.base_offset, h.last_offset()));
                    return Err(io::Error::other(format!(
                        "offset {offset} is not a batch boundary (segment {base}, found {found:?}, end {})",
                        self.log_end_offset()
                    )));
                }
            };
            self.active_mut().truncate_to(pos)?;
            let mut seg = Segment::open(&self.dir, base, self.config.index_interval_bytes, now_ms)?;
            // Rebuild the indexes from what is left (they may point past the cut).
            seg.scan(i64::MAX, |_, _| {})?;
            *self.active_mut() = seg;
        }
        let mut producers = ProducerTable::read_file(&self.dir);
        for seg in &self.segments {
            seg.for_each_header(|h, end| producers.record(h, end))?;
        }
        self.producers = producers;
        self.log_start_offset = self.log_start_offset.min(self.log_end_offset());
        self.recovery_point = self.recovery_point.min(self.log_end_offset());
        self.write_checkpoint()
    }

    /// Drops the whole log and restarts it empty at `offset` (a replica installing a
    /// snapshot: the leader no longer has what came before).
    pub fn reset(&mut self, offset: i64, now_ms: i64) -> io::Result<()> {
        for seg in std::mem::take(&mut self.segments) {
            seg.delete()?;
        }
        self.segments.push(Segment::create(&self.dir, offset, self.config.index_interval_bytes, now_ms)?);
        self.log_start_offset = offset;
        self.recovery_point = offset;
        self.cleaner_point = offset;
        self.producers = ProducerTable::default();
        ProducerTable::remove_file(&self.dir)?;
        self.write_checkpoint()
    }

    /// Drops the whole log and rebuilds it from a leader's snapshot: `prefix` holds the
    /// batches the leader keeps below `end` (a compacted log's cleaned part, with gaps
    /// between offsets; empty when retention deleted everything below `end`), `producers`
    /// the producers that wrote only below `end` ([`Log::producer_snapshot`]), and the log
    /// goes on at `end` with `log_start` as its start.
    pub fn restore(
        &mut self,
        prefix: &[u8],
        producers: &[u8],
        log_start: i64,
        end: i64,
        now_ms: i64,
    ) -> io::Result<()> {
        let mut batches = Vec::new();
        for item in runnel_wire::batch::Batches::new(prefix) {
            let (h, range) = item.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if h.base_offset >= end
                || batches.last().is_some_and(|(p, _): &(BatchHeader, _)| h.base_offset < p.next_offset())
            {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot batches out of order"));
            }
            batches.push((h, range));
        }
        self.reset(batches.first().map_or(end, |(h, _)| h.base_offset), now_ms)?;
        if !producers.is_empty() {
            self.producers.load(producers).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            ProducerTable::write_file(&self.dir, producers)?;
        }
        for (h, range) in &batches {
            self.maybe_roll(range.len() as u64, h.last_offset(), now_ms)?;
            let batch = &prefix[range.clone()];
            self.active_mut().append(batch, h)?;
            self.producers.record(h, marker(h, batch));
        }
        if self.log_end_offset() < end {
            self.active_mut().seal()?;
            self.segments.push(Segment::create(&self.dir, end, self.config.index_interval_bytes, now_ms)?);
        }
        self.active().file.sync_data()?;
        self.log_start_offset = log_start.clamp(self.segments[0].base_offset, end);
        self.recovery_point = end;
        self.cleaner_point = end;
        self.write_checkpoint()
    }

    /// The idempotence check of [`Log::append`] for a batch that will follow `pending`
    /// (batches proposed to Raft but not yet in the log). `Ok(Some((base, last)))`: a
    /// duplicate of the batch at those offsets.
    pub fn check_producer(
        &self,
        h: &BatchHeader,
        pending: &[BatchHeader],
    ) -> Result<Option<(i64, i64)>, ProducerError> {
        self.producers.check_after(h, pending)
    }

    /// The producers a replica whose log starts at `end` cannot learn from its batches (a
    /// Raft snapshot carries them).
    pub fn producer_snapshot(&self, end: i64) -> Vec<u8> {
        self.producers.encode_below(end)
    }

    /// Checks a transaction marker of `producer_id` at `epoch` before it is appended.
    pub fn check_marker(&self, producer_id: i64, epoch: i16) -> Result<(), ProducerError> {
        self.producers.check_marker(producer_id, epoch)
    }

    /// The last stable offset for a high watermark: below it, every transaction has ended
    /// and its marker is committed (what a `read_committed` fetch may return).
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.producers.first_unstable_offset(high_watermark).map_or(high_watermark, |o| o.min(high_watermark))
    }

    /// The high watermark moved: transactions whose markers are below it are stable.
    pub fn settle_transactions(&mut self, high_watermark: i64) {
        self.producers.settle(high_watermark);
    }

    /// Aborted transactions overlapping `[from, upto)` (a `read_committed` fetch's range).
    pub fn aborted_transactions(&self, from: i64, upto: i64) -> Vec<AbortedTxn> {
        self.producers.aborted_in(from, upto)
    }

    /// The producers remembered here (DescribeProducers).
    pub fn producers(&self) -> Vec<crate::ProducerInfo> {
        self.producers.describe()
    }

    /// Whether `producer_id` has a transaction open here at `epoch` (in the log as written).
    pub fn in_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers.in_transaction(producer_id, epoch)
    }

    /// Producers with an open transaction here, and the offset it started at.
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        self.producers.open_transactions()
    }

    /// Base offset of the first batch kept on disk (below the log start when DeleteRecords
    /// moved the start inside a segment).
    pub fn first_batch_offset(&self) -> i64 {
        self.segments[0].base_offset
    }

    /// Re-reads the `.log` bytes of the batches in `[from, to)`, at most `max_bytes`
    /// (always at least the first batch), whatever the high watermark.
    /// Batches that DeleteRecords put below the log start but that are still on disk can be
    /// read this way (a Raft leader sends whole entries).
    pub fn read_range(&self, from: i64, to: i64, max_bytes: usize) -> io::Result<Vec<u8>> {
        match self.read_above(self.first_batch_offset(), from, max_bytes, to, true) {
            Ok(plan) => plan.execute(),
            Err(ReadError::Io(e)) => Err(e),
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }

    /// Plans what [`Log::read_range`] reads (at most one segment's worth), without reading
    /// the file: a caller that must not wait for the disk asks [`ReadPlan::may_wait`] first.
    pub fn plan_range(&self, from: i64, to: i64, max_bytes: usize) -> Result<ReadPlan, ReadError> {
        self.read_above(self.first_batch_offset(), from, max_bytes, to, true)
    }

    /// Plans reading the log from `from` toward `to` into the page cache, `max_bytes` at
    /// most in all: [`Log::plan_range`]'s read, then the next segments' from their start
    /// while bytes are left and they hold offsets below `to` (a Raft follower catching up is
    /// sent entries that run on into the next segment). Reads nothing.
    pub fn plan_warm(&self, from: i64, to: i64, max_bytes: usize) -> Result<WarmPlan, ReadError> {
        let first = self.plan_range(from, to, max_bytes)?;
        let Some(start) = first.start() else { return Ok(WarmPlan { plans: vec![first] }) };
        // The segment plan_range chose.
        let Some(i) = self.segment_reaching(from) else { return Ok(WarmPlan { plans: vec![first] }) };
        let mut left = max_bytes.saturating_sub(self.segments[i].size.saturating_sub(start) as usize);
        let mut plans = vec![first];
        for seg in &self.segments[i + 1..] {
            if left == 0 || seg.base_offset >= to {
                break;
            }
            if seg.size == 0 {
                continue;
            }
            let want = Want { max_bytes: left, min_one: true, upper: to };
            plans.push(ReadPlan::seek(seg.file.clone(), 0, seg.size, seg.base_offset, want));
            left = left.saturating_sub(seg.size as usize);
        }
        Ok(WarmPlan { plans })
    }

    /// Hands the header of the batch holding `from` and of every later batch to `visit`, in
    /// order, until it returns false. Like [`Log::read_range`], batches below the log start
    /// that are still on disk are included. Reads headers only.
    pub fn walk_batches(&self, from: i64, mut visit: impl FnMut(&BatchHeader) -> bool) -> io::Result<()> {
        let first = self.segments.partition_point(|s| s.base_offset <= from).saturating_sub(1);
        for seg in &self.segments[first..] {
            if seg.walk_from(from, &mut visit)? {
                break;
            }
        }
        Ok(())
    }

    /// Rolls before a batch of `incoming` bytes ending at `last_offset` when the active
    /// segment is full, old, or could not index that offset (the index holds offsets
    /// relative to the segment's base in 32 bits; batches may claim up to 2^31 records, so
    /// as Kafka does, a segment never spans more than i32::MAX offsets).
    fn maybe_roll(&mut self, incoming: u64, last_offset: i64, now_ms: i64) -> io::Result<()> {
        let active = self.active();
        let full = active.size + incoming > self.config.segment_bytes.min(SEGMENT_BYTES_MAX);
        let old = now_ms - active.created_ms >= self.config.segment_ms - roll_jitter(&self.config, active.base_offset);
        let far = last_offset.saturating_sub(active.base_offset) > i32::MAX as i64;
        if active.size > 0 && (full || old || far) {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Starts a new active segment at the log end. The old one is fsynced first, so the
    /// recovery point can move to the new segment's base offset.
    fn roll(&mut self, now_ms: i64) -> io::Result<()> {
        let base = self.log_end_offset();
        self.active_mut().seal()?;
        // Whole now: the partial last page goes too.
        let rest = Written { sealed: true, ..self.written_in_active(self.active().size.next_multiple_of(PAGE)) };
        if self.rolled.len() == ROLLED_MAX {
            self.rolled.remove(0);
        }
        self.rolled.push(rest);
        let seg = Segment::create(&self.dir, base, self.config.index_interval_bytes, now_ms)?;
        self.segments.push(seg);
        self.recovery_point = base;
        self.write_checkpoint()
    }

    /// Hands out the writes since the last call, in whole pages, for the page-cache tail
    /// ([`crate::CacheTail`]): the rest of every segment that rolled since, and the active
    /// segment's up to its last whole page. Call it when taking the writes to sync.
    pub fn take_written(&mut self, out: &mut Vec<Written>) {
        out.extend(self.rolled.drain(..).filter(|w| !w.is_empty()));
        let w = self.written_in_active(self.active().size / PAGE * PAGE);
        if !w.is_empty() {
            self.written_mark = (w.file.clone(), w.to);
            out.push(w);
        }
    }

    /// The active segment's bytes from where [`Log::take_written`] left it (its start if
    /// that was another file: a new, reopened or truncated segment) up to `to`.
    fn written_in_active(&self, to: u64) -> Written {
        let file = &self.active().file;
        let (marked, at) = &self.written_mark;
        let from = if std::ptr::eq(marked.as_ptr(), Arc::as_ptr(file)) { (*at).min(to) } else { 0 };
        Written { file: Arc::downgrade(file), from, to, sealed: false }
    }

    /// Files holding writes that must be fsynced for everything appended so far to be
    /// durable. Segments other than the active one were fsynced when they rolled.
    pub fn sync_handle(&self) -> Arc<File> {
        self.active().file.clone()
    }

    /// Plans a read of at most `max_bytes` starting at the batch that holds `offset`,
    /// stopping before `upper`. With `min_one`, the first batch is returned whole even if
    /// it is bigger than `max_bytes` (KIP-74), so a consumer can always make progress.
    pub fn read(&self, offset: i64, max_bytes: usize, upper: i64, min_one: bool) -> Result<ReadPlan, ReadError> {
        self.read_above(self.log_start_offset, offset, max_bytes, upper, min_one)
    }

    fn read_above(
        &self,
        start: i64,
        offset: i64,
        max_bytes: usize,
        upper: i64,
        min_one: bool,
    ) -> Result<ReadPlan, ReadError> {
        let end = self.log_end_offset();
        if offset < start || offset > end {
            return Err(ReadError::OffsetOutOfRange { offset, log_start_offset: start, log_end_offset: end });
        }
        let want = Want { max_bytes, min_one, upper };
        if offset >= upper {
            return Ok(ReadPlan::nothing(want));
        }
        let Some(seg) = self.segment_reaching(offset).map(|i| &self.segments[i]) else {
            return Ok(ReadPlan::nothing(want));
        };
        // A fetch at the tail finds its batch among the segment's last; any other reads
        // headers from an index entry on, once the caller has released the partition.
        Ok(match seg.recent_batch(offset) {
            Some(p) => {
                let first = First { pos: p.pos, bytes: p.bytes, base_offset: p.base_offset };
                ReadPlan::known(seg.file.clone(), seg.size, first, want, seg.recent())
            }
            None => {
                let from = seg.index_position(offset);
                ReadPlan::seek(seg.file.clone(), from, seg.size, offset, want)
            }
        })
    }

    /// The index of the segment holding `offset`, or of the first batch after it: the last
    /// segment based at or below it, unless nothing there reaches it (a gap compaction left).
    fn segment_reaching(&self, offset: i64) -> Option<usize> {
        let first = self.segments.partition_point(|s| s.base_offset <= offset).saturating_sub(1);
        let at = self.segments[first..].iter().position(|s| s.size > 0 && s.next_offset > offset)?;
        Some(first + at)
    }

    /// The read of the first batch holding a record with timestamp >= `ts` in a segment
    /// reaching past the log start (the caller finds the record inside it): planned from
    /// the time index without reading the file, so under the partition lock.
    pub fn batch_for_timestamp(&self, ts: i64) -> Option<TimestampRead> {
        let live = self.segments.iter().filter(|s| s.next_offset > self.log_start_offset);
        live.filter_map(|seg| Some(TimestampRead::new(seg.file.clone(), seg.timestamp_position(ts)?, seg.size, ts)))
            .next()
    }

    /// The read of the batch holding the largest timestamp in the log (the earliest such
    /// batch), planned as [`Log::batch_for_timestamp`] is.
    pub fn batch_with_max_timestamp(&self) -> Option<TimestampRead> {
        let live = self.segments.iter().filter(|s| s.next_offset > self.log_start_offset && s.max_timestamp >= 0);
        let seg = live.rev().max_by_key(|s| s.max_timestamp)?;
        let ts = seg.max_timestamp;
        Some(TimestampRead::new(seg.file.clone(), seg.timestamp_position(ts)?, seg.size, ts))
    }

    /// DeleteRecords: moves the log start offset to `offset` (at most the log end) and
    /// deletes segments that lie wholly below it.
    pub fn delete_records_before(&mut self, offset: i64) -> io::Result<i64> {
        assert!(offset <= self.log_end_offset(), "caller checks the bound against the high watermark");
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            self.delete_segments_while(|log, s| s.next_offset <= log.log_start_offset)?;
            self.write_checkpoint()?;
        }
        Ok(self.log_start_offset)
    }

    /// Deletes segments past retention (time or size). Returns how many were deleted.
    pub fn enforce_retention(&mut self, now_ms: i64) -> io::Result<usize> {
        let Some(point) = self.retention_point(now_ms)? else { return Ok(0) };
        let deleted = self.delete_segments_while(|_, s| s.next_offset <= point)?;
        self.log_start_offset = self.log_start_offset.max(self.segments[0].base_offset);
        self.write_checkpoint()?;
        Ok(deleted)
    }

    /// Where time and size retention would move the log start: the base offset of the
    /// first segment to keep, or None when no segment has expired. Deletes nothing (a
    /// replicated log first moves its Raft snapshot point), but rolls an expired active
    /// segment so that it can go too.
    pub fn retention_point(&mut self, now_ms: i64) -> io::Result<Option<i64>> {
        if !self.config.delete {
            return Ok(None);
        }
        let retention_ms = self.config.retention_ms;
        // Kafka's rule: a segment expires by its newest record timestamp; a segment without
        // timestamps falls back to its file time.
        let newest = |s: &Segment| if s.max_timestamp >= 0 { s.max_timestamp } else { s.created_ms };
        let expired = |s: &Segment| retention_ms >= 0 && s.size > 0 && newest(s) < now_ms - retention_ms;
        if expired(self.active()) {
            self.roll(now_ms)?;
        }
        let closed = &self.segments[..self.segments.len() - 1];
        let mut keep = closed.iter().take_while(|s| expired(s)).count();
        let retention_bytes = self.config.retention_bytes;
        if retention_bytes >= 0 {
            let mut total: i64 = self.segments[keep..].iter().map(|s| s.size as i64).sum();
            while keep < closed.len() && total - closed[keep].size as i64 >= retention_bytes {
                total -= closed[keep].size as i64;
                keep += 1;
            }
        }
        Ok((keep > 0).then(|| self.segments[keep].base_offset))
    }

    /// Deletes segments from the front while `pred` holds, never the active one.
    fn delete_segments_while(&mut self, mut pred: impl FnMut(&Log, &Segment) -> bool) -> io::Result<usize> {
        let doomed = self.segments[..self.segments.len() - 1].iter().take_while(|s| pred(self, s)).count();
        if doomed > 0 {
            // The producers that wrote only in the segments about to go, kept first: a
            // crash after this write and before the deletion rebuilds them twice, which is
            // harmless.
            let kept_from = self.segments[doomed].base_offset;
            ProducerTable::write_file(&self.dir, &self.producers.encode_below(kept_from))?;
        }
        let mut n = 0;
        while self.segments.len() > 1 && pred(self, &self.segments[0]) {
            let seg = self.segments.remove(0);
            info!(dir = %self.dir.display(), base_offset = seg.base_offset, "deleting segment");
            seg.delete()?;
            n += 1;
        }
        if n > 0 {
            // Markers in deleted segments are gone: so is what they recorded.
            self.producers.forget_below(self.segments[0].base_offset);
        }
        Ok(n)
    }

    /// Decides whether the log needs a cleaning pass and, if so, snapshots what the pass
    /// needs. Only closed segments wholly below `upper` (the high watermark; the last stable
    /// offset when a transaction is open) and older than
    /// `min.compaction.lag.ms` are cleanable; a pass runs once the dirty share reaches
    /// `min.cleanable.dirty.ratio`, or when dirty data is older than `max.compaction.lag.ms`.
    pub fn clean_plan(&self, upper: i64, now_ms: i64) -> Option<CleanPlan> {
        let c = &self.config;
        if !c.compact {
            return None;
        }
        // As Kafka's cleaner: nothing at or past the last stable offset (an open
        // transaction's records may still be aborted).
        let upper = self.last_stable_offset(upper);
        let closed = &self.segments[..self.segments.len() - 1];
        let lag_bound = now_ms.saturating_sub(c.min_compaction_lag_ms);
        let n = closed
            .iter()
            .take_while(|s| s.next_offset <= upper && (c.min_compaction_lag_ms <= 0 || s.max_timestamp <= lag_bound))
            .count();
        let cleanable = &closed[..n];
        let dirty = |s: &&Segment| s.next_offset > self.cleaner_point;
        let dirty_bytes: u64 = cleanable.iter().filter(dirty).map(|s| s.size).sum();
        let total_bytes: u64 = cleanable.iter().map(|s| s.size).sum();
        if dirty_bytes == 0 {
            return None;
        }
        let overdue_bound = now_ms.saturating_sub(c.max_compaction_lag_ms);
        let overdue = cleanable.iter().filter(dirty).any(|s| s.max_timestamp >= 0 && s.max_timestamp < overdue_bound);
        if (dirty_bytes as f64) < c.min_cleanable_dirty_ratio * total_bytes as f64 && !overdue {
            return None;
        }
        Some(CleanPlan {
            dir: self.dir.clone(),
            segments: cleanable
                .iter()
                .map(|s| SegmentSnapshot {
                    base_offset: s.base_offset,
                    next_offset: s.next_offset,
                    size: s.size,
                    file: s.file.clone(),
                })
                .collect(),
            first_dirty: self.cleaner_point,
            producer_last_offsets: self.producers.last_offsets(),
            aborted: self.producers.aborted_in(0, upper),
            segment_bytes: c.segment_bytes.min(SEGMENT_BYTES_MAX),
            delete_retention_ms: c.delete_retention_ms,
        })
    }

    /// Swaps in the segments a cleaning pass wrote. A group whose old segments changed
    /// meanwhile (retention or DeleteRecords removed one) is discarded; the next pass
    /// redoes it.
    pub fn clean_swap(&mut self, cleaned: Cleaned, now_ms: i64) -> io::Result<CleanStats> {
        let dir_sync = |dir: &Path| File::open(dir)?.sync_all();
        for g in cleaned.groups {
            let at = self.segments.iter().position(|s| s.base_offset == g.bases[0]);
            let intact = at.is_some_and(|i| {
                i + g.bases.len() < self.segments.len()
                    && g.bases.iter().zip(&self.segments[i..]).all(|(b, s)| *b == s.base_offset)
            });
            let Some(i) = at.filter(|_| intact) else {
                fs::remove_file(&g.path)?;
                continue;
            };
            let base = g.bases[0];
            let swap = self.dir.join(cleaner::swap_name(base, g.end));
            fs::rename(&g.path, &swap)?;
            dir_sync(&self.dir)?;
            for old in self.segments.drain(i..i + g.bases.len()).collect::<Vec<_>>() {
                old.delete()?;
            }
            fs::rename(&swap, self.dir.join(file_name(base, "log")))?;
            dir_sync(&self.dir)?;
            let mut seg = Segment::open(&self.dir, base, self.config.index_interval_bytes, now_ms)?;
            // The file was written and fsynced by the cleaner from validated batches.
            seg.scan(i64::MAX, |_, _| {})?;
            // Never the active segment, the only one that keeps its last batches placed.
            seg.forget_recent();
            self.segments.insert(i, seg);
        }
        self.cleaner_point = self.cleaner_point.max(cleaned.cleaned_through);
        self.write_checkpoint()?;
        Ok(cleaned.stats)
    }
}
