//! Log compaction (`cleanup.policy=compact`): keep the latest record for every key.
//!
//! The cleaner works as Kafka's does, on our segments:
//!
//! 1. Under the partition lock, [`Log::clean_plan`](crate::Log::clean_plan) snapshots the
//!    closed segments below the high watermark and decides whether the dirty part (written
//!    since the last pass) is worth a pass (`min.cleanable.dirty.ratio`).
//! 2. Without the lock, [`CleanPlan::execute`] maps every key of the dirty part to its last
//!    offset, then rewrites all cleanable segments into `.cleaned` files, merging neighbours
//!    up to `segment.bytes`. A record survives if no later record has its key; a tombstone
//!    (null value) survives until it is `delete.retention.ms` old. Batches keep their base
//!    offset, last offset delta, sequence numbers and codec; only the records inside change,
//!    so offsets never move and the producer state rebuilt from headers stays the same
//!    (a producer's last batch is kept as an empty batch when all its records go).
//! 3. Under the lock again, [`Log::clean_swap`](crate::Log::clean_swap) swaps each file in
//!    if the segments it replaces are still there. The swap is crash-safe: the new file is
//!    fsynced and renamed to `{base}-{end}.swap` (the commit point), the old segments are
//!    deleted, and the file is renamed to `{base}.log`. Opening a log finishes any swap left
//!    half done and drops `.cleaned` leftovers.
//!
//! Transactions: a pass stops at the last stable offset and drops the records of aborted
//! transactions (they neither survive nor hide an older record of their key). A marker is
//! kept while any batch of its transaction is (else the transaction would look open when
//! the state is rebuilt from the log), and removed, as Kafka does, once none is and the
//! marker is `delete.retention.ms` old (a consumer that was reading it by then has passed
//! it). So a compacted topic written by transactions (`__consumer_offsets` under
//! exactly-once) does not grow by a marker per transaction forever.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::hash::BuildHasher;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use runnel_wire::batch::{BatchHeader, HEADER_BYTES};
use runnel_wire::records::rebuild;
pub use runnel_wire::records::{records_of, RecordRef, Records};

use crate::producer::AbortedTxn;
use crate::segment::{self, file_name};

/// Keys one pass maps (a map entry costs ~40 bytes). A pass that reaches this stops at the
/// end of the current segment; the next pass carries on from there.
const MAP_ENTRIES_MAX: usize = 1 << 20;

/// A closed segment as the cleaner reads it (the file stays readable even if retention
/// deletes the segment meanwhile).
#[derive(Clone)]
pub(crate) struct SegmentSnapshot {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size: u64,
    pub file: Arc<File>,
}

/// What one cleaning pass will work on, taken under the partition lock.
pub struct CleanPlan {
    pub(crate) dir: PathBuf,
    /// Every cleanable closed segment, from the first one on.
    pub(crate) segments: Vec<SegmentSnapshot>,
    /// Offsets from here on have not been through a pass yet.
    pub(crate) first_dirty: i64,
    /// Last offset of each producer's last batch: that batch is kept even when emptied.
    pub(crate) producer_last_offsets: HashMap<i64, i64>,
    /// Aborted transactions below the plan's bound: their records go, and never hide an
    /// older record of the same key.
    pub(crate) aborted: Vec<AbortedTxn>,
    pub(crate) segment_bytes: u64,
    pub(crate) delete_retention_ms: i64,
}

/// The rewritten segments, ready to be swapped in.
pub struct Cleaned {
    pub(crate) groups: Vec<CleanedGroup>,
    /// The dirty part covered by this pass ends here.
    pub(crate) cleaned_through: i64,
    pub stats: CleanStats,
}

pub(crate) struct CleanedGroup {
    /// Base offsets of the segments this file replaces (contiguous, in order).
    pub bases: Vec<i64>,
    /// One past the last offset of the replaced segments.
    pub end: i64,
    pub path: PathBuf,
}

impl Cleaned {
    /// The dirty part covered by this pass ends here (a batch boundary).
    pub fn cleaned_through(&self) -> i64 {
        self.cleaned_through
    }

