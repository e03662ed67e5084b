//! The page-cache tail: how much of the log a broker has most recently written and synced
//! stays in the OS page cache. Older synced pages are dropped (`posix_fadvise(DONTNEED)`)
//! instead of being left for the kernel to reclaim, so the broker's cache holds the tail
//! that consumers and followers read, and its footprint stays bounded.
//!
//! Why (docs/bench.md): on a virtual machine that hands free memory back to its host, every
//! page the cache takes that it did not hold before costs a fault in the host, and writing
//! several GB of new page cache costs about 8x the CPU per byte; pages dropped here are
//! reused at once. A reader of older data reads the disk, as it would once the kernel had
//! reclaimed those pages under memory pressure.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{OnceLock, Weak};

/// The page size the tail counts in: a range only covers pages wholly inside it.
pub const PAGE: u64 = 4096;

/// The largest folio the page cache uses for a file (a PMD: 2 MiB on x86-64 and arm64
/// with 4 KiB pages).
pub const FOLIO_MAX: u64 = 2 << 20;

/// At most this many ranges are held, whatever their size: logs written a few bytes at a
/// time give one range per page written at most, and this caps what that costs.
pub const RANGES_MAX: usize = 1 << 16;

/// Bytes `[from, to)` of one segment file, written and then synced (or to be synced by the
/// round that took them). Holds the file weakly: a deleted segment's pages are gone anyway.
#[derive(Debug, Clone)]
pub struct Written {
    pub(crate) file: Weak<File>,
    pub(crate) from: u64,
    pub(crate) to: u64,
    /// `to` is the end of a segment that rolled: nothing will be written after it.
    pub(crate) sealed: bool,
}

