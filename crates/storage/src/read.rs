//! Reading a log for a fetch: a plan made under the partition lock, carried out without it,
//! either into memory or as a slice of a segment file that the connection sends straight
//! from the page cache (`sendfile`).

use std::fs::File;
use std::io;
use std::sync::Arc;

use runnel_wire::batch::{BatchHeader, Batches, HEADER_BYTES};

/// What to read for a fetch, decided under the partition lock without reading the file, and
/// carried out without the lock (the `Arc<File>` keeps a segment readable even if retention
/// deletes it meanwhile). A fetch at the log's tail knows its first batch from memory; any
/// other finds it by reading batch headers from an index entry on, once the lock is released
/// ([`ReadPlan::find`]).
#[derive(Debug)]
pub struct ReadPlan {
    want: Want,
    at: At,
}

/// What a read asks for: at most `max_bytes` (with `min_one`, the first batch whole even
/// past them, as Kafka does, so that a consumer always progresses), of batches below
/// `upper` (exclusive: those at or past it are not yet committed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    pub(crate) max_bytes: usize,
    pub(crate) min_one: bool,
    pub(crate) upper: i64,
}

#[derive(Debug)]
enum At {
    Nothing,
    /// The first batch is known: the span is decided.
    Known(Span),
    Seek(Seek),
}

/// The batch holding `offset`, or the first after it, lies in `file` between `from` (an
/// index entry's position) and `end` (the segment's size when the plan was made).
#[derive(Debug)]
struct Seek {
    file: Arc<File>,
    from: u64,
    end: u64,
    offset: i64,
}

/// Whole batches to read from a segment file: from `pos` (a batch's start), at most `len`
/// bytes, those below `upper`.
#[derive(Debug)]
pub struct Span {
    file: Option<Arc<File>>,
    pos: u64,
    len: usize,
    upper: i64,
    /// Batches from `pos` on that the segment knew when the plan was made, in order: a
    /// fetch at the tail locates them without reading their headers.
    known: Vec<Placed>,
}

/// Where a batch lies in its segment file, and the offsets it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) pos: u64,
    pub(crate) base_offset: i64,
    /// The offset after the batch's last.
    pub(crate) next_offset: i64,
    /// The batch's length in bytes.
    pub(crate) bytes: u64,
}

/// Whole batches of a segment file: what a fetch sends without reading them into memory.
/// The log never rewrites the bytes of a committed batch in place (compaction writes new
/// files), so the slice holds what was planned; a file found shorter when it is sent is an
/// error, and the connection closes (as Kafka does).
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub file: Arc<File>,
    pub pos: u64,
    pub len: usize,
    /// The offset after the slice's last batch.
    pub next_offset: i64,
}

impl FileSlice {
    /// The slice's bytes, read into memory.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        read_exact_at_into(&self.file, &mut buf, self.len, self.pos)?;
        Ok(buf)
    }
}

/// The first batch a read sends: where it lies, its length and its first offset.
pub(crate) struct First {
    pub(crate) pos: u64,
    pub(crate) bytes: u64,
    pub(crate) base_offset: i64,
}

impl ReadPlan {
    pub(crate) fn nothing(want: Want) -> ReadPlan {
        ReadPlan { want, at: At::Nothing }
    }

    /// A read whose first batch the segment (`end` bytes long) knows; `known` are the
    /// segment's batches it knows from there on.
    pub(crate) fn known(
        file: Arc<File>,
        end: u64,
        first: First,
        want: Want,
        known: impl Iterator<Item = Placed>,
    ) -> ReadPlan {
        ReadPlan { want, at: At::Known(Span::sized(file, end, first, want, known)) }
    }

    /// A read that finds its first batch, the one holding `offset` or the first after it,
    /// by walking the headers of `file` from `from` up to `end`.
    pub(crate) fn seek(file: Arc<File>, from: u64, end: u64, offset: i64, want: Want) -> ReadPlan {
        ReadPlan { want, at: At::Seek(Seek { file, from, end, offset }) }
    }

