//! One segment: a `.log` file of whole batches plus its sparse offset and time indexes.
//!
//! The indexes live in memory and are mirrored to `.index` (relative offset u32,
//! position u32) and `.timeindex` (timestamp i64, relative offset u32) for tooling. They
//! are rebuilt from batch headers whenever a segment is opened, so the log alone is the
//! truth (an index can never point at data the log does not hold).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use runnel_wire::batch::{BatchHeader, HEADER_BYTES};
use runnel_wire::marker::{marker, Marker};

use crate::read::{find_batch, Placed};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub rel_offset: u32,
    pub position: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    /// Largest timestamp of any batch up to and including the batch ending at `offset`.
    pub timestamp: i64,
    pub offset: i64,
}

pub(crate) struct Segment {
    pub base_offset: i64,
    pub file: Arc<File>,
    path: PathBuf,
    pub size: u64,
    /// One past the last offset stored in this segment (== base_offset when empty).
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub created_ms: i64,
    /// Sparse offset and time indexes, in memory only: every open rebuilds them with the
    /// recovery scan (which reads every batch header anyway), so files would only cost a
    /// write per entry and two descriptors per segment.
    index: Vec<IndexEntry>,
    time_index: Vec<TimeEntry>,
    bytes_since_index: u64,
    index_interval_bytes: u64,
    /// The file's blocks are reserved up to here ([`Segment::reserve_for`]); past `size`,
    /// they are given back when the segment is sealed ([`Segment::trim`]).
    reserved: u64,
    /// Whether the filesystem takes reservations (`fallocate`); off after a refusal.
    reserving: bool,
    /// The segment's last batches (at most [`RECENT_BATCHES`]), in order and back to back,
    /// the last ending where the segment does: a fetch at the log's tail finds and locates
    /// its batches here without reading their headers from the file. Only the active
    /// segment keeps them ([`Segment::forget_recent`]).
    recent: VecDeque<Placed>,
}

/// How many of a segment's last batches it keeps placed (32 bytes each): a consumer that
/// keeps up at durable-512 reads from 8 to 32 batches behind the log end (with 8 kept, 4,700
/// header reads a second were left of 8,000; with 32, about 100).
const RECENT_BATCHES: usize = 32;

/// The most a segment reserves ahead of its end at a time: its size so far, between the
/// append at hand and this. A partition that writes little reserves little.
const RESERVE_MAX: u64 = 16 << 20;

/// Blocks past a file's size beyond this, found when it is opened, are a reservation that
/// was never given back (the filesystem's own extent blocks count too, but are far fewer).
const RESERVE_SLACK: u64 = 1 << 20;

pub(crate) fn file_name(base_offset: i64, ext: &str) -> String {
    format!("{base_offset:020}.{ext}")
}

/// What a scan of a segment found: where valid data ends and why.
pub(crate) struct ScanOutcome {
    pub valid_bytes: u64,
    pub torn: Option<String>,
}

impl Segment {
    pub fn create(dir: &Path, base_offset: i64, index_interval_bytes: u64, now_ms: i64) -> io::Result<Segment> {
        let path = dir.join(file_name(base_offset, "log"));
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        Segment::with_file(dir, base_offset, file, path, index_interval_bytes, now_ms)
    }

    /// Opens an existing segment; call [`Segment::scan`] before using it.
    pub fn open(dir: &Path, base_offset: i64, index_interval_bytes: u64, now_ms: i64) -> io::Result<Segment> {
        let path = dir.join(file_name(base_offset, "log"));
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let meta = file.metadata()?;
        // Blocks reserved past the end by a broker that stopped without sealing the segment
        // (killed, or the machine lost) are given back.
        if std::os::unix::fs::MetadataExt::blocks(&meta) * 512 > meta.len() + RESERVE_SLACK {
            file.set_len(meta.len())?;
        }
        let created = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(now_ms);
        Segment::with_file(dir, base_offset, file, path, index_interval_bytes, created)
    }