impl Written {
    pub fn len(&self) -> u64 {
        self.to.saturating_sub(self.from)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes `[from, to)` of the file.
    pub fn range(&self) -> (u64, u64) {
        (self.from, self.to)
    }

    /// Asks the kernel to drop these bytes' pages from the page cache. Advice only: a page
    /// still dirty is not dropped, and a failure changes nothing that is stored, so it is
    /// ignored.
    ///
    /// The kernel drops only a folio wholly inside the range, and a file's folios can be up
    /// to [`FOLIO_MAX`], aligned to their size. So the range goes from its start rounded
    /// down to a `FOLIO_MAX` boundary (the rest of what the file's last eviction stopped
    /// short of) to its end rounded down likewise, unless the segment is sealed. A folio
    /// across that end would hold bytes written since the round that took the range, still
    /// dirty, and would stay cached for good; it goes with the file's next eviction instead,
    /// once it is wholly synced. Every folio this drops was synced by then.
    pub fn evict(&self) {
        let Some((from, to)) = self.folios() else { return };
        let Some(file) = self.file.upgrade() else { return };
        let (Ok(from), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else { return };
        // SAFETY: posix_fadvise only reads the descriptor, which `file` keeps open.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), from, len, libc::POSIX_FADV_DONTNEED) };
    }

    /// The bytes [`Written::evict`] asks to drop, if any (an empty range must not reach the
    /// kernel: a length of 0 means "to the end of the file").
    fn folios(&self) -> Option<(u64, u64)> {
        let from = self.from / FOLIO_MAX * FOLIO_MAX;
        let to = if self.sealed { self.to } else { self.to / FOLIO_MAX * FOLIO_MAX };
        (to > from).then_some((from, to))
    }

    /// `self` then `next`, as one range, if `next` goes on where `self` ends in the same file.
    fn extend(&mut self, next: &Written) -> bool {
        let joins = self.to == next.from && Weak::ptr_eq(&self.file, &next.file);
        if joins {
            self.to = next.to;
            self.sealed = next.sealed;
        }
        joins
    }
}

/// Ranges written, oldest first, up to a byte budget: what falls out is to be evicted once
/// the round that pushed it has synced. Owned by whoever collects rounds (the Raft driver).
#[derive(Debug)]
pub struct CacheTail {
    budget: u64,
    ranges: VecDeque<Written>,
    bytes: u64,
}

impl CacheTail {
    /// `budget` bytes stay cached; 0 keeps nothing here and leaves the page cache to the
    /// kernel, as Kafka does.
    pub fn new(budget: u64) -> CacheTail {
        CacheTail { budget, ranges: VecDeque::new(), bytes: 0 }
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    #[cfg(test)]
    fn cached_bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds a range just written; moves the oldest ranges beyond the budget to `evict`.
    pub fn push(&mut self, w: Written, evict: &mut Vec<Written>) {
        if !self.enabled() || w.is_empty() {
            return;
        }
        self.bytes += w.len();
        if !self.ranges.back_mut().is_some_and(|last| last.extend(&w)) {
            self.ranges.push_back(w);
        }
        while self.bytes > self.budget || self.ranges.len() > RANGES_MAX {
            // Whole pages over the budget; a range over the count goes whole.
            let over = if self.ranges.len() > RANGES_MAX {
                u64::MAX
            } else {
                (self.bytes - self.budget).next_multiple_of(PAGE)
            };
            let Some(oldest) = self.ranges.front_mut() else { break };
            let out = if oldest.len() > over {
                // Contiguous writes merge into one range: only its oldest part goes.
                let cut =
                    Written { file: oldest.file.clone(), from: oldest.from, to: oldest.from + over, sealed: false };
                oldest.from = cut.to;
                cut
            } else {
                self.ranges.pop_front().expect("a front range")
            };
            self.bytes -= out.len();
            if !evict.last_mut().is_some_and(|last| last.extend(&out)) {
                evict.push(out);
            }
        }
    }
}

/// Batches of ranges handed to the evictor and not yet dropped, at most: past that, the
/// caller drops its own.
pub const EVICTIONS_QUEUED_MAX: usize = 64;

/// The nice value the evictor runs at. Dropping a burst's pages (freeing their folios and
/// ext4's buffer heads) took 0.4-1.7 ms of CPU on the sync thread, just as the burst's
/// acknowledgements were due, and on a broker with one core it held them back by as much
/// (docs/bench.md, "Rounds of a few MB"). At nice 10 a woken runtime thread goes first,
/// and the evictor still gets about a tenth of a busy core.
pub const EVICTOR_NICE: libc::c_int = 10;

/// Hands `evict` (ranges synced already) to the process's evictor, a thread that drops
/// them at a lower priority ([`EVICTOR_NICE`]) off the path of any acknowledgement. Gives
/// them back when they cannot be queued (the queue is full, or no thread could be
/// started): the caller then drops them itself, on a thread that may block.
pub fn evict_later(evict: Vec<Written>) -> Result<(), Vec<Written>> {
    if evict.is_empty() {
        return Ok(());
    }
    static EVICTOR: OnceLock<Option<SyncSender<Vec<Written>>>> = OnceLock::new();
    let Some(tx) = EVICTOR.get_or_init(start_evictor) else { return Err(evict) };
    match tx.try_send(evict) {
        Ok(()) => Ok(()),
        Err(TrySendError::Full(evict) | TrySendError::Disconnected(evict)) => Err(evict),
    }
}

fn start_evictor() -> Option<SyncSender<Vec<Written>>> {
    let (tx, rx) = sync_channel::<Vec<Written>>(EVICTIONS_QUEUED_MAX);
    let started = std::thread::Builder::new().name("runnel-evict".into()).spawn(move || {
        // SAFETY: setpriority(PRIO_PROCESS, 0) changes the calling thread's nice value only
        // (Linux keeps it per thread). Raising it needs no privilege; a failure leaves the
        // thread where it was.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, EVICTOR_NICE) };
        while let Ok(evict) = rx.recv() {
            evict.iter().for_each(Written::evict);
        }
    });
    started.ok().map(|_| tx)
}

/// `cachestat(2)` (Linux 6.5): system call numbers from 424 on are the same on every
/// architecture, and the libc crate names this one for a few targets only.
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Whether every page of bytes `[pos, pos + len)` of `file` is in the page cache, so that
/// reading them, or sending them with `sendfile`, does not wait for the disk; `None` where
/// the kernel cannot tell (before Linux 6.5, or a filter refuses the call: then it is not
/// asked again). One system call, which walks the page cache's entries for the range and
/// reads no data.
pub fn in_page_cache(file: &File, pos: u64, len: u64) -> Option<bool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static UNKNOWN: AtomicBool = AtomicBool::new(false);
    if len == 0 {
        return Some(true);
    }
    if UNKNOWN.load(Ordering::Relaxed) {
        return None;
    }
    let range = CachestatRange { off: pos, len };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes one `struct cachestat` into `stat`, both
    // laid out as the kernel's (five and two u64 fields); the descriptor is open.
    let r = unsafe {
        libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range as *const CachestatRange, &mut stat as *mut Cachestat, 0)
    };
    if r != 0 {
        let e = std::io::Error::last_os_error().raw_os_error();
        if matches!(e, Some(libc::ENOSYS | libc::EPERM)) {
            UNKNOWN.store(true, Ordering::Relaxed);
        }
        return None;
    }
    let pages = (pos + len).div_ceil(PAGE) - pos / PAGE;
    Some(stat.nr_cache >= pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    fn range(file: &Arc<File>, from: u64, to: u64) -> Written {
        Written { file: Arc::downgrade(file), from, to, sealed: false }
    }

    #[test]
    fn keeps_the_newest_ranges_within_the_budget_and_merges_contiguous_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Arc::new(File::create(dir.path().join("a")).expect("a"));
        let b = Arc::new(File::create(dir.path().join("b")).expect("b"));
        let mut tail = CacheTail::new(3 * PAGE);
        let mut evict = Vec::new();
        tail.push(range(&a, 0, PAGE), &mut evict);
        tail.push(range(&a, PAGE, 2 * PAGE), &mut evict); // merges with the first
        tail.push(range(&b, 0, PAGE), &mut evict);
        assert!(evict.is_empty());
        assert_eq!(tail.cached_bytes(), 3 * PAGE);
        assert_eq!(tail.ranges.len(), 2);
        tail.push(range(&b, PAGE, 2 * PAGE), &mut evict);
        // One page over: only the oldest page of the oldest range goes.
        assert_eq!(evict.len(), 1);
        assert_eq!((evict[0].from, evict[0].to), (0, PAGE));
        assert!(Weak::ptr_eq(&evict[0].file, &Arc::downgrade(&a)));
        assert_eq!(tail.cached_bytes(), 3 * PAGE);
        // A write larger than the budget: everything older goes, and its own oldest part,
        // as one range per file where they are contiguous.
        evict.clear();
        tail.push(range(&b, 2 * PAGE, 6 * PAGE), &mut evict);
        let got: Vec<(u64, u64)> = evict.iter().map(|w| (w.from, w.to)).collect();
        assert_eq!(got, vec![(PAGE, 2 * PAGE), (0, 3 * PAGE)]);
        assert_eq!(tail.cached_bytes(), 3 * PAGE);
        assert_eq!(tail.ranges.len(), 1);
        assert_eq!((tail.ranges[0].from, tail.ranges[0].to), (3 * PAGE, 6 * PAGE));
    }

    #[test]
    fn one_file_written_contiguously_keeps_its_newest_pages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Arc::new(File::create(dir.path().join("a")).expect("a"));
        let mut tail = CacheTail::new(10 * PAGE);
        let mut evict = Vec::new();
        for i in 0..100 {
            tail.push(range(&a, i * PAGE, (i + 1) * PAGE), &mut evict);
        }
        assert_eq!(tail.cached_bytes(), 10 * PAGE);
        assert_eq!((tail.ranges[0].from, tail.ranges[0].to), (90 * PAGE, 100 * PAGE));
        // What went is the 90 oldest pages, handed out as one range.
        let got: Vec<(u64, u64)> = evict.iter().map(|w| (w.from, w.to)).collect();
        assert_eq!(got, vec![(0, 90 * PAGE)]);
    }

