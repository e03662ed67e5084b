//! Where each Raft entry starts in the partition's Kafka log, in bounded memory.
//!
//! A replica's log holds an entry per produced batch for as long as retention keeps it
//! (a week by default): one offset per entry in memory would grow with the log, 8 bytes a
//! batch, however idle the partition later becomes. Kafka keeps a sparse index for the same
//! reason. Here the offsets of the most recent entries are kept one by one, and those of
//! every [`STRIDE`]-th entry before them; any other entry is found by walking at most
//! `STRIDE - 1` batch headers on disk from the mark before it.
//!
//! The recent part always covers every entry past the settled point (committed and
//! fsynced), so the high watermark, computed on every commit, never touches the disk; a
//! lookup further back (a follower catching up, a retried produce's original entry, log
//! trimming) may read headers.

use std::collections::VecDeque;
use std::io;

use runnel_storage::Log;

/// Every entry whose index is a multiple of this has a mark.
pub const STRIDE: u64 = 64;
/// Settled entries kept one by one at the end of the log.
pub const RECENT: usize = 256;

#[derive(Debug, Default)]
pub struct EntryOffsets {
    /// Index of the first entry (meaningful while there are entries).
    first: u64,
    len: u64,
    /// (index, base offset) of the first entry and of every entry whose index is a
    /// multiple of [`STRIDE`], ascending.
    marks: VecDeque<(u64, i64)>,
    /// Base offsets of the last `recent.len()` entries.
    recent: VecDeque<i64>,
}

impl EntryOffsets {
    /// An empty index whose first entry will be `first`.
    pub fn new(first: u64) -> EntryOffsets {
        EntryOffsets { first, ..EntryOffsets::default() }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of the first entry in `recent`.
    fn recent_first(&self) -> u64 {
        self.first + self.len - self.recent.len() as u64
    }

    /// Appends the next entry, which starts at `offset`. Entries up to `settled` (committed
    /// and fsynced) may leave the recent part.
    pub fn push(&mut self, offset: i64, settled: u64) {
        let index = self.first + self.len;
        if self.marks.is_empty() || index.is_multiple_of(STRIDE) {
            self.marks.push_back((index, offset));
        }
        self.recent.push_back(offset);
        self.len += 1;
        while self.recent.len() > RECENT && self.recent_first() <= settled {
            self.recent.pop_front();
        }
    }

    /// Keeps entries below `index` only.
    pub fn truncate_from(&mut self, index: u64) {
        if index >= self.first + self.len {
            return;
        }
        let keep = index.saturating_sub(self.first);
        while self.marks.back().is_some_and(|(i, _)| *i >= index) {
            self.marks.pop_back();
        }
        let drop = self.len - keep;
        self.recent.truncate(self.recent.len().saturating_sub(drop as usize));
        self.len = keep;
    }

    /// Drops every entry, the next one pushed being `first`.
    pub fn reset(&mut self, first: u64) {
        *self = EntryOffsets::new(first);
    }

    /// Drops the entries below `keep`; entry `keep`, if stored, starts at `offset`.
    pub fn drop_before(&mut self, keep: u64, offset: i64) {
        if keep <= self.first {
            return;
        }
        if keep >= self.first + self.len {
            self.reset(keep);
            return;
        }
        while self.marks.front().is_some_and(|(i, _)| *i < keep) {
            self.marks.pop_front();
        }
        if self.marks.front().map(|(i, _)| *i) != Some(keep) {
            self.marks.push_front((keep, offset));
        }
        let recent_first = self.recent_first();
        if keep > recent_first {
            self.recent.drain(..(keep - recent_first) as usize);
        }
        self.len -= keep - self.first;
        self.first = keep;
    }

    /// Base offset of entry `index`, from memory, when it is in the recent part.
    pub fn recent(&self, index: u64) -> Option<i64> {
        let i = index.checked_sub(self.recent_first())?;
        self.recent.get(usize::try_from(i).ok()?).copied()
    }

    /// Base offset of entry `index`, or of an entry at most [`STRIDE`] - 1 before it, from
    /// memory; None when not stored.
    pub fn at_or_before(&self, index: u64) -> Option<i64> {
        if index < self.first || index >= self.first + self.len {
            return None;
        }
        if let Some(offset) = self.recent(index) {
            return Some(offset);
        }
        let m = self.marks.partition_point(|(i, _)| *i <= index).checked_sub(1)?;
        Some(self.marks[m].1)
    }

    /// Base offset of entry `index`, if stored.
    pub fn get(&self, index: u64, log: &Log) -> io::Result<Option<i64>> {
        if index < self.first || index >= self.first + self.len {
            return Ok(None);
        }
        if let Some(offset) = self.recent(index) {
            return Ok(Some(offset));
        }
        let m = self.marks.partition_point(|(i, _)| *i <= index) - 1;
        let (mark, from) = self.marks[m];
        let mut found = None;
        self.walk(log, mark, from, |i, h| {
            if i == index {
                found = Some(h.base_offset);
            }
            i < index
        })?;
        found.map(Some).ok_or_else(|| missing(index, from))
    }

    /// Index of the entry whose batch holds `offset` (the caller checked that the offset is
    /// inside the stored entries).
    pub fn index_of(&self, offset: i64, log: &Log) -> io::Result<Option<u64>> {
        if self.recent.front().is_some_and(|o| *o <= offset) {
            let i = self.recent.partition_point(|o| *o <= offset) - 1;
            return Ok(Some(self.recent_first() + i as u64));
        }
        let Some(m) = self.marks.partition_point(|(_, o)| *o <= offset).checked_sub(1) else { return Ok(None) };
        let (mark, from) = self.marks[m];
        let mut found = None;
        self.walk(log, mark, from, |i, h| {
            if h.next_offset() > offset {
                found = Some(i);
            }
            found.is_none()
        })?;
        Ok(found)
    }

    /// Walks the entries from `mark` (which starts at `from`) on, at most to the last one,
    /// while `visit` returns true.
    fn walk(
        &self,
        log: &Log,
        mark: u64,
        from: i64,
        mut visit: impl FnMut(u64, &runnel_wire::BatchHeader) -> bool,
    ) -> io::Result<()> {
        let end = self.first + self.len;
        let mut index = mark;
        let mut bad = None;
        log.walk_batches(from, |h| {
            if index == mark && h.base_offset != from {
                bad = Some(h.base_offset);
                return false;
            }
            let go = visit(index, h) && index + 1 < end;
            index += 1;
            go
        })?;
        match bad {
            Some(at) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("entry {mark}: batch at {at} where {from} was expected"),
            )),
            None => Ok(()),
        }
    }
}

