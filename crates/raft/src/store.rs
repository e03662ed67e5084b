//! The Raft log of one replica, kept in the partition's Kafka log: Raft entry `i` is the
//! i-th batch from the log start, its term is the batch's `partitionLeaderEpoch`, and
//! its data is the batch itself (offsets already assigned by the leader). Raft's own
//! entries (the no-op a new leader appends, configuration changes) are written as control
//! batches, which take one offset each and which clients skip, as they skip transaction
//! markers.
//!
//! Next to the log, `raft.state` holds what Raft needs beyond the entries: term, vote and
//! commit, the voter configuration, and where the log starts in Raft's numbering (the
//! index, term and offset of the snapshot point). It is rewritten atomically when the term,
//! vote or configuration change, not on every commit (a lost commit index is re-learned
//! from the leader).

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};
use runnel_storage::{CleanStats, Cleaned, Log, LogConfig};
use runnel_wire::batch::Batches;
use runnel_wire::build::BatchBuilder;
use runnel_wire::BatchHeader;

use crate::offsets::EntryOffsets;
use crate::snapshot_data;

mod state;
mod warm;

use state::read_state;
#[cfg(test)]
use state::STATE_FILE;
pub use warm::{Warm, WARM_BYTES};

/// Control record types for Raft's own entries (Kafka uses 0 and 1 for transaction markers
/// and 2..6 in its own metadata log).
const CONTROL_NOOP: i16 = 100;
const CONTROL_CONF_CHANGE: i16 = 101;
const CONTROL_CONF_CHANGE_V2: i16 = 102;
/// DeleteRecords: every replica moves its log start to the offset in the value once the
/// entry commits. Unlike the others it is stored and handed to Raft as the batch itself.
const CONTROL_DELETE_RECORDS: i16 = 103;

/// The most a compacted log keeps below its snapshot point: a follower that needs it gets
/// it in one snapshot message (the transport's frames stop at 64 MiB).
const SNAPSHOT_PREFIX_BYTES_MAX: u64 = 32 << 20;

/// Bytes read from the log per chunk when raft-rs asks for entries.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// Bytes of entries [`RaftLog`] keeps from one append until they are applied, at most.
const RECENT_BYTES_MAX: usize = 4 << 20;

pub struct RaftLog {
    log: Log,
    dir: PathBuf,
    /// Where each entry from `first()` on starts in the log.
    offsets: EntryOffsets,
    /// Runs of equal terms, ascending: (first index of the run, term, its base offset).
    terms: Vec<(u64, u64, i64)>,
    /// Index and term of the entry just before the first stored one (0, 0 for a new log).
    snap_index: u64,
    snap_term: u64,
    /// Offset of the entry after the snapshot point: where the log starts for Raft.
    first_offset: i64,
    /// The Kafka log start as trimming last set it (None: never trimmed). Below
    /// `first_offset` a compacted log keeps its cleaned batches, so the two differ.
    log_start: Option<i64>,
    hard: HardState,
    /// The configuration after every applied change.
    conf: ConfState,
    /// The configuration at the snapshot point (what a snapshot carries), and the applied
    /// changes after it: (entry index, configuration from then on).
    snap_conf: ConfState,
    conf_history: Vec<(u64, ConfState)>,
    /// Entries up to this index are on disk and fsynced.
    synced_index: u64,
    /// A state written to [`STAGED_STATE_FILE`] and not yet renamed over the state file.
    staged: Option<(Arc<File>, u64)>,
    /// The hash of the state a staged close wrote beside the state file (None when it
    /// wrote none: the state file already said it).
    closing: Option<u64>,
    /// The hash ([`state::text_hash`]) of the state file's text as this store last read or
    /// wrote it, once durable: a close that would write the same text writes nothing.
    state_on_disk: Option<u64>,
    /// The hash of a staged state put in place whose directory is not yet known synced.
    state_put: Option<u64>,
    /// The last entries appended and not yet applied, as `append` was given them (a
    /// leader's batches unstamped, slices of the request they came in): Raft asks for them
    /// again as soon as they commit, to apply them, and to send them to a follower that
    /// was not sent them from memory. Reading them back from the log cost a pread and a
    /// copy of every byte produced, and on one broker a round of the driver's own per
    /// request. At most [`RECENT_BYTES_MAX`]; older ones are read from the log.
    recent: VecDeque<Entry>,
    recent_bytes: usize,
    /// Reads of entries for followers behind, under way off the driver (`warm.rs`).
    warming: std::cell::RefCell<warm::Warming>,
}

/// Starts a new run in `terms` when entry `index` (at `offset`) has a new term.
fn note_term(terms: &mut Vec<(u64, u64, i64)>, index: u64, term: u64, offset: i64) {
    if terms.last().map(|(_, t, _)| *t) != Some(term) {
        terms.push((index, term, offset));
    }
}

fn storage_err(e: io::Error) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e)))
}

impl RaftLog {
    /// Opens the replica's log in `dir`. A new log starts with `voters` as its
    /// configuration; an existing one keeps what it recorded.
    pub fn open(dir: &Path, config: LogConfig, voters: &[u64], now_ms: i64) -> io::Result<RaftLog> {
        RaftLog::open_with(dir, config, voters, now_ms, false)
    }