    fn with_file(
        dir: &Path,
        base_offset: i64,
        file: File,
        path: PathBuf,
        index_interval_bytes: u64,
        created_ms: i64,
    ) -> io::Result<Segment> {
        // Index files written by earlier versions are stale from here on.
        for ext in ["index", "timeindex"] {
            match std::fs::remove_file(dir.join(file_name(base_offset, ext))) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(Segment {
            base_offset,
            file: Arc::new(file),
            path,
            size: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            created_ms,
            index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            index_interval_bytes,
            reserved: 0,
            reserving: true,
            recent: VecDeque::new(),
        })
    }

    /// Reads every batch header from the start, rebuilding the indexes and handing each
    /// header to `visit`. From `validate_from` on (an offset), batches are fully validated
    /// (CRC included); the scan stops at the first batch that is torn or invalid and
    /// reports how many bytes are good. The caller truncates.
    pub fn scan(
        &mut self,
        validate_from: i64,
        mut visit: impl FnMut(&BatchHeader, Option<Marker>),
    ) -> io::Result<ScanOutcome> {
        let len = self.file.metadata()?.len();
        let mut pos = 0u64;
        let mut head = [0u8; HEADER_BYTES];
        let mut body = Vec::new();
        let torn = loop {
            if pos == len {
                break None;
            }
            if len - pos < HEADER_BYTES as u64 {
                break Some(format!("{} trailing bytes at position {pos}", len - pos));
            }
            self.file.read_exact_at(&mut head, pos)?;
            let h = match BatchHeader::parse(&head) {
                Ok(h) => h,
                Err(e) => break Some(format!("bad header at position {pos}: {e}")),
            };
            let total = h.total_bytes() as u64;
            if pos + total > len {
                break Some(format!("batch at position {pos} needs {total} bytes, {} remain", len - pos));
            }
            if h.base_offset < self.next_offset || h.last_offset_delta < 0 {
                break Some(format!("offset {} at position {pos} goes backwards", h.base_offset));
            }
            if h.base_offset.checked_add(h.last_offset_delta as i64 + 1).is_none() {
                break Some(format!("offsets of the batch at position {pos} run past the largest offset"));
            }
            let is_marker = h.is_control() && h.is_transactional();
            if h.last_offset() >= validate_from || is_marker {
                body.resize(total as usize, 0);
                self.file.read_exact_at(&mut body, pos)?;
            }
            if h.last_offset() >= validate_from {
                if let Err(e) = BatchHeader::validate(&body) {
                    break Some(format!("invalid batch at offset {} position {pos}: {e}", h.base_offset));
                }
            }
            self.note_appended(&h, pos, total);
            visit(&h, if is_marker { marker(&h, &body) } else { None });
            pos += total;
        };
        self.size = pos;
        Ok(ScanOutcome { valid_bytes: pos, torn })
    }

    pub fn truncate_to(&mut self, bytes: u64) -> io::Result<()> {
        // Blocks reserved past the new end go too.
        self.file.set_len(bytes)?;
        self.reserved = 0;
        self.file.sync_data()
    }

    /// Reserves the file's blocks ahead of `end` (`fallocate` keeping the file's size), so
    /// that appends write into blocks the filesystem has already placed: ext4 otherwise
    /// books every page of an append for delayed allocation as it copies it, a fifth of a
    /// single broker's CPU at 1.2M records/s (docs/bench.md). Advice only: a filesystem that
    /// refuses (one without `fallocate`, or a full one) is left to allocate as it writes.
    fn reserve_for(&mut self, end: u64) {
        if end <= self.reserved || !self.reserving {
            return;
        }
        use std::os::fd::AsRawFd;
        let from = self.reserved.max(self.size);
        let to = end + end.min(RESERVE_MAX);
        let (Ok(at), Ok(len)) = (libc::off_t::try_from(from), libc::off_t::try_from(to - from)) else {
            self.reserving = false;
            return;
        };
        // SAFETY: the descriptor is open (`self.file`); fallocate reads no memory.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, at, len) } == 0 {
            self.reserved = to;
        } else {
            self.reserving = false;
        }
    }

    /// Seals the segment for good or for a clean stop: gives back its reservation
    /// ([`Segment::trim`]) and syncs what it holds.
    pub fn seal(&mut self) -> io::Result<()> {
        self.forget_recent();
        self.trim()?;
        self.file.sync_data()
    }

    /// Gives back the blocks reserved past the segment's end: call it when the segment is
    /// sealed or closed. A file cut to its own size drops the blocks past it (ext4, XFS).
    pub fn trim(&mut self) -> io::Result<()> {
        if self.reserved > self.size {
            self.file.set_len(self.size)?;
        }
        self.reserved = 0;
        Ok(())
    }