fn missing(index: u64, from: i64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("entry {index} is missing from the log after offset {from}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use runnel_storage::LogConfig;
    use runnel_wire::build::{BatchBuilder, ProducerFields};
    use runnel_wire::BatchHeader;

    /// A log of `n` batches of 1 to 3 records, with the offsets of each.
    fn log_of(dir: &std::path::Path, n: usize) -> (Log, Vec<i64>) {
        let config = LogConfig { segment_bytes: 16 << 10, ..LogConfig::default() };
        let mut log = Log::open(dir, config, 0).expect("open");
        let mut offsets = Vec::new();
        for i in 0..n {
            let mut b = BatchBuilder::new(0);
            for _ in 0..1 + i % 3 {
                b.push(0, None, Some(&[7u8; 40][..]));
            }
            let batch = b.finish(0, ProducerFields::NONE).expect("batch");
            let h = BatchHeader::parse(&batch).expect("header");
            offsets.push(log.log_end_offset());
            log.append(&batch, &h, 0).expect("append");
        }
        (log, offsets)
    }

    fn check(idx: &EntryOffsets, log: &Log, offsets: &[i64], first: u64) {
        for (k, o) in offsets.iter().enumerate() {
            let index = first + k as u64;
            assert_eq!(idx.get(index, log).expect("get"), Some(*o), "entry {index}");
            assert_eq!(idx.index_of(*o, log).expect("index_of"), Some(index), "offset {o}");
            assert_eq!(idx.index_of(*o + 1, log).expect("index_of").map(|i| i >= index), Some(true));
        }
        assert_eq!(idx.get(first + offsets.len() as u64, log).expect("get"), None);
    }

    #[test]
    fn settled_entries_leave_memory_and_are_found_on_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, offsets) = log_of(dir.path(), 2000);
        let mut idx = EntryOffsets::new(1);
        for (k, o) in offsets.iter().enumerate() {
            // Settled lags the end by 10 entries.
            idx.push(*o, (k as u64 + 1).saturating_sub(10));
        }
        assert_eq!(idx.recent.len(), RECENT);
        assert!(idx.marks.len() <= 2000 / STRIDE as usize + 1);
        check(&idx, &log, &offsets, 1);

        // Nothing settled: every entry stays in memory.
        let mut unsettled = EntryOffsets::new(1);
        offsets.iter().for_each(|o| unsettled.push(*o, 0));
        assert_eq!(unsettled.recent.len(), offsets.len());
    }

    #[test]
    fn truncating_and_dropping_keep_lookups_right() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, offsets) = log_of(dir.path(), 1500);
        let mut idx = EntryOffsets::new(1);
        offsets.iter().for_each(|o| idx.push(*o, u64::MAX));
        idx.truncate_from(1201);
        assert_eq!(idx.len(), 1200);
        check(&idx, &log, &offsets[..1200], 1);
        // Cut inside the marks' stride, behind the recent part.
        idx.truncate_from(700);
        assert_eq!(idx.len(), 699);
        check(&idx, &log, &offsets[..699], 1);
        offsets[699..900].iter().for_each(|o| idx.push(*o, u64::MAX));
        check(&idx, &log, &offsets[..900], 1);

        idx.drop_before(333, offsets[332]);
        check(&idx, &log, &offsets[332..900], 333);
        assert_eq!(idx.get(332, &log).expect("get"), None);
        idx.drop_before(890, offsets[889]);
        check(&idx, &log, &offsets[889..900], 890);
        idx.drop_before(901, -1);
        assert!(idx.is_empty());
        idx.push(offsets[900], u64::MAX);
        check(&idx, &log, &offsets[900..901], 901);
    }
}