    /// [`RaftLog::open`]; with `tail_synced`, the caller has synced the log's filesystem
    /// since its files were last written (see [`crate::ReplicaConfig::tail_synced`]).
    pub fn open_with(
        dir: &Path,
        config: LogConfig,
        voters: &[u64],
        now_ms: i64,
        tail_synced: bool,
    ) -> io::Result<RaftLog> {
        fs::create_dir_all(dir)?;
        let saved = read_state(dir)?;
        // The entry map is built as the recovery scan reads the headers, not from a list of
        // them all (which would cost 16 bytes per batch of the log while the replica opens).
        // Entries start at the snapshot point's offset (in a new log, at its first batch).
        let from = saved.as_ref().map(|s| s.first_offset);
        let (snap_index, commit) = saved.as_ref().map(|s| (s.snap_index, s.hard.commit)).unwrap_or_default();
        let mut offsets = EntryOffsets::new(snap_index.saturating_add(1));
        let mut terms = Vec::new();
        let mut first_base = None;
        let log = Log::open_visiting(dir, config, now_ms, |h| {
            if from.is_some_and(|f| h.base_offset < f) {
                return;
            }
            first_base.get_or_insert(h.base_offset);
            let index = snap_index.saturating_add(1).saturating_add(offsets.len());
            // Everything on disk is about to count as fsynced, up to the recorded commit.
            offsets.push(h.base_offset, commit);
            note_term(&mut terms, index, h.partition_leader_epoch.max(0) as u64, h.base_offset);
        })?;
        let mut store = RaftLog {
            log,
            dir: dir.to_path_buf(),
            offsets,
            terms,
            snap_index: 0,
            snap_term: 0,
            first_offset: 0,
            log_start: None,
            hard: HardState::default(),
            conf: ConfState::default(),
            snap_conf: ConfState::default(),
            conf_history: Vec::new(),
            synced_index: 0,
            staged: None,
            closing: None,
            state_on_disk: saved.as_ref().map(|s| s.text_hash),
            state_put: None,
            recent: VecDeque::new(),
            recent_bytes: 0,
            warming: Default::default(),
        };
        match saved {
            Some(s) => {
                store.hard = s.hard;
                store.conf = s.conf;
                store.snap_conf = s.snap_conf;
                store.conf_history = s.conf_history;
                store.snap_index = s.snap_index;
                store.snap_term = s.snap_term;
                store.first_offset = s.first_offset;
                store.log_start = s.log_start;
            }
            None => {
                store.conf.voters = voters.to_vec();
                store.snap_conf = store.conf.clone();
                store.first_offset = store.log.first_batch_offset();
                // Staged, for the driver's first round of the group to sync and put in place
                // with every other group's (many created at once share a sync). Until then
                // nothing depends on it: a start that finds no state file writes this one.
                store.stage_state()?;
            }
        }
        if let Some(start) = store.log_start.filter(|s| *s > store.log.log_start_offset()) {
            // A trim recorded its new start but did not delete the segments below it.
            store.log.delete_records_before(start.min(store.log.log_end_offset()))?;
        }
        if let Some(base) = first_base {
            if base < store.log.first_batch_offset() {
                // Only a state file whose log start and Raft log start disagree gets here: an
                // entry past the snapshot point whose segment the recorded start deleted.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: the entry at offset {base} lies below the recorded log start", dir.display()),
                ));
            }
            if base != store.first_offset {
                return Err(io::Error::other(format!(
                    "{}: the first batch at {base} is not the Raft log start {}",
                    dir.display(),
                    store.first_offset
                )));
            }
        }
        store.hard.commit = store.hard.commit.min(store.last()).max(store.snap_index);
        // After a crash the log's unsynced tail may still be only in the page cache; this
        // replica is about to count every entry as persisted (and tell its leader so), so
        // make that true. After a clean shutdown nothing is dirty, and the sync (a device
        // flush per replica on some disks) is skipped, and so it is when the caller synced
        // the whole filesystem after the crash (one flush for every replica).
        if !tail_synced && !store.log.synced_to_end() {
            store.log.sync_handle().sync_data()?;
        }
        store.synced_index = store.last();
        Ok(store)
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    pub fn log_mut(&mut self) -> &mut Log {
        &mut self.log
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn first(&self) -> u64 {
        self.snap_index + 1
    }

    pub fn last(&self) -> u64 {
        self.snap_index + self.offsets.len()
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard
    }

    pub fn synced_index(&self) -> u64 {
        self.synced_index
    }

    pub fn mark_synced(&mut self, index: u64) {
        self.synced_index = self.synced_index.max(index.min(self.last()));
    }

    /// Entries up to here are committed and fsynced: only their offsets may leave memory.
    fn settled(&self) -> u64 {
        self.hard.commit.min(self.synced_index)
    }

    /// Offset one past entry `index` (the high watermark when `index` is committed). May
    /// read batch headers for an entry well before the settled point.
    pub fn end_offset_of(&self, index: u64) -> io::Result<i64> {
        if let Some(end) = self.end_offset_in_memory(index) {
            return Ok(end);
        }
        Ok(self.offsets.get(index + 1, &self.log)?.unwrap_or(self.log.log_end_offset()))
    }

    /// [`RaftLog::end_offset_of`] from memory, which always answers for an entry at or past
    /// the settled point (the high watermark as it moves): None for one further back.
    pub fn end_offset_in_memory(&self, index: u64) -> Option<i64> {
        if index <= self.snap_index {
            return Some(self.first_offset);
        }
        if index >= self.last() {
            return Some(self.log.log_end_offset());
        }
        self.offsets.recent(index + 1)
    }

    /// Base offset of entry `index` if it is stored.
    pub fn offset_of(&self, index: u64) -> io::Result<Option<i64>> {
        self.offsets.get(index, &self.log)
    }

    /// Index of the entry holding `offset`, if stored.
    pub fn index_of(&self, offset: i64) -> io::Result<Option<u64>> {
        if offset < self.first_offset || offset >= self.log.log_end_offset() {
            return Ok(None);
        }
        self.offsets.index_of(offset, &self.log)
    }

    fn term_at(&self, index: u64) -> Option<u64> {
        if index == self.snap_index {
            return Some(self.snap_term);
        }
        if index < self.first() || index > self.last() {
            return None;
        }
        let run = self.terms.partition_point(|(start, _, _)| *start <= index).checked_sub(1)?;
        Some(self.terms[run].1)
    }

    /// The last offset written in each term up to `epoch`, for OffsetForLeaderEpoch: the
    /// end offset of `epoch` is the start of the first later term (or the log end).
    pub fn end_offset_for_epoch(&self, epoch: u64) -> Option<(u64, i64)> {
        let run = self.terms.partition_point(|(_, t, _)| *t <= epoch);
        if run == 0 {
            return None;
        }
        let term = self.terms[run - 1].1;
        let end = match self.terms.get(run) {
            Some((_, _, offset)) => *offset,
            None => self.log.log_end_offset(),
        };
        Some((term, end))
    }

    /// Writes entries handed over by raft-rs (not fsynced: the caller syncs the log and
    /// then reports the ready persisted). Entries that conflict with stored ones replace
    /// them: the log is cut at the first of them.
    pub fn append(&mut self, entries: &[Entry], now_ms: i64) -> io::Result<()> {
        let Some(first) = entries.first() else { return Ok(()) };
        let at = first.index;
        assert!(at > self.snap_index, "entry {at} is inside the snapshot ({})", self.snap_index);
        if at <= self.last() {
            let offset = self.offset_of(at)?.ok_or_else(|| io::Error::other(format!("entry {at} is not stored")))?;
            self.log.truncate_from(offset, now_ms)?;
            self.offsets.truncate_from(at);
            while self.terms.last().is_some_and(|(start, _, _)| *start >= at) {
                self.terms.pop();
            }
            self.synced_index = self.synced_index.min(at - 1);
        }
        assert_eq!(at, self.last() + 1, "entries must follow the log");
        self.keep_recent(entries);
        for e in entries {
            let base = self.log.log_end_offset();
            let term = i32::try_from(e.term).map_err(|_| io::Error::other("term past i32"))?;
            // A batch's offsets are where the log ends and its leader epoch the entry's term,
            // stamped as it is written: a leader proposes a client's batch as it came, and
            // every replica, its log the same up to here, stamps the same.
            let control;
            let batch = if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
                &e.data[..]
            } else {
                control = control_batch(e);
                &control[..]
            };
            self.log.append_at_end(batch, term, now_ms)?;
            let settled = self.settled();
            self.offsets.push(base, settled);
            note_term(&mut self.terms, e.index, e.term, base);
        }
        Ok(())
    }

    pub fn set_commit(&mut self, commit: u64) {
        self.hard.commit = self.hard.commit.max(commit);
    }

    /// Keeps `entries` (appended at the end of the log) in `recent`, which then ends where
    /// the log does: what followed the first of them is gone from both.
    fn keep_recent(&mut self, entries: &[Entry]) {
        let at = entries.first().map_or(0, |e| e.index);
        while self.recent.back().is_some_and(|e| e.index >= at) {
            self.forget_recent(false);
        }
        if self.recent.back().is_some_and(|e| e.index + 1 != at) {
            self.recent.clear();
            self.recent_bytes = 0;
        }
        for e in entries {
            self.recent_bytes += e.data.len();
            self.recent.push_back(e.clone());
        }
        while self.recent_bytes > RECENT_BYTES_MAX {
            self.forget_recent(true);
        }
    }

    /// Drops the oldest (`front`) or the newest entry kept in `recent`.
    fn forget_recent(&mut self, front: bool) {
        let e = if front { self.recent.pop_front() } else { self.recent.pop_back() };
        self.recent_bytes -= e.map_or(0, |e| e.data.len());
        if self.recent.is_empty() {
            // An idle group keeps no buffer: with 50,000 groups on a broker, each byte a
            // group keeps counts.
            self.recent = VecDeque::new();
        }
    }

    /// Entries up to `index` were applied: `recent` keeps none of them.
    pub fn applied_to(&mut self, index: u64) {
        while self.recent.front().is_some_and(|e| e.index <= index) {
            self.forget_recent(true);
        }
    }

    /// Entries `low..high` from `recent`, if it holds them all, with `read_entries`' size
    /// rule: at least one, then up to `max_bytes`.
    fn recent_entries(&self, low: u64, high: u64, max_bytes: u64) -> Option<Vec<Entry>> {
        let first = self.recent.front()?.index;
        if low < first || high > self.recent.back()?.index + 1 || low >= high {
            return None;
        }
        let mut size = 0u64;
        let mut out = Vec::new();
        for e in self.recent.range((low - first) as usize..(high - first) as usize) {
            let len = e.data.len() as u64;
            if size > 0 && size + len > max_bytes {
                break;
            }
            size += len;
            out.push(e.clone());
        }
        Some(out)
    }

    /// Records the configuration that entry `index` (a configuration change) left.
    pub fn set_conf_state(&mut self, index: u64, conf: ConfState) -> io::Result<()> {
        self.conf_history.retain(|(i, _)| *i < index);
        self.conf_history.push((index, conf.clone()));
        self.conf = conf;
        self.write_state()
    }

    /// Installs a snapshot from the leader: everything stored is dropped and the log
    /// restarts from what the snapshot holds (the leader no longer has the entries before
    /// its snapshot point, only, for a compacted log, their cleaned batches).
    pub fn apply_snapshot(&mut self, snap: &Snapshot, now_ms: i64) -> io::Result<()> {
        let meta = snap.get_metadata();
        let (first_offset, log_start, producers, prefix) = snapshot_data::decode(&snap.data)?;
        tracing::info!(dir = %self.dir.display(), index = meta.index, log_start_offset = log_start,
            cleaned_bytes = prefix.len(), producer_bytes = producers.len(),
            "the leader no longer has the entries this replica lacks: restarting the log from its snapshot");
        self.log.restore(prefix, producers, log_start, first_offset, now_ms)?;
        self.offsets.reset(meta.index + 1);
        self.terms.clear();
        self.recent.clear();
        self.recent_bytes = 0;
        self.snap_index = meta.index;
        self.snap_term = meta.term;
        self.first_offset = first_offset;
        self.log_start = Some(self.log.log_start_offset());
        self.conf = meta.get_conf_state().clone();
        self.snap_conf = self.conf.clone();
        self.conf_history.clear();
        self.hard.commit = self.hard.commit.max(meta.index);
        self.hard.term = self.hard.term.max(meta.term);
        self.synced_index = meta.index;
        self.write_state()
    }

    /// Moves the log start forward to `log_start` (never back, never past the end of entry
    /// `applied`): the entries wholly below it become the snapshot point, and the segments
    /// wholly below it are deleted. The state file is rewritten first, so a crash in between
    /// leaves segments that the next open deletes. Returns the new log start if it moved.
    pub fn trim(&mut self, log_start: i64, applied: u64) -> io::Result<Option<i64>> {
        let applied = applied.min(self.last());
        let log_start = log_start.min(self.end_offset_of(applied)?);
        if log_start <= self.log.log_start_offset() {
            return Ok(None);
        }
        // The first entry kept: the one holding `log_start`, or the one after `applied`
        // (none moves when the start stays in a compacted log's cleaned part).
        let keep = match self.index_of(log_start)? {
            _ if log_start < self.first_offset => self.first(),
            Some(i) if i <= applied => i,
            _ => applied + 1,
        };
        self.log_start = Some(log_start);
        self.move_snapshot_point(keep)?;
        self.write_state()?;
        Ok(Some(self.log.delete_records_before(log_start)?))
    }

    /// Swaps in a compaction pass over committed entries. The cleaned part becomes the
    /// snapshot: entries in it no longer exist one by one (whole batches may be gone), so a
    /// follower that needs them gets the cleaned batches in a snapshot instead. The snapshot
    /// point is recorded before the swap, so a crash in between leaves the uncleaned files
    /// below it, which are as good. A pass that ends past `applied`, or whose cleaned part
    /// is too big for one snapshot message, is dropped.
    pub fn compact(&mut self, cleaned: Cleaned, applied: u64, now_ms: i64) -> io::Result<Option<CleanStats>> {
        let through = cleaned.cleaned_through();
        let applied = applied.min(self.last());
        let keep = if through == self.end_offset_of(applied)? {
            Some(applied + 1)
        } else {
            // The pass must end where an entry starts.
            match self.index_of(through)? {
                Some(i) if i <= applied && self.offset_of(i)? == Some(through) => Some(i),
                _ => None,
            }
        };
        let Some(keep) = keep.filter(|_| cleaned.stats.bytes_after <= SNAPSHOT_PREFIX_BYTES_MAX) else {
            if cleaned.stats.bytes_after > SNAPSHOT_PREFIX_BYTES_MAX {
                tracing::warn!(dir = %self.dir.display(), bytes = cleaned.stats.bytes_after,
                    "not compacting: the cleaned part would be too big to send a follower in one snapshot");
            }
            cleaned.discard()?;
            return Ok(None);
        };
        if keep > self.first() {
            self.move_snapshot_point(keep)?;
            self.write_state()?;
        }
        self.log.clean_swap(cleaned, now_ms).map(Some)
    }

    /// Makes entry `keep` the first one stored (when it is past the current first).
    fn move_snapshot_point(&mut self, keep: u64) -> io::Result<()> {
        if keep <= self.first() {
            return Ok(());
        }
        let snap_term = self.term_at(keep - 1).ok_or_else(|| io::Error::other("no term below the log start"))?;
        self.first_offset = self.end_offset_of(keep - 1)?;
        self.offsets.drop_before(keep, self.first_offset);
        let runs_before = self.terms.partition_point(|(start, _, _)| *start <= keep).saturating_sub(1);
        self.terms.drain(..runs_before);
        if let Some(run) = self.terms.first_mut().filter(|run| run.0 < keep) {
            run.0 = keep;
            run.2 = self.first_offset;
        }
        self.snap_index = keep - 1;
        self.snap_term = snap_term;
        let passed = self.conf_history.partition_point(|(i, _)| *i <= self.snap_index);
        if let Some((_, conf)) = self.conf_history.drain(..passed).next_back() {
            self.snap_conf = conf;
        }
        Ok(())
    }

    /// The batches kept below the snapshot point (a compacted log's cleaned part).
    fn snapshot_prefix(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut next = self.log.first_batch_offset();
        while next < self.first_offset {
            let chunk = self.log.read_range(next, self.first_offset, READ_CHUNK_BYTES)?;
            let mut moved = false;
            for item in Batches::new(&chunk) {
                let (h, range) = item.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if h.base_offset >= self.first_offset {
                    return Ok(out);
                }
                out.extend_from_slice(&chunk[range]);
                next = h.next_offset();
                moved = true;
            }
            if !moved {
                break;
            }
        }
        Ok(out)
    }

    /// Reads entries `[low, high)` back from the log, stopping after `max_bytes` (but
    /// always returning at least one).
    fn read_entries(&self, low: u64, high: u64, max_bytes: u64) -> io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        let mut size = 0u64;
        let mut index = low;
        let to = self.end_offset_of(high - 1)?;
        let mut from = self.offset_of(low)?.ok_or_else(|| io::Error::other(format!("entry {low} is not stored")))?;
        while index < high {
            let chunk = Bytes::from(self.log.read_range(from, to, READ_CHUNK_BYTES)?);
            if chunk.is_empty() {
                return Err(io::Error::other(format!("entry {index} at offset {from} is missing from the log")));
            }
            for item in Batches::new(&chunk) {
                let (h, range) = item.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if index >= high || (size > 0 && size + range.len() as u64 > max_bytes) {
                    return Ok(out);
                }
                // Entries are consecutive batches: each starts where the one before ended.
                if h.base_offset != from {
                    return Err(io::Error::other(format!(
                        "entry {index}: batch at {} where {from} was expected",
                        h.base_offset
                    )));
                }
                from = h.next_offset();
                size += range.len() as u64;
                out.push(entry_of(index, &h, chunk.slice(range))?);
                index += 1;
            }
        }
        Ok(out)
    }
}