    /// Appends one stamped batch at the end of the file.
    pub fn append(&mut self, batch: &[u8], h: &BatchHeader) -> io::Result<()> {
        self.append_split(&[], batch, h)
    }

    /// Appends a batch given as its first bytes and the rest (a header stamped apart from
    /// the batch it belongs to, which is then not copied).
    pub fn append_split(&mut self, head: &[u8], rest: &[u8], h: &BatchHeader) -> io::Result<()> {
        let pos = self.size;
        if let Err(e) = crate::fault::before_write() {
            // A full disk takes part of a write before it refuses the rest.
            let _ = self.file.write_all_at(head, pos);
            let _ = self.file.write_all_at(&rest[..rest.len() / 2], pos + head.len() as u64);
            return Err(e);
        }
        let len = (head.len() + rest.len()) as u64;
        self.reserve_for(pos + len);
        write_all_at2(&self.file, head, rest, pos)?;
        self.note_appended(h, pos, len);
        self.size += len;
        Ok(())
    }

    fn note_appended(&mut self, h: &BatchHeader, pos: u64, bytes: u64) {
        debug_assert!(h.base_offset >= self.next_offset, "offsets only grow");
        if self.index.is_empty() || self.bytes_since_index >= self.index_interval_bytes {
            self.index.push(IndexEntry { rel_offset: (h.base_offset - self.base_offset) as u32, position: pos as u32 });
            self.bytes_since_index = 0;
            if h.max_timestamp > self.max_timestamp || self.time_index.is_empty() {
                let timestamp = h.max_timestamp.max(self.max_timestamp);
                self.time_index.push(TimeEntry { timestamp, offset: h.last_offset() });
            }
        }
        self.bytes_since_index += bytes;
        if self.recent.len() == RECENT_BATCHES {
            self.recent.pop_front();
        }
        self.recent.push_back(Placed { pos, base_offset: h.base_offset, next_offset: h.next_offset(), bytes });
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
        }
        self.next_offset = h.next_offset();
    }

    /// Where to start looking for the batch holding `offset`: the position of the last
    /// index entry at or below it (batches lie back to back from there).
    pub(crate) fn index_position(&self, offset: i64) -> u64 {
        let rel = (offset - self.base_offset).max(0);
        let i = self.index.partition_point(|e| (e.rel_offset as i64) <= rel);
        if i == 0 {
            0
        } else {
            self.index[i - 1].position as u64
        }
    }

    /// Position of the batch holding `offset`, or of the first batch after it; None when
    /// the segment has nothing at or after `offset`.
    pub fn position_of(&self, offset: i64) -> io::Result<Option<(u64, BatchHeader)>> {
        let mut pos = self.index_position(offset);
        self.find_batch(&mut pos, |h| h.last_offset() >= offset)
    }

    /// The batch holding `offset` (or the first after it) when it is one of the segment's
    /// last batches; `None` when it is not known here ([`Segment::position_of`] finds it in
    /// the file).
    pub(crate) fn recent_batch(&self, offset: i64) -> Option<Placed> {
        // Known when the first batch kept is at or below `offset`, or is the segment's first.
        if self.recent.front().is_none_or(|p| p.base_offset > offset && p.pos > 0) {
            return None;
        }
        self.recent.iter().find(|p| p.next_offset > offset).copied()
    }

    /// Drops the last batches kept: for a segment no longer written, whose tail fetches
    /// rarely read.
    pub(crate) fn forget_recent(&mut self) {
        self.recent = VecDeque::new();
    }

    /// The segment's last batches, as far as it knows them, in order.
    pub(crate) fn recent(&self) -> impl Iterator<Item = Placed> + '_ {
        self.recent.iter().copied()
    }

    fn find_batch(
        &self,
        pos: &mut u64,
        pred: impl FnMut(&BatchHeader) -> bool,
    ) -> io::Result<Option<(u64, BatchHeader)>> {
        Ok(find_batch(&self.file, self.size, pos, pred)?.map(|h| (*pos, h)))
    }

    /// Hands the header of the batch holding `offset` (or of the first batch after it) and
    /// of every later batch in the segment to `visit`, in order, until it returns false.
    /// Returns true when `visit` stopped the walk.
    pub fn walk_from(&self, offset: i64, mut visit: impl FnMut(&BatchHeader) -> bool) -> io::Result<bool> {
        let Some((mut pos, _)) = self.position_of(offset)? else { return Ok(false) };
        Ok(self.find_batch(&mut pos, |h| !visit(h))?.is_some())
    }

    /// Hands every batch header, in order, to `visit` (the segment was scanned already),
    /// with what each transaction marker records.
    pub fn for_each_header(&self, mut visit: impl FnMut(&BatchHeader, Option<Marker>)) -> io::Result<()> {
        let mut head = [0u8; HEADER_BYTES];
        let mut body = Vec::new();
        let mut pos = 0u64;
        while pos + HEADER_BYTES as u64 <= self.size {
            self.file.read_exact_at(&mut head, pos)?;
            let h = BatchHeader::parse(&head).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut end = None;
            if h.is_control() && h.is_transactional() {
                body.resize(h.total_bytes(), 0);
                self.file.read_exact_at(&mut body, pos)?;
                end = marker(&h, &body);
            }
            visit(&h, end);
            pos += h.total_bytes() as u64;
        }
        Ok(())
    }

    /// Where the first batch whose max timestamp is at least `ts` lies or follows (a
    /// position to walk headers from), from the time index; `None` when no batch here
    /// reaches `ts`.
    pub(crate) fn timestamp_position(&self, ts: i64) -> Option<u64> {
        if self.max_timestamp < ts {
            return None;
        }
        // The time index keeps the largest timestamp up to each entry, so every batch up
        // to the entry below `ts` is below it too.
        let i = self.time_index.partition_point(|e| e.timestamp < ts);
        let start = if i == 0 { self.base_offset } else { self.time_index[i - 1].offset + 1 };
        Some(self.index_position(start))
    }

    pub fn delete(self) -> io::Result<()> {
        let dir = self.path.parent().map(Path::to_path_buf).unwrap_or_default();
        remove_files(&dir, self.base_offset)
    }
}