    /// Drops a pass that will not be swapped in.
    pub fn discard(self) -> io::Result<()> {
        for g in self.groups {
            fs::remove_file(&g.path)?;
        }
        Ok(())
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CleanStats {
    pub segments_before: usize,
    pub segments_after: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    /// Transaction markers removed (their transactions had nothing left).
    pub markers_removed: u64,
}

pub(crate) fn swap_name(base: i64, end: i64) -> String {
    format!("{base:020}-{end:020}.swap")
}

/// Parses `{base}-{end}.swap`.
pub(crate) fn parse_swap_name(name: &str) -> Option<(i64, i64)> {
    let (base, end) = name.strip_suffix(".swap")?.split_once('-')?;
    Some((base.parse().ok()?, end.parse().ok()?))
}

/// Finishes swaps that a crash interrupted and removes unfinished `.cleaned` files; runs
/// before a log lists its segments.
pub(crate) fn recover_swaps(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        if name.ends_with(".cleaned") {
            fs::remove_file(entry.path())?;
        } else if let Some((base, end)) = parse_swap_name(&name) {
            tracing::warn!(dir = %dir.display(), base, end, "finishing an interrupted compaction swap");
            for old in fs::read_dir(dir)? {
                let old = old?.file_name().into_string().unwrap_or_default();
                let Some(b) = old.strip_suffix(".log").and_then(|s| s.parse::<i64>().ok()) else { continue };
                if (base..end).contains(&b) {
                    segment::remove_files(dir, b)?;
                }
            }
            fs::rename(entry.path(), dir.join(file_name(base, "log")))?;
            File::open(dir)?.sync_all()?;
        }
    }
    Ok(())
}

/// 128-bit key digests: the offset map never holds the keys themselves.
struct KeyHasher(RandomState, RandomState);

impl KeyHasher {
    fn digest(&self, key: &[u8]) -> u128 {
        ((self.0.hash_one(key) as u128) << 64) | self.1.hash_one(key) as u128
    }
}

impl CleanPlan {
    /// A data batch of a transaction that was aborted.
    fn is_aborted(&self, h: &BatchHeader) -> bool {
        h.is_transactional()
            && !h.is_control()
            && self.aborted.iter().any(|a| {
                a.producer_id == h.producer_id && a.first_offset <= h.base_offset && h.base_offset < a.last_offset
            })
    }

    /// Builds the offset map and writes the cleaned segments. Does not touch the live log.
    pub fn execute(self, now_ms: i64) -> io::Result<Cleaned> {
        let hasher = KeyHasher(RandomState::new(), RandomState::new());
        let mut map: HashMap<u128, i64> = HashMap::new();
        let mut cleaned_through = self.first_dirty;
        for seg in self.segments.iter().filter(|s| s.next_offset > self.first_dirty) {
            if map.len() >= MAP_ENTRIES_MAX {
                break;
            }
            for_each_batch(seg, |h, batch| {
                if h.is_control() || self.is_aborted(h) {
                    return Ok(());
                }
                for r in records_of(h, batch)?.iter() {
                    if let (Some(key), true) = (r.key, r.offset >= self.first_dirty) {
                        map.insert(hasher.digest(key), r.offset);
                    }
                }
                Ok(())
            })?;
            cleaned_through = seg.next_offset;
        }
        let mut stats = CleanStats::default();
        let mut groups = Vec::new();
        if cleaned_through == self.first_dirty {
            return Ok(Cleaned { groups, cleaned_through, stats });
        }
        let tombstone_horizon = now_ms.saturating_sub(self.delete_retention_ms);
        let keep = |offset: i64, key: Option<&[u8]>, tombstone: bool, batch_ts: i64| match key {
            None => false,
            Some(k) => {
                let latest = map.get(&hasher.digest(k)).is_none_or(|&last| offset >= last);
                latest && !(tombstone && batch_ts < tombstone_horizon)
            }
        };
        let todo: Vec<&SegmentSnapshot> = self.segments.iter().filter(|s| s.base_offset < cleaned_through).collect();
        // Producers whose transaction (since their last marker) has a batch kept so far.
        let mut with_data: HashMap<i64, bool> = HashMap::new();
        for run in group_segments(&todo, self.segment_bytes) {
            let base = run[0].base_offset;
            let end = run[run.len() - 1].next_offset;
            let path = self.dir.join(format!("{}.cleaned", file_name(base, "log")));
            let out = OpenOptions::new().write(true).create(true).truncate(true).open(&path)?;
            let mut written = 0u64;
            for seg in &run {
                stats.bytes_before += seg.size;
                for_each_batch(seg, |h, batch| {
                    let kept = if h.is_control() {
                        // Transactions only start after a producer's previous marker, and
                        // the pass reads from the log's first segment: `with_data` knows
                        // whether this marker's transaction kept a batch.
                        let has_data = with_data.remove(&h.producer_id).unwrap_or(false);
                        if !has_data && h.max_timestamp < tombstone_horizon {
                            stats.markers_removed += 1;
                            Filtered::Dropped
                        } else {
                            Filtered::All
                        }
                    } else {
                        let producer_last = h.has_producer_id()
                            && self.producer_last_offsets.get(&h.producer_id) == Some(&h.last_offset());
                        let aborted = self.is_aborted(h);
                        filter_batch(h, batch, producer_last, &mut stats, |o, k, t| {
                            !aborted && keep(o, k, t, h.max_timestamp)
                        })?
                    };
                    if h.is_transactional() && !h.is_control() && !matches!(kept, Filtered::Dropped) {
                        with_data.insert(h.producer_id, true);
                    }
                    let bytes: &[u8] = match &kept {
                        Filtered::All => batch,
                        Filtered::Rebuilt(b) => b,
                        Filtered::Dropped => return Ok(()),
                    };
                    out.write_all_at(bytes, written)?;
                    written += bytes.len() as u64;
                    Ok(())
                })?;
            }
            out.sync_all()?;
            stats.bytes_after += written;
            stats.segments_before += run.len();
            stats.segments_after += 1;
            groups.push(CleanedGroup { bases: run.iter().map(|s| s.base_offset).collect(), end, path });
        }
        Ok(Cleaned { groups, cleaned_through, stats })
    }
}

/// Consecutive segments merged while their total stays within `segment_bytes` (and the
/// offsets stay addressable by the u32 relative offsets of the index).
fn group_segments<'a>(segs: &[&'a SegmentSnapshot], segment_bytes: u64) -> Vec<Vec<&'a SegmentSnapshot>> {
    let mut runs: Vec<Vec<&SegmentSnapshot>> = Vec::new();
    let mut run_bytes = 0u64;
    for &s in segs {
        let fits = runs.last().is_some_and(|run: &Vec<&SegmentSnapshot>| {
            run_bytes + s.size <= segment_bytes && s.next_offset - run[0].base_offset < i32::MAX as i64
        });
        if fits {
            run_bytes += s.size;
            runs.last_mut().expect("checked above").push(s);
        } else {
            run_bytes = s.size;
            runs.push(vec![s]);
        }
    }
    runs
}