impl raft::Storage for RaftLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState { hard_state: self.hard.clone(), conf_state: self.conf.clone() })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.snap_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max_size = max_size.into().unwrap_or(u64::MAX);
        if let Some(entries) = self.recent_entries(low, high, max_size) {
            return Ok(entries);
        }
        if self.must_wait(low, high, context) {
            return Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable));
        }
        self.read_entries(low, high, max_size).map_err(storage_err)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.snap_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_at(idx).ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snap_index < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        let prefix = self.snapshot_prefix().map_err(|e| {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the cleaned part for a snapshot");
            raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable)
        })?;
        let producers = self.log.producer_snapshot(self.first_offset);
        let data = snapshot_data::encode(self.first_offset, self.log.log_start_offset(), &producers, &prefix);
        let mut snap = Snapshot { data: data.into(), ..Default::default() };
        let meta = snap.mut_metadata();
        meta.index = self.snap_index;
        meta.term = self.snap_term;
        meta.set_conf_state(self.snap_conf.clone());
        Ok(snap)
    }
}

/// A control batch standing for one of Raft's own entries: key (version 0, type), value
/// the entry's data (a configuration change; empty for the no-op).
fn control_batch(e: &Entry) -> Vec<u8> {
    let kind = match e.get_entry_type() {
        EntryType::EntryNormal => CONTROL_NOOP,
        EntryType::EntryConfChange => CONTROL_CONF_CHANGE,
        EntryType::EntryConfChangeV2 => CONTROL_CONF_CHANGE_V2,
    };
    control_record(kind, &e.data)
}