/// Deletes a segment's `.log` and (if an earlier version wrote them) its index files.
pub(crate) fn remove_files(dir: &Path, base_offset: i64) -> io::Result<()> {
    std::fs::remove_file(dir.join(file_name(base_offset, "log")))?;
    for ext in ["index", "timeindex"] {
        let _ = std::fs::remove_file(dir.join(file_name(base_offset, ext)));
    }
    Ok(())
}

/// Writes `head` then `rest` at `pos`, with one `pwritev` when the file takes it all (a
/// small batch's stamped header and body would otherwise cost two system calls).
fn write_all_at2(file: &File, mut head: &[u8], mut rest: &[u8], mut pos: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    while !head.is_empty() || !rest.is_empty() {
        let at = libc::off_t::try_from(pos).map_err(io::Error::other)?;
        let iov = [
            libc::iovec { iov_base: head.as_ptr() as *mut libc::c_void, iov_len: head.len() },
            libc::iovec { iov_base: rest.as_ptr() as *mut libc::c_void, iov_len: rest.len() },
        ];
        // SAFETY: both iovecs point at live slices of the lengths given; pwritev only reads
        // them.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), 2, at) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let n = n as usize;
        let from_head = n.min(head.len());
        head = &head[from_head..];
        rest = &rest[n - from_head..];
        pos += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use runnel_wire::batch::stamp;
    use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};

    use super::*;
    use crate::{Log, LogConfig};

    fn batch(base_offset: i64, records: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(1_000);
        for _ in 0..records {
            b.push(1_000, Some(b"k"), Some(b"v"));
        }
        let mut bytes = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
        stamp(&mut bytes, base_offset, 0);
        bytes
    }

    /// Appends `batches` batches of `records` records from `next` on; returns the offset after.
    fn append_batches(seg: &mut Segment, mut next: i64, batches: usize, records: usize) -> i64 {
        for _ in 0..batches {
            let b = batch(next, records);
            let h = BatchHeader::parse(&b).expect("header");
            seg.append(&b, &h).expect("append");
            next = h.next_offset();
        }
        next
    }

    fn allocated(file: &File) -> u64 {
        std::os::unix::fs::MetadataExt::blocks(&file.metadata().expect("metadata")) * 512
    }

    #[test]
    fn the_last_batches_are_placed_as_the_file_says_until_the_segment_is_sealed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut seg = Segment::create(dir.path(), 0, 4096, 0).expect("create");
        // 40 batches of 3 records: the first 8 are no longer kept.
        let end = append_batches(&mut seg, 0, 40, 3);
        assert_eq!(end, 120);
        assert_eq!(seg.recent_batch(23), None, "batch 7 is not kept");
        for offset in 24..end {
            let kept = seg.recent_batch(offset).expect("kept");
            let (pos, h) = seg.position_of(offset).expect("read").expect("found");
            assert_eq!((kept.pos, kept.base_offset, kept.next_offset), (pos, h.base_offset, h.next_offset()));
            assert_eq!(kept.bytes, h.total_bytes() as u64);
        }
        assert_eq!(seg.recent_batch(end), None, "past the end");
        assert_eq!(seg.recent().count(), RECENT_BATCHES);
        seg.seal().expect("seal");
        assert_eq!(seg.recent_batch(100), None, "a sealed segment keeps none");

        // Offsets below the first batch kept (a gap compaction left) find it when it is
        // the segment's first.
        let mut seg = Segment::create(dir.path(), 200, 4096, 0).expect("create");
        append_batches(&mut seg, 210, 3, 3);
        for offset in [150, 200, 209, 210, 212] {
            let kept = seg.recent_batch(offset).expect("kept");
            let (pos, h) = seg.position_of(offset).expect("read").expect("found");
            assert_eq!((kept.pos, kept.base_offset), (pos, h.base_offset), "{offset}");
            assert_eq!(kept.base_offset, 210);
        }
        assert_eq!(seg.recent_batch(213).map(|p| p.base_offset), Some(213));
    }

    #[test]
    fn appends_reserve_blocks_ahead_which_a_sealed_or_reopened_segment_gives_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut seg = Segment::create(dir.path(), 0, 4096, 0).expect("create");
        let next = append_batches(&mut seg, 0, 64, 100);
        let size = seg.size;
        assert_eq!(seg.file.metadata().expect("metadata").len(), size, "the file's size is what it holds");
        assert!(allocated(&seg.file) > size + size / 2, "{} allocated for {size}", allocated(&seg.file));
        seg.trim().expect("trim");
        assert!(allocated(&seg.file) <= size.next_multiple_of(4096), "{} allocated for {size}", allocated(&seg.file));

        // A broker killed before sealing leaves a reservation; the next open gives it back,
        // and the scan finds every batch.
        let next = append_batches(&mut seg, next, 8, 20_000);
        let size = seg.size;
        assert!(allocated(&seg.file) > size + RESERVE_SLACK);
        drop(seg);
        let mut seg = Segment::open(dir.path(), 0, 4096, 0).expect("open");
        assert!(allocated(&seg.file) <= size.next_multiple_of(4096));
        let outcome = seg.scan(0, |_, _| {}).expect("scan");
        assert_eq!((outcome.valid_bytes, outcome.torn, seg.next_offset), (size, None, next));
    }

    /// Found by the `storage_open` fuzz target (docs/fuzzing.md): a batch on disk whose
    /// offsets run past i64::MAX overflowed the scan's offset arithmetic (a panic in a debug
    /// build; in a release build the last offset wrapped negative and the batch skipped its
    /// CRC check). It is a torn tail now.
    #[test]
    fn a_batch_whose_offsets_overflow_is_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = batch(0, 2);
        let data = [good.clone(), batch(i64::MAX - 1, 3)].concat();
        std::fs::write(dir.path().join(file_name(0, "log")), &data).expect("write");
        let mut seg = Segment::open(dir.path(), 0, 4096, 0).expect("open");
        let outcome = seg.scan(0, |_, _| {}).expect("scan");
        assert_eq!(outcome.valid_bytes, good.len() as u64);
        assert!(outcome.torn.expect("torn").contains("largest offset"));
        assert_eq!(seg.next_offset, 2);
    }

    /// Found by the `storage_open` fuzz target: a segment file named with a negative base
    /// offset (which no log writes) made the index's relative offsets overflow. Such a file
    /// is not taken for a segment.
    #[test]
    fn a_segment_named_with_a_negative_offset_is_not_a_segment() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(file_name(i64::MIN, "log")), batch(0, 1)).expect("write");
        std::fs::write(dir.path().join(file_name(5, "log")), batch(5, 1)).expect("write");
        let log = Log::open(dir.path(), LogConfig::default(), 0).expect("open");
        assert_eq!((log.first_batch_offset(), log.log_end_offset(), log.segment_count()), (5, 6, 1));
    }
}