    /// The plan without the batches it knows: [`Span::locate`] then reads every header from
    /// the file (to check that both ways agree).
    pub fn forget_known(mut self) -> ReadPlan {
        if let At::Known(span) = &mut self.at {
            span.known.clear();
        }
        self
    }

    /// Whether the plan reads the file to find its first batch (a fetch behind the tail).
    pub fn seeks(&self) -> bool {
        matches!(self.at, At::Seek(_))
    }

    /// Whether carrying the plan out might wait for the disk: some page it reads is not in
    /// the page cache ([`crate::in_page_cache`]; never where the kernel cannot tell). A plan
    /// that finds its first batch in the file is judged by the bytes from its index entry
    /// on, as many as it asks for and 1 MiB more (an index entry lies at most
    /// `index.interval.bytes` and a batch before the batch it finds).
    pub fn may_wait(&self) -> bool {
        let (file, pos, len) = match &self.at {
            At::Nothing => return false,
            At::Known(span) => return span.cached() == Some(false),
            At::Seek(seek) => {
                let most = (self.want.max_bytes as u64).saturating_add(1 << 20);
                (&seek.file, seek.from, most.min(seek.end.saturating_sub(seek.from)))
            }
        };
        crate::tail::in_page_cache(file, pos, len) == Some(false)
    }

    /// Where in its segment the plan starts reading, if anywhere.
    pub(crate) fn start(&self) -> Option<u64> {
        match &self.at {
            At::Nothing => None,
            At::Known(span) => span.file.as_ref().map(|_| span.pos),
            At::Seek(seek) => Some(seek.from),
        }
    }

    /// The span to read: the first batch found in the file when the plan did not know it.
    pub fn find(self) -> io::Result<Span> {
        let seek = match self.at {
            At::Nothing => return Ok(Span::empty(self.want.upper)),
            At::Known(span) => return Ok(span),
            At::Seek(seek) => seek,
        };
        let mut pos = seek.from;
        let found = find_batch(&seek.file, seek.end, &mut pos, |h| h.last_offset() >= seek.offset)?;
        Ok(match found {
            Some(h) => {
                let first = First { pos, bytes: h.total_bytes() as u64, base_offset: h.base_offset };
                Span::sized(seek.file, seek.end, first, self.want, std::iter::empty())
            }
            None => Span::empty(self.want.upper),
        })
    }

    /// Reads the span found into the page cache (the bytes are not kept): for a caller that
    /// will read it where it must not wait for the disk.
    pub fn warm_up(self) -> io::Result<()> {
        self.find()?.warm_up()
    }

    /// [`Span::execute`] of the span found.
    pub fn execute(self) -> io::Result<Vec<u8>> {
        self.find()?.execute()
    }

    /// [`Span::locate`] of the span found.
    pub fn locate(self) -> io::Result<Option<FileSlice>> {
        self.find()?.locate()
    }
}

/// Reads that bring a range of the log into the page cache, one per segment it reaches
/// ([`crate::Log::plan_warm`]): planned under the partition's lock, carried out off it.
pub struct WarmPlan {
    pub(crate) plans: Vec<ReadPlan>,
}

impl WarmPlan {
    /// Whether any of the reads might wait for the disk ([`ReadPlan::may_wait`]).
    pub fn may_wait(&self) -> bool {
        self.plans.iter().any(ReadPlan::may_wait)
    }

    /// Reads every segment's part into the page cache, in order (the bytes are not kept).
    pub fn warm_up(self) -> io::Result<()> {
        self.plans.into_iter().try_for_each(ReadPlan::warm_up)
    }

    /// The segments it reads.
    pub fn segments(&self) -> usize {
        self.plans.len()
    }
}

impl Span {
    /// The span from `first` on in a file `end` bytes long, as `want` sizes it.
    fn sized(file: Arc<File>, end: u64, first: First, want: Want, known: impl Iterator<Item = Placed>) -> Span {
        let upper = want.upper;
        if first.base_offset >= upper {
            return Span::empty(upper);
        }
        let most = if want.min_one { want.max_bytes.max(first.bytes as usize) } else { want.max_bytes };
        let len = most.min(end.saturating_sub(first.pos) as usize);
        let within = |k: &Placed| k.pos >= first.pos && k.pos < first.pos + len as u64;
        let known = known.filter(within).collect();
        Span { file: Some(file), pos: first.pos, len, upper, known }
    }