/// Calls `f` with every batch of a segment, in order.
fn for_each_batch(seg: &SegmentSnapshot, mut f: impl FnMut(&BatchHeader, &[u8]) -> io::Result<()>) -> io::Result<()> {
    let mut pos = 0u64;
    let mut head = [0u8; HEADER_BYTES];
    let mut buf = Vec::new();
    while pos + HEADER_BYTES as u64 <= seg.size {
        seg.file.read_exact_at(&mut head, pos)?;
        let h = BatchHeader::parse(&head).map_err(invalid)?;
        buf.resize(h.total_bytes(), 0);
        seg.file.read_exact_at(&mut buf, pos)?;
        f(&h, &buf)?;
        pos += h.total_bytes() as u64;
    }
    Ok(())
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Whether every record of a batch has a key: a compacted topic refuses keyless records.
pub fn all_records_keyed(h: &BatchHeader, batch: &[u8]) -> io::Result<bool> {
    if h.is_control() {
        return Ok(true);
    }
    Ok(records_of(h, batch)?.iter().all(|r| r.key.is_some()))
}

enum Filtered {
    All,
    Dropped,
    Rebuilt(Vec<u8>),
}

fn filter_batch(
    h: &BatchHeader,
    batch: &[u8],
    producer_last: bool,
    stats: &mut CleanStats,
    keep: impl Fn(i64, Option<&[u8]>, bool) -> bool,
) -> io::Result<Filtered> {
    let records = records_of(h, batch)?;
    let kept: Vec<RecordRef> = records.iter().filter(|r| keep(r.offset, r.key, r.value.is_none())).collect();
    let total = records.len();
    stats.records_removed += (total - kept.len()) as u64;
    if kept.len() == total {
        return Ok(Filtered::All);
    }
    if kept.is_empty() && !producer_last {
        return Ok(Filtered::Dropped);
    }
    // Same header (base offset, last offset delta, timestamps, producer fields), new
    // records section; an emptied batch is stored uncompressed, as Kafka does.
    let codec = if kept.is_empty() { 0 } else { h.compression() };
    let out = rebuild(h, batch, kept.iter().map(|r| r.raw), codec, None)?;
    Ok(Filtered::Rebuilt(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Log, LogConfig};
    use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};

    fn keyed(key: &str, value: &str) -> Vec<u8> {
        let mut b = BatchBuilder::new(1_000);
        b.push(1_000, Some(key.as_bytes()), Some(value.as_bytes()));
        b.finish(CODEC_NONE, ProducerFields::NONE).expect("encode")
    }

    /// Found by the `record_batch` fuzz target (docs/fuzzing.md): a record whose offset
    /// delta takes it past i64::MAX overflowed (a panic in a debug build; in a release build
    /// a wrapped offset in the cleaner's map). Its batch is unreadable now.
    #[test]
    fn a_record_offset_past_the_largest_is_an_error() {
        let mut b = BatchBuilder::new(1_000);
        b.push(1_000, Some(b"a"), Some(b"1"));
        b.push(1_000, Some(b"b"), Some(b"2"));
        let mut bytes = b.finish(CODEC_NONE, ProducerFields::NONE).expect("encode");
        runnel_wire::batch::stamp(&mut bytes, i64::MAX, 0);
        let h = BatchHeader::parse(&bytes).expect("header");
        let err = records_of(&h, &bytes).err().expect("refused");
        assert!(err.to_string().contains("record offset out of range"), "{err}");
        assert!(all_records_keyed(&h, &bytes).is_err());
    }

    /// Every record from the start, as (offset, raw record bytes); reads segment by segment.
    fn contents(log: &Log) -> Vec<(i64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut from = log.log_start_offset();
        while from < log.log_end_offset() {
            let bytes = log.read(from, 1 << 20, log.log_end_offset(), true).expect("plan").execute().expect("read");
            let mut at = 0;
            while at < bytes.len() {
                let h = BatchHeader::parse(&bytes[at..]).expect("header");
                for r in records_of(&h, &bytes[at..at + h.total_bytes()]).expect("records").iter() {
                    out.push((r.offset, r.raw.to_vec()));
                }
                at += h.total_bytes();
                from = h.next_offset();
            }
        }
        out
    }

    #[test]
    fn a_crash_after_the_commit_point_finishes_the_swap_on_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = LogConfig {
            segment_bytes: 300,
            compact: true,
            delete: false,
            min_cleanable_dirty_ratio: 0.0,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), cfg, 0).expect("open");
        for i in 0..40 {
            let b = keyed(&format!("k{}", i % 4), &format!("v{i}"));
            log.append(&b, &BatchHeader::validate_for_append(&b).expect("valid"), 0).expect("append");
        }
        // Bigger segments from now on, so the pass merges the small ones.
        let cfg = LogConfig { segment_bytes: 10_000, ..cfg };
        log.set_config(cfg);
        let plan = log.clean_plan(log.log_end_offset(), 0).expect("plan");
        let cleaned = plan.execute(0).expect("execute");
        // What a finished swap would give, from a copy of the directory.
        let copy = tempfile::tempdir().expect("tempdir");
        for e in fs::read_dir(dir.path()).expect("ls") {
            let e = e.expect("entry");
            fs::copy(e.path(), copy.path().join(e.file_name())).expect("copy");
        }
        // Crash right after the commit point of the first group: the file is renamed to
        // .swap, only the first old segment is deleted, the rest of the pass never ran.
        let g = &cleaned.groups[0];
        assert!(g.bases.len() > 1, "the first group merges segments");
        fs::rename(&g.path, dir.path().join(swap_name(g.bases[0], g.end))).expect("rename");
        segment::remove_files(dir.path(), g.bases[0]).expect("delete first");
        drop(log);
        let reopened = Log::open(dir.path(), cfg, 0).expect("reopen");
        let got = contents(&reopened);
        // The copy holds the old segments (its .cleaned leftovers are dropped on open).
        let mut whole = Log::open(copy.path(), cfg, 0).expect("open copy");
        let before = contents(&whole);
        let in_group = |o: i64| o >= g.bases[0] && o < g.end;
        assert!(got.iter().filter(|(o, _)| in_group(*o)).count() < before.iter().filter(|(o, _)| in_group(*o)).count());
        let after_group = |v: &[(i64, Vec<u8>)]| v.iter().filter(|(o, _)| *o >= g.end).cloned().collect::<Vec<_>>();
        assert_eq!(after_group(&got), after_group(&before), "segments after the group untouched");
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "no overlap, offsets ascend");
        whole.close().expect("close");
    }
}