fn control_record(kind: i16, value: &[u8]) -> Vec<u8> {
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    // No timestamp (-1): every replica writes the same bytes for the same entry.
    let mut b = BatchBuilder::new(-1);
    b.push(-1, Some(&key), Some(value));
    b.finish_control()
}

/// The control batch (offsets not yet stamped) that asks every replica to move its log
/// start to `offset`.
pub fn delete_records_batch(offset: i64) -> Vec<u8> {
    control_record(CONTROL_DELETE_RECORDS, &offset.to_be_bytes())
}

/// The log start a committed entry asks for, if it is a DeleteRecords entry.
pub fn delete_records_of(e: &Entry) -> Option<i64> {
    if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
        return None;
    }
    let h = BatchHeader::parse(&e.data).ok().filter(|h| h.is_control())?;
    let records = runnel_storage::records_of(&h, &e.data).ok()?;
    let record = records.iter().next()?;
    match (record.key, record.value) {
        (Some([0, 0, hi, lo]), Some(v)) if i16::from_be_bytes([*hi, *lo]) == CONTROL_DELETE_RECORDS => {
            Some(i64::from_be_bytes(v.try_into().ok()?))
        }
        _ => None,
    }
}

/// The Raft entry a stored batch stands for.
fn entry_of(index: u64, h: &BatchHeader, batch: Bytes) -> io::Result<Entry> {
    let mut e = Entry { index, term: h.partition_leader_epoch.max(0) as u64, ..Default::default() };
    if !h.is_control() {
        e.set_entry_type(EntryType::EntryNormal);
        e.data = batch;
        return Ok(e);
    }
    let bad = || {
        io::Error::new(io::ErrorKind::InvalidData, format!("control batch at {} is not a Raft entry", h.base_offset))
    };
    let records = runnel_storage::records_of(h, &batch)?;
    let record = records.iter().next().ok_or_else(bad)?;
    let kind = match record.key {
        Some([0, 0, hi, lo]) => i16::from_be_bytes([*hi, *lo]),
        _ => return Err(bad()),
    };
    if kind == CONTROL_DELETE_RECORDS || runnel_wire::marker::txn_end(h, &batch).is_some() {
        // Entries of the partition's own: DeleteRecords, and transaction markers.
        e.set_entry_type(EntryType::EntryNormal);
        e.data = batch;
        return Ok(e);
    }
    e.set_entry_type(match kind {
        CONTROL_NOOP => EntryType::EntryNormal,
        CONTROL_CONF_CHANGE => EntryType::EntryConfChange,
        CONTROL_CONF_CHANGE_V2 => EntryType::EntryConfChangeV2,
        _ => return Err(bad()),
    });
    e.data = Bytes::copy_from_slice(record.value.unwrap_or_default());
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;
    use runnel_wire::build::{ProducerFields, CODEC_NONE};

    /// Entries 1..=n, each a one-record batch of 200 bytes at the offsets the log assigns.
    fn fill(store: &mut RaftLog, n: u64, term: u64) {
        for _ in 0..n {
            let mut b = BatchBuilder::new(1_000);
            b.push(1_000, None, Some(&[7u8; 200]));
            let batch = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
            let e = Entry { index: store.last() + 1, term, data: batch.into(), ..Default::default() };
            store.append(&[e], 0).expect("append");
        }
    }

    /// The base offset in the header of each entry `low..high` returns: 0 for a batch kept
    /// as it was given (the builder's), its offset in the log for one read from the log.
    fn base_offsets(store: &RaftLog, low: u64, high: u64) -> Vec<i64> {
        let entries = store.entries(low, high, None, GetEntriesContext::empty(false)).expect("entries");
        entries.iter().map(|e| BatchHeader::parse(&e.data).expect("a batch").base_offset).collect()
    }

    #[test]
    fn entries_not_yet_applied_come_back_as_appended_and_follow_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = RaftLog::open(dir.path(), LogConfig::default(), &[1, 2, 3], 0).expect("open");
        fill(&mut store, 10, 1);
        assert_eq!(base_offsets(&store, 2, 11), vec![0; 9], "kept as appended");
        // A new leader replaces entries from 6 on: what was kept of them goes too.
        let mut b = BatchBuilder::new(1_000);
        b.push(1_000, None, Some(&[9u8; 300]));
        let batch = Bytes::from(b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch"));
        store.append(&[Entry { index: 6, term: 2, data: batch.clone(), ..Default::default() }], 0).expect("append");
        assert_eq!(store.last(), 6);
        let entries = store.entries(5, 7, None, GetEntriesContext::empty(false)).expect("entries");
        assert_eq!((entries[1].term, &entries[1].data), (2, &batch));
        // Applied entries are read from the log (stamped); a range reaching below what is
        // kept is read from the log whole.
        store.applied_to(3);
        assert_eq!(base_offsets(&store, 2, 4), vec![1, 2]);
        assert_eq!(base_offsets(&store, 3, 7), vec![2, 3, 4, 5]);
        assert_eq!(base_offsets(&store, 4, 7), vec![0, 0, 0]);
        // At most RECENT_BYTES_MAX are kept: the oldest go first.
        let big = |fill: u8| {
            let mut b = BatchBuilder::new(1_000);
            b.push(1_000, None, Some(&vec![fill; 1 << 20]));
            Bytes::from(b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch"))
        };
        for i in 0..6u64 {
            let e = Entry { index: 7 + i, term: 2, data: big(i as u8), ..Default::default() };
            store.append(&[e], 0).expect("append");
        }
        assert!(store.recent_bytes <= RECENT_BYTES_MAX);
        assert_eq!(base_offsets(&store, 12, 13), vec![0], "the newest is kept");
        assert_eq!(base_offsets(&store, 7, 8), vec![6], "the oldest was read from the log");
        // Applying everything leaves nothing kept.
        store.applied_to(12);
        assert!(store.recent.is_empty() && store.recent_bytes == 0);
    }

    #[test]
    fn entries_whose_pages_left_the_cache_are_read_in_off_the_caller_first() {
        // One segment, and segments of about 30 entries: the read runs on into the next.
        for segment_bytes in [LogConfig::default().segment_bytes, 8 << 10] {
            entries_read_in_off_the_caller(LogConfig { segment_bytes, ..LogConfig::default() });
        }
    }

    fn entries_read_in_off_the_caller(config: LogConfig) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = RaftLog::open(dir.path(), config, &[1, 2, 3], 0).expect("open");
        fill(&mut store, 400, 1);
        store.applied_to(400);
        let files = runnel_storage::fault::drop_segment_pages(dir.path()).expect("drop pages");
        let drop_pages = || {
            for f in &files {
                runnel_storage::fault::drop_pages(f).expect("drop pages");
            }
        };
        let cached = |f: &std::fs::File| runnel_storage::in_page_cache(f, 0, f.metadata().expect("metadata").len());
        match files.iter().map(cached).collect::<Option<Vec<bool>>>() {
            None => return, // a kernel that cannot tell (before 6.5): nothing to check
            Some(cached) => assert!(cached.iter().all(|c| !c), "dropped"),
        }
        // A caller that cannot wait reads at once.
        let want = base_offsets(&store, 100, 150);
        assert!(!store.wants_warms());
        drop_pages();
        let unavailable =
            |r: raft::Result<Vec<Entry>>| matches!(r, Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable)));
        // Raft sending appends can wait: it is asked to, once, whoever else asks meanwhile
        // (and as often).
        for _ in 0..10 {
            assert!(unavailable(store.entries(100, 150, None, GetEntriesContext::empty(true))));
        }
        let warms = store.take_warms();
        assert_eq!(warms.iter().map(|w| w.low).collect::<Vec<_>>(), vec![100]);
        assert!(store.take_warms().is_empty() && !store.wants_warms());
        for w in warms {
            w.plan.warm_up().expect("read in");
        }
        assert_eq!(store.warmed(100).len(), 8, "the first 8 callers are called back, the others ask again");
        // Read in, the pages are cached, those of the next segments up to the last entry
        // asked too: asked from further on (with small segments, from a mark two segments
        // on), the entries are read at once.
        assert!(store.entries(140, 150, None, GetEntriesContext::empty(true)).is_ok());
        assert!(store.take_warms().is_empty());
        let entries = store.entries(100, 150, None, GetEntriesContext::empty(true)).expect("entries");
        let got: Vec<i64> = entries.iter().map(|e| BatchHeader::parse(&e.data).expect("a batch").base_offset).collect();
        assert_eq!(got, want);
    }

    /// Found by the `raft_store_open` fuzz target (docs/fuzzing.md): a `raft.state` whose
    /// configuration raft-rs cannot rebuild (here `auto_leave` outside a joint
    /// configuration) made raft-rs panic when the replica started. It is an unreadable
    /// state file now; configurations raft-rs writes still read.
    #[test]
    fn a_state_file_with_a_configuration_raft_cannot_rebuild_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = "v1 3 2 0 0 0 0\n";
        for (conf, ok) in [
            ("voters 2 3 1\nauto_leave 1\n", false),
            ("voters 1 2\nlearners 2\n", false),
            ("voters 1 2 3\nauto_leave 0\n", true),
            ("voters 1 2\nvoters_outgoing 1 2 3\nlearners_next 3\nauto_leave 1\n", true),
        ] {
            std::fs::write(dir.path().join(STATE_FILE), format!("{head}{conf}")).expect("write");
            let opened = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0);
            assert_eq!(opened.is_ok(), ok, "{conf:?}: {:?}", opened.err());
            if ok {
                let cfg = crate::ReplicaConfig::new(2, vec![1, 2, 3]);
                crate::Replica::open(dir.path(), LogConfig::default(), &cfg, 0).expect("raft-rs starts");
            }
        }
    }

    /// Found by the `raft_store_open` fuzz target (docs/fuzzing.md): a `raft.state` whose
    /// log start lies past entries after its snapshot point. Opening deleted their segment
    /// (finishing what looks like an interrupted trim) yet listed them as entries, which a
    /// read then found missing; such a state is refused now. So is a snapshot index past the
    /// largest offset, which overflowed the index arithmetic.
    #[test]
    fn a_state_file_that_disagrees_with_the_log_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store =
            RaftLog::open(dir.path(), LogConfig { segment_bytes: 600, ..LogConfig::default() }, &[1], 0).expect("open");
        fill(&mut store, 6, 1);
        store.close().expect("close");
        drop(store);
        let state = std::fs::read_to_string(dir.path().join(STATE_FILE)).expect("state");
        let (head, rest) = state.split_once('\n').expect("head line");
        // The recorded log start past every entry, with the snapshot point still at 0.
        std::fs::write(dir.path().join(STATE_FILE), format!("{head} 5\n{rest}")).expect("write");
        let err = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).err().expect("refused");
        assert!(err.to_string().contains("below the recorded log start"), "{err}");
        let huge = format!("v1 1 1 1 {} 0 0\nvoters 1\n", u64::MAX);
        std::fs::write(dir.path().join(STATE_FILE), huge).expect("write");
        assert!(RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).is_err());
    }

    /// A new term is staged beside the state file and takes its place only when
    /// committed; a close in steps leaves what a one-step close leaves (the commit index in
    /// the state, the log a clean shutdown's checkpoint), and falls back to a full write
    /// when the state moved on after the stage.
    #[test]
    fn staged_terms_and_closes_reach_the_state_file_only_once_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).expect("open");
        let none_on_disk = || read_state(dir.path()).expect("read").is_none();
        assert!(store.staged_state().is_some() && none_on_disk(), "a new store's state is staged");
        fill(&mut store, 3, 1);
        store.set_hard_state(HardState { term: 4, vote: 1, commit: 0, ..Default::default() }).expect("stage");
        assert!(store.staged_state().is_some());
        assert!(none_on_disk(), "staged, not yet in place");
        let on_disk = || read_state(dir.path()).expect("read").expect("state").hard;
        assert_eq!(store.commit_staged_state().expect("commit"), Some(dir.path().to_path_buf()));
        assert_eq!((on_disk().term, on_disk().vote), (4, 1));
        assert_eq!(store.commit_staged_state().expect("nothing staged"), None);
        // A commit index changes no file until the close.
        store.set_commit(3);
        let files = store.close_stage().expect("close stage");
        assert_eq!(files.len(), 3, "the active segment, the checkpoint, the state");
        assert_eq!(on_disk().commit, 0);
        store.close_commit().expect("close commit");
        assert_eq!(on_disk().commit, 3);
        drop(store);
        let mut store = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).expect("reopen");
        assert!(store.log().synced_to_end(), "a clean shutdown's checkpoint covers the whole log");
        assert_eq!((store.hard_state().term, store.last()), (4, 3));
        // A term written in full after the stage wins over the staged close.
        let _ = store.close_stage().expect("close stage");
        store.set_conf_state(3, ConfState { voters: vec![1, 2], ..Default::default() }).expect("conf");
        store.set_hard_state(HardState { term: 5, vote: 2, commit: 3, ..Default::default() }).expect("stage");
        store.close_commit().expect("close commit");
        let saved = read_state(dir.path()).expect("read").expect("state");
        assert_eq!((saved.hard.term, saved.hard.vote, saved.conf.voters.clone()), (5, 2, vec![1, 2]));
        // A staged term never committed is not what the next open reads.
        store.set_hard_state(HardState { term: 6, vote: 1, commit: 3, ..Default::default() }).expect("stage");
        drop(store);
        let store = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).expect("reopen");
        assert_eq!(store.hard_state().term, 5);
    }

    /// An idle store closes without writing: neither the state nor the checkpoint is written
    /// again when the files in place already say what the close would; a new commit index
    /// or a term staged and not yet put in place is written.
    #[test]
    fn an_idle_store_closes_without_writing() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let inode = |name: &str| std::fs::metadata(dir.path().join(name)).map(|m| m.ino()).ok();
        let close = |store: &mut RaftLog| {
            let files = store.close_stage().expect("close stage");
            runnel_storage::sync_files(&files, false).expect("sync");
            (files.len(), store.close_commit().expect("close commit"))
        };
        let mut store = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).expect("open");
        fill(&mut store, 3, 1);
        store.set_hard_state(HardState { term: 1, vote: 1, commit: 0, ..Default::default() }).expect("stage");
        store.commit_staged_state().expect("commit");
        store.set_commit(3);
        assert_eq!(close(&mut store), (3, Some(dir.path().to_path_buf())));
        drop(store);
        let (state, checkpoint) = (inode(STATE_FILE), inode("checkpoint"));
        let mut store = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).expect("reopen");
        assert_eq!(close(&mut store), (0, None), "nothing changed since the open");
        assert_eq!((inode(STATE_FILE), inode("checkpoint")), (state, checkpoint));
        // A new term a round put in place is written again while its directory is not known
        // synced, and not once it is (the round calls commit_staged_state_now then).
        store.set_hard_state(HardState { term: 2, vote: 1, commit: 3, ..Default::default() }).expect("stage");
        store.commit_staged_state().expect("commit");
        assert_eq!(close(&mut store), (1, Some(dir.path().to_path_buf())));
        store.set_hard_state(HardState { term: 3, vote: 1, commit: 3, ..Default::default() }).expect("stage");
        store.commit_staged_state().expect("commit");
        store.commit_staged_state_now().expect("directory synced");
        let state = inode(STATE_FILE);
        assert_eq!(close(&mut store), (0, None));
        assert_eq!(inode(STATE_FILE), state);
        // A term staged and not yet put in place is written by the close.
        store.set_hard_state(HardState { term: 4, vote: 1, commit: 3, ..Default::default() }).expect("stage");
        assert_eq!(close(&mut store).0, 1, "the state");
        assert_eq!(read_state(dir.path()).expect("read").expect("state").hard.term, 4);
        // So is a new commit index, and an append with it.
        fill(&mut store, 1, 4);
        store.set_commit(4);
        assert_eq!(close(&mut store), (3, Some(dir.path().to_path_buf())));
        // A round that puts a new term in place between the close's steps: the close's
        // state is no longer the replica's, so the state is written whole.
        let _ = store.close_stage().expect("close stage");
        store.set_hard_state(HardState { term: 5, vote: 1, commit: 4, ..Default::default() }).expect("stage");
        store.commit_staged_state().expect("commit");
        assert_eq!(store.close_commit().expect("close commit"), None, "written whole, synced");
        drop(store);
        let store = RaftLog::open(dir.path(), LogConfig::default(), &[1], 0).expect("reopen");
        assert!(store.log().synced_to_end());
        assert_eq!((store.hard_state().term, store.hard_state().commit, store.last()), (5, 4, 4));
    }

    /// A new store's first state is staged, not synced: a crash before the driver's first
    /// round put it in place leaves no state file, and the next open starts the store anew
    /// from the voters it is given, staging its state again.
    #[test]
    fn a_new_store_whose_first_state_was_never_put_in_place_opens_anew() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RaftLog::open(dir.path(), LogConfig::default(), &[1, 2, 3], 0).expect("open");
        assert!(store.staged_state().is_some());
        drop(store);
        assert!(read_state(dir.path()).expect("read").is_none(), "nothing put in place");
        let mut store = RaftLog::open(dir.path(), LogConfig::default(), &[1, 2, 3], 0).expect("reopen");
        assert_eq!((store.hard_state().term, store.last(), store.conf_state().voters.clone()), (0, 0, vec![1, 2, 3]));
        assert_eq!(store.commit_staged_state().expect("commit"), Some(dir.path().to_path_buf()));
        let saved = read_state(dir.path()).expect("read").expect("in place");
        assert_eq!(saved.conf.voters, vec![1, 2, 3]);
    }

    /// Entries of one keyed record each, keys k0..k3 in turn.
    fn fill_keyed(store: &mut RaftLog, n: u64, term: u64) {
        for i in 0..n {
            let mut b = BatchBuilder::new(1_000);
            b.push(1_000, Some(format!("k{}", i % 4).as_bytes()), Some(&[i as u8; 100]));
            let batch = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
            let e = Entry { index: store.last() + 1, term, data: batch.into(), ..Default::default() };
            store.append(&[e], 0).expect("append");
        }
    }

    #[test]
    fn a_compacted_log_sends_its_cleaned_part_in_snapshots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig { segment_bytes: 1024, compact: true, delete: false, ..LogConfig::default() };
        let mut leader = RaftLog::open(&dir.path().join("a"), config, &[1, 2, 3], 0).expect("open");
        fill_keyed(&mut leader, 40, 1);
        let plan = leader.log().clean_plan(leader.end_offset_of(30).expect("read"), 0).expect("a pass is due");
        let cleaned = plan.execute(0).expect("execute");
        let through = cleaned.cleaned_through();
        let stats = leader.compact(cleaned, 30, 0).expect("compact").expect("swapped in");
        assert!(stats.records_removed > 0);
        assert_eq!(leader.first_offset, through, "the cleaned part is below the snapshot point");
        assert_eq!(leader.log().log_start_offset(), 0, "nothing is deleted from the Kafka log");
        let prefix = leader.snapshot_prefix().expect("prefix");
        let kept: Vec<i64> = Batches::new(&prefix).map(|b| b.expect("batch").0.base_offset).collect();
        assert_eq!(kept.len(), 4, "one record per key is left below {through}: {kept:?}");

        // A follower with nothing gets the cleaned batches, then the entries after them.
        let snap = leader.snapshot(0, 0).expect("snapshot");
        let mut follower = RaftLog::open(&dir.path().join("b"), config, &[1, 2, 3], 0).expect("open");
        follower.apply_snapshot(&snap, 0).expect("apply");
        assert_eq!((follower.first(), follower.log().log_end_offset()), (leader.first(), through));
        assert_eq!(follower.snapshot_prefix().expect("prefix"), prefix);
        let rest = leader.entries(leader.first(), leader.last() + 1, None, GetEntriesContext::empty(false));
        follower.append(&rest.expect("entries"), 0).expect("append");
        assert_eq!(follower.log().log_end_offset(), 40);
        follower.close().expect("close");
        let follower = RaftLog::open(&dir.path().join("b"), config, &[1, 2, 3], 0).expect("reopen");
        assert_eq!((follower.first(), follower.last()), (leader.first(), 40));
        assert_eq!(follower.snapshot_prefix().expect("prefix"), prefix);
    }

    #[test]
    fn a_snapshot_carries_the_configuration_at_its_point() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig { segment_bytes: 1024, ..LogConfig::default() };
        let mut store = RaftLog::open(dir.path(), config, &[1, 2], 0).expect("open");
        fill(&mut store, 10, 1);
        // Entry 6 (say) added learner 3; entry 8 made it a voter.
        let learner = ConfState { voters: vec![1, 2], learners: vec![3], ..Default::default() };
        let voter = ConfState { voters: vec![1, 2, 3], ..Default::default() };
        store.set_conf_state(6, learner.clone()).expect("conf");
        store.set_conf_state(8, voter.clone()).expect("conf");
        let conf_at = |s: &RaftLog| s.snapshot(0, 0).expect("snapshot").get_metadata().get_conf_state().clone();
        store.trim(4, 10).expect("trim");
        assert_eq!((store.snap_index, conf_at(&store).voters), (4, vec![1, 2]), "before both changes");
        store.trim(7, 10).expect("trim");
        assert_eq!((store.snap_index, conf_at(&store)), (7, learner), "after the first change only");
        store.close().expect("close");
        let mut store = RaftLog::open(dir.path(), config, &[1, 2], 0).expect("reopen");
        assert_eq!(store.conf_state(), &voter, "the current configuration survives a reopen");
        store.trim(9, 10).expect("trim");
        assert_eq!(conf_at(&store), voter, "the later change was kept across the reopen");
    }

    #[test]
    fn trimming_moves_the_snapshot_point_and_survives_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig { segment_bytes: 1024, ..LogConfig::default() };
        let mut store = RaftLog::open(dir.path(), config, &[1, 2, 3], 0).expect("open");
        fill(&mut store, 10, 1);
        fill(&mut store, 10, 2);
        assert_eq!((store.first(), store.last()), (1, 20));

        // Never past the applied entry: asking for offset 15 with entry 8 applied keeps 9 on.
        assert_eq!(store.trim(15, 8).expect("trim"), Some(8));
        assert_eq!((store.first(), store.snapshot(0, 0).expect("snap").get_metadata().index), (9, 8));
        assert!(matches!(
            store.entries(8, 10, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert_eq!(store.entries(9, 21, None, GetEntriesContext::empty(false)).expect("entries").len(), 12);
        assert_eq!(store.term(8).expect("term"), 1);
        assert_eq!(store.term(11).expect("term"), 2);
        let segments = store.log().segment_count();

        // Inside a term-2 entry: the log start is that offset, the entry stays.
        assert_eq!(store.trim(14, 20).expect("trim"), Some(14));
        assert_eq!((store.first(), store.log().log_start_offset()), (15, 14));
        assert!(store.log().segment_count() < segments, "segments below the start are deleted");
        assert_eq!(store.trim(10, 20).expect("trim"), None, "the start never moves back");
        store.close().expect("close");

        let store = RaftLog::open(dir.path(), config, &[1, 2, 3], 0).expect("reopen");
        assert_eq!((store.first(), store.last(), store.log().log_start_offset()), (15, 20, 14));
        assert_eq!(store.term(14).expect("snapshot term"), 2);
        let entries = store.entries(15, 21, None, GetEntriesContext::empty(false)).expect("entries");
        assert_eq!(entries.iter().map(|e| e.index).collect::<Vec<_>>(), (15..=20).collect::<Vec<_>>());
        assert_eq!(store.end_offset_of(20).expect("read"), 20);
    }

    /// A long, settled log keeps only some entries' offsets in memory; every lookup, read,
    /// truncation and trim still finds the right batches, and the high watermark's lookup
    /// never needs the disk.
    #[test]
    fn a_long_settled_log_is_read_right_from_a_sparse_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig { segment_bytes: 64 << 10, ..LogConfig::default() };
        let mut store = RaftLog::open(dir.path(), config, &[1, 2, 3], 0).expect("open");
        fill(&mut store, 700, 1);
        store.set_hard_state(HardState { term: 2, vote: 1, commit: 700, ..Default::default() }).expect("hard state");
        store.mark_synced(700);
        fill(&mut store, 700, 2);
        assert_eq!(store.last(), 1400);
        assert!(store.end_offset_in_memory(100).is_none(), "an early settled entry left memory");
        assert_eq!(store.end_offset_in_memory(700), Some(700), "unsettled entries stay in memory");
        for index in [1, 2, 63, 64, 65, 500, 699, 700, 701, 1400] {
            let offset = index as i64 - 1;
            assert_eq!(store.offset_of(index).expect("offset_of"), Some(offset));
            assert_eq!(store.index_of(offset).expect("index_of"), Some(index));
            assert_eq!(store.end_offset_of(index).expect("end_offset_of"), offset + 1);
        }
        assert_eq!(store.end_offset_for_epoch(1), Some((1, 700)));
        let entries = store.entries(90, 1300, None, GetEntriesContext::empty(false)).expect("entries");
        assert_eq!(entries.iter().map(|e| e.index).collect::<Vec<_>>(), (90..1300).collect::<Vec<_>>());
        assert_eq!(entries[0].term, 1);
        assert_eq!(entries[700].term, 2);

        // A new leader replaces entries from 1000 on.
        let mut b = BatchBuilder::new(1_000);
        b.push(1_000, None, Some(&[8u8; 200]));
        let batch = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
        store
            .append(&[Entry { index: 1000, term: 3, data: batch.clone().into(), ..Default::default() }], 0)
            .expect("append");
        assert_eq!((store.last(), store.offset_of(1000).expect("offset_of")), (1000, Some(999)));
        assert_eq!(store.term(1000).expect("term"), 3);
        // The entry was proposed as the client sent it; the store stamped it as it wrote it.
        // Until it is applied Raft gets it back from memory as it was given, then from the log.
        let kept = store.entries(1000, 1001, None, GetEntriesContext::empty(false)).expect("entries");
        assert_eq!(kept[0].data, Bytes::from(batch.clone()), "kept as given");
        store.applied_to(1000);
        let written = store.entries(1000, 1001, None, GetEntriesContext::empty(false)).expect("entries");
        let h = BatchHeader::validate(&written[0].data).expect("a valid batch");
        assert_eq!((h.base_offset, h.partition_leader_epoch), (999, 3));
        assert_eq!(written[0].data[61..], batch[61..], "the rest of the batch as given");

        assert_eq!(store.trim(300, 700).expect("trim"), Some(300));
        assert_eq!(store.first(), 301);
        assert_eq!(store.offset_of(301).expect("offset_of"), Some(300));
        assert_eq!(store.offset_of(300).expect("offset_of"), None);
        store.close().expect("close");

        let store = RaftLog::open(dir.path(), config, &[1, 2, 3], 0).expect("reopen");
        assert_eq!((store.first(), store.last()), (301, 1000));
        let entries = store.entries(301, 1001, None, GetEntriesContext::empty(false)).expect("entries");
        assert_eq!(entries.len(), 700);
        assert_eq!(store.index_of(640).expect("index_of"), Some(641));
    }
}