    fn empty(upper: i64) -> Span {
        Span { file: None, pos: 0, len: 0, upper, known: Vec::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.file.is_none() || self.len == 0
    }

    /// The bytes the span covers: what it reads at most.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Reads the span into the page cache, [`WARM_PIECE`] bytes at a time into one buffer
    /// (the bytes are not kept).
    pub fn warm_up(&self) -> io::Result<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let mut buf = vec![0u8; WARM_PIECE.min(self.len)];
        let mut at = 0;
        while at < self.len {
            let n = (self.len - at).min(buf.len());
            std::os::unix::fs::FileExt::read_exact_at(&**file, &mut buf[..n], self.pos + at as u64)?;
            at += n;
        }
        Ok(())
    }

    /// Whether all the span's pages are in the page cache ([`crate::in_page_cache`]): reading
    /// it, or sending it with `sendfile`, does not wait for the disk. `None` where the
    /// kernel cannot tell.
    pub fn cached(&self) -> Option<bool> {
        match &self.file {
            Some(file) => crate::tail::in_page_cache(file, self.pos, self.len as u64),
            None => Some(true),
        }
    }

    /// Reads whole batches below `upper`. A batch cut by the byte limit is dropped unless
    /// it is the first (the plan already sized itself to hold the first one when asked).
    pub fn execute(self) -> io::Result<Vec<u8>> {
        let Some(file) = self.file else { return Ok(Vec::new()) };
        let mut buf = Vec::new();
        read_exact_at_into(&file, &mut buf, self.len, self.pos)?;
        let mut keep = 0;
        for item in Batches::new(&buf) {
            match item {
                Ok((h, range)) if h.base_offset < self.upper => keep = range.end,
                _ => break,
            }
        }
        buf.truncate(keep);
        Ok(buf)
    }

    /// The batches [`ReadPlan::execute`] would return, located by reading their headers
    /// only. `None` when there are none.
    pub fn locate(self) -> io::Result<Option<FileSlice>> {
        let Some(file) = self.file else { return Ok(None) };
        let mut headers = Headers::new(&file, self.pos + self.len as u64);
        let mut known = self.known.iter().peekable();
        let (mut at, mut next_offset) = (0usize, None);
        loop {
            let pos = self.pos + at as u64;
            while known.next_if(|k| k.pos < pos).is_some() {}
            let batch = match known.next_if(|k| k.pos == pos) {
                Some(k) => *k,
                None => match headers.at(pos)?.map(BatchHeader::parse) {
                    Some(Ok(h)) => Placed {
                        pos,
                        base_offset: h.base_offset,
                        next_offset: h.next_offset(),
                        bytes: h.total_bytes() as u64,
                    },
                    _ => break,
                },
            };
            if batch.base_offset >= self.upper || batch.bytes > (self.len - at) as u64 {
                break;
            }
            at += batch.bytes as usize;
            next_offset = Some(batch.next_offset);
        }
        Ok(next_offset.map(|next_offset| FileSlice { file, pos: self.pos, len: at, next_offset }))
    }
}

/// The first batch of a segment whose largest timestamp is at least `ts` (ListOffsets by
/// time), planned under the partition lock from the time index and found and read without
/// it.
#[derive(Debug)]
pub struct TimestampRead {
    file: Arc<File>,
    from: u64,
    end: u64,
    ts: i64,
}

impl TimestampRead {
    pub(crate) fn new(file: Arc<File>, from: u64, end: u64, ts: i64) -> TimestampRead {
        TimestampRead { file, from, end, ts }
    }

    /// The batch's bytes, whole; `None` when the segment holds none that reaches `ts`.
    pub fn execute(self) -> io::Result<Option<Vec<u8>>> {
        let mut pos = self.from;
        let Some(h) = find_batch(&self.file, self.end, &mut pos, |h| h.max_timestamp >= self.ts)? else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        read_exact_at_into(&self.file, &mut buf, h.total_bytes(), pos)?;
        Ok(Some(buf))
    }
}

