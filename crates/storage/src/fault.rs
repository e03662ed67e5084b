//! Disk fault hooks for benchmarks and fault injection: compiled in, off unless enabled
//! (the broker's `fault.disk.sync.delay.ms`, `fault.disk.sync.fail` and `fault.disk.full`,
//! set at run time through IncrementalAlterConfigs on the broker resource).
//!
//! One setting per process, since a process is one broker with one disk.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

static SYNC_DELAY_MS: AtomicU64 = AtomicU64::new(0);
static SYNC_FAILS: AtomicBool = AtomicBool::new(false);
static DISK_FULL: AtomicBool = AtomicBool::new(false);

/// Every [`crate::sync_files`] call first sleeps this long (0 turns the fault off): a disk
/// whose flushes are slow, as a saturated or failing device's are.
pub fn set_sync_delay(delay: Duration) {
    SYNC_DELAY_MS.store(delay.as_millis() as u64, Ordering::Relaxed);
}

pub fn sync_delay() -> Duration {
    Duration::from_millis(SYNC_DELAY_MS.load(Ordering::Relaxed))
}

/// Every [`crate::sync_files`] call fails with EIO while this is on: a disk that has gone
/// bad. What a replica does about it (stop, since what reached the disk is unknown) is the
/// point of the fault.
pub fn set_sync_fails(fail: bool) {
    SYNC_FAILS.store(fail, Ordering::Relaxed);
}

pub(crate) fn before_sync() -> std::io::Result<()> {
    let delay = sync_delay();
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
    if SYNC_FAILS.load(Ordering::Relaxed) {
        return Err(std::io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

/// While this is on, every append to a segment writes half its bytes and fails with ENOSPC:
/// a disk that filled up mid-write. What the replica does about it (stop: what reached the
/// disk is torn) is the point of the fault.
pub fn set_disk_full(full: bool) {
    DISK_FULL.store(full, Ordering::Relaxed);
}

pub(crate) fn before_write() -> std::io::Result<()> {
    if DISK_FULL.load(Ordering::Relaxed) {
        return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
    }
    Ok(())
}

/// Syncs `file` and drops its pages from the page cache, as memory pressure would: the next
/// reads of it go to the disk. For tests of reads that may wait for the disk.
pub fn drop_pages(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    file.sync_data()?;
    // SAFETY: posix_fadvise only reads the descriptor, which `file` keeps open.
    match unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// Opens every segment (`.log` file) in a log's directory and drops its pages
/// ([`drop_pages`]). Returns the files, in no set order.
pub fn drop_segment_pages(dir: &std::path::Path) -> std::io::Result<Vec<std::fs::File>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "log") {
            let file = std::fs::File::open(path)?;
            drop_pages(&file)?;
            files.push(file);
        }
    }
    Ok(files)
}
