//! Reading a log for a fetch: a plan made under the partition lock, carried out without it,
//! either into memory or as a slice of a segment file that the connection sends straight
//! from the page cache (`sendfile`).

use std::fs::File;
use std::io;
use std::sync::Arc;

use runnel_wire::batch::{BatchHeader, Batches, HEADER_BYTES};

/// What to read for a fetch, decided under the partition lock and carried out without it
/// (the `Arc<File>` keeps a segment readable even if retention deletes it meanwhile).
#[derive(Debug)]
pub struct ReadPlan {
    file: Option<Arc<File>>,
    pos: u64,
    len: usize,
    /// Exclusive upper offset: batches at or past it (not yet committed) are cut off.
    upper: i64,
    /// Batches from `pos` on that the segment knew when the plan was made, in order: a
    /// fetch at the log's tail locates them without reading their headers.
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

impl ReadPlan {
    pub(crate) fn new(file: Arc<File>, pos: u64, len: usize, upper: i64, known: Vec<Placed>) -> ReadPlan {
        ReadPlan { file: Some(file), pos, len, upper, known }
    }

    pub(crate) fn empty(upper: i64) -> ReadPlan {
        ReadPlan { file: None, pos: 0, len: 0, upper, known: Vec::new() }
    }

    /// The plan without the batches it knows: [`ReadPlan::locate`] then reads every header
    /// from the file (to check that both ways agree).
    pub fn forget_known(mut self) -> ReadPlan {
        self.known.clear();
        self
    }

    pub fn is_empty(&self) -> bool {
        self.file.is_none() || self.len == 0
    }

    /// The bytes the plan spans: what it reads at most.
    pub fn len(&self) -> usize {
        self.len
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