/// What [`Span::warm_up`] reads at a time.
const WARM_PIECE: usize = 256 << 10;

/// Headers are found by reading this much at a time: one read covers the headers of many
/// small batches, and costs little beside a large one.
const HEADER_WINDOW: usize = 4096;

/// Reads the batch headers of a file below `end` a window of [`HEADER_WINDOW`] bytes at a
/// time, for walks that look at headers only (locating a fetch's batches, finding the batch
/// that holds an offset): a small batch's header read on its own cost a `pread` per batch.
pub(crate) struct Headers<'a> {
    file: &'a File,
    end: u64,
    window: [u8; HEADER_WINDOW],
    /// The file bytes the window holds: [at, at + held).
    at: u64,
    held: usize,
}

impl<'a> Headers<'a> {
    pub(crate) fn new(file: &'a File, end: u64) -> Headers<'a> {
        Headers { file, end, window: [0; HEADER_WINDOW], at: 0, held: 0 }
    }

    /// The bytes from `pos` on (at least a header's worth, from the window), or `None` when
    /// fewer than [`HEADER_BYTES`] remain before the end.
    pub(crate) fn at(&mut self, pos: u64) -> io::Result<Option<&[u8]>> {
        if pos.saturating_add(HEADER_BYTES as u64) > self.end {
            return Ok(None);
        }
        if pos < self.at || pos + HEADER_BYTES as u64 > self.at + self.held as u64 {
            let want = (self.end - pos).min(HEADER_WINDOW as u64) as usize;
            std::os::unix::fs::FileExt::read_exact_at(self.file, &mut self.window[..want], pos)?;
            (self.at, self.held) = (pos, want);
        }
        let from = (pos - self.at) as usize;
        Ok(Some(&self.window[from..self.held]))
    }
}

/// Walks the batch headers of `file` from `pos` (a batch's start) up to `end` until `pred`
/// holds, reading them a window at a time ([`Headers`]): between two index entries lie up
/// to `index.interval.bytes` of batches. `pos` is left at the batch returned.
pub(crate) fn find_batch(
    file: &File,
    end: u64,
    pos: &mut u64,
    mut pred: impl FnMut(&BatchHeader) -> bool,
) -> io::Result<Option<BatchHeader>> {
    let mut headers = Headers::new(file, end);
    while let Some(bytes) = headers.at(*pos)? {
        let h = BatchHeader::parse(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if pred(&h) {
            return Ok(Some(h));
        }
        *pos += h.total_bytes() as u64;
    }
    Ok(None)
}

/// Reads `len` bytes at `pos` of `file` into `buf`'s spare room, without zeroing it first:
/// a fetch's read is the broker's largest buffer, and zeroing it was a pass over every byte
/// served (with the request frames, 5-8% of a single broker's CPU in
/// `runnel bench --profile-pid`).
fn read_exact_at_into(file: &File, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    buf.reserve(len);
    let (start, end) = (buf.len(), buf.len() + len);
    while buf.len() < end {
        let at = libc::off_t::try_from(pos + (buf.len() - start) as u64).map_err(io::Error::other)?;
        let left = end - buf.len();
        let spare = buf.spare_capacity_mut();
        let want = left.min(spare.len());
        // SAFETY: pread writes at most `want` bytes into the spare room, which holds that
        // many; it returns how many it wrote, and only those are taken into the length.
        let n = unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), want, at) };
        match n {
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            // SAFETY: the first `n` bytes of the spare room were just written.
            n => unsafe { buf.set_len(buf.len() + n as usize) },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_into_spare_room_returns_exactly_the_bytes_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let file = File::open(&path).expect("open");
        let mut buf = b"kept".to_vec();
        read_exact_at_into(&file, &mut buf, 70_000, 1234).expect("read");
        assert_eq!(&buf[..4], b"kept");
        assert_eq!(&buf[4..], &data[1234..71_234]);
        let mut past = Vec::new();
        let e = read_exact_at_into(&file, &mut past, 10, 99_995).expect_err("past the end");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