    #[test]
    fn a_zero_budget_keeps_nothing_and_evicts_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Arc::new(File::create(dir.path().join("a")).expect("a"));
        let mut tail = CacheTail::new(0);
        let mut evict = Vec::new();
        tail.push(range(&a, 0, 100 * PAGE), &mut evict);
        assert!(evict.is_empty());
        assert_eq!(tail.cached_bytes(), 0);
    }

    #[test]
    fn the_number_of_ranges_is_bounded_whatever_their_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files: Vec<Arc<File>> =
            (0..2).map(|i| Arc::new(File::create(dir.path().join(i.to_string())).expect("file"))).collect();
        let mut tail = CacheTail::new(u64::MAX);
        let mut evict = Vec::new();
        for i in 0..(RANGES_MAX as u64 + 10) {
            // Alternating files: nothing merges.
            tail.push(range(&files[(i % 2) as usize], i * PAGE, (i + 1) * PAGE), &mut evict);
        }
        assert_eq!(tail.ranges.len(), RANGES_MAX);
        assert_eq!(evict.len(), 10);
    }

    #[test]
    fn an_eviction_covers_whole_folios_and_leaves_the_one_across_its_end_to_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Arc::new(File::create(dir.path().join("a")).expect("a"));
        let m = FOLIO_MAX;
        assert_eq!(range(&a, 0, m + PAGE).folios(), Some((0, m)));
        // The next one goes on where that stopped: the folio across `m + PAGE` goes now.
        assert_eq!(range(&a, m + PAGE, 3 * m + 5 * PAGE).folios(), Some((m, 3 * m)));
        // Within one folio nothing goes yet.
        assert_eq!(range(&a, 3 * m + 5 * PAGE, 3 * m + 9 * PAGE).folios(), None);
        // A sealed segment's rest goes to its end.
        let sealed = Written { sealed: true, ..range(&a, 3 * m + 9 * PAGE, 3 * m + 12 * PAGE) };
        assert_eq!(sealed.folios(), Some((3 * m, 3 * m + 12 * PAGE)));
        // Sealed survives a merge in the tail, where the newer range decides.
        let mut tail = CacheTail::new(0);
        tail.budget = u64::MAX;
        let mut evict = Vec::new();
        tail.push(range(&a, 0, PAGE), &mut evict);
        tail.push(Written { sealed: true, ..range(&a, PAGE, 2 * PAGE) }, &mut evict);
        assert_eq!(tail.ranges.len(), 1);
        assert!(tail.ranges[0].sealed);
    }

    #[test]
    fn evicting_leaves_the_data_and_tolerates_a_deleted_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("seg");
        let mut f = File::create(&path).expect("create");
        f.write_all(&vec![7u8; 3 * PAGE as usize]).expect("write");
        f.sync_data().expect("sync");
        let f = Arc::new(f);
        range(&f, 0, 3 * PAGE).evict();
        assert_eq!(std::fs::read(&path).expect("read"), vec![7u8; 3 * PAGE as usize]);
        let gone = range(&f, 0, PAGE);
        drop(f);
        gone.evict(); // the file is closed: nothing to do
    }

    /// Pages of `file`'s first `len` bytes in the page cache (mincore of a mapping never
    /// touched, so measuring brings nothing in).
    fn resident_pages(file: &File, len: usize) -> usize {
        // SAFETY: a fresh read-only shared mapping of `len` bytes of an open file, read only
        // by mincore and unmapped before returning.
        unsafe {
            let addr = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
            assert_ne!(addr, libc::MAP_FAILED);
            let mut vec = vec![0u8; len.div_ceil(PAGE as usize)];
            assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
            libc::munmap(addr, len);
            vec.iter().filter(|b| *b & 1 == 1).count()
        }
    }

    #[test]
    fn the_evictor_drops_synced_ranges_at_a_lower_priority() {
        let dir = tempfile::tempdir().expect("tempdir");
        let len = 4 * FOLIO_MAX as usize;
        // Readable too: mincore needs a mapping, and a mapping a descriptor open for reading.
        let mut f =
            std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(dir.path().join("a")).expect("a");
        f.write_all(&vec![7u8; len]).expect("write");
        f.sync_all().expect("sync");
        let f = Arc::new(f);
        assert!(resident_pages(&f, len) > 0, "just written, so cached");
        let w = Written { file: Arc::downgrade(&f), from: 0, to: len as u64, sealed: true };
        assert!(evict_later(vec![w]).is_ok(), "queued");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while resident_pages(&f, len) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(resident_pages(&f, len), 0, "dropped by the evictor");
        // Its thread runs at EVICTOR_NICE: field 19 of its stat, after the name.
        let nice = std::fs::read_dir("/proc/self/task")
            .expect("tasks")
            .flatten()
            .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "runnel-evict"))
            .map(|t| {
                let stat = std::fs::read_to_string(t.path().join("stat")).expect("stat");
                let after_name = &stat[stat.rfind(')').expect("name") + 2..];
                after_name.split(' ').nth(16).expect("nice").parse::<i32>().expect("a number")
            })
            .collect::<Vec<_>>();
        assert_eq!(nice, vec![EVICTOR_NICE]);
        assert!(evict_later(Vec::new()).is_ok(), "nothing to drop is no work");
    }

    #[test]
    fn a_range_is_in_the_page_cache_until_its_pages_are_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let mut f =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).expect("create");
        f.write_all(&vec![7u8; 1024 * PAGE as usize]).expect("write");
        f.sync_all().expect("sync");
        let Some(cached) = in_page_cache(&f, 100, 10 * PAGE) else {
            return; // a kernel before 6.5 cannot tell: nothing to check
        };
        assert!(cached, "just written");
        assert_eq!(in_page_cache(&f, 0, 0), Some(true), "an empty range");
        crate::fault::drop_pages(&f).expect("drop pages");
        assert_eq!(in_page_cache(&f, 100, 10 * PAGE), Some(false), "dropped");
        // Reading a page back brings that page in (and what the kernel reads ahead), not the
        // rest.
        let mut one = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut one, 3 * PAGE).expect("read");
        assert_eq!(in_page_cache(&f, 3 * PAGE, PAGE), Some(true), "read back");
        assert_eq!(in_page_cache(&f, 900 * PAGE + 5, 2 * PAGE), Some(false), "not read back");
    }
}
