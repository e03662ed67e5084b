//! Disk fault hooks for benchmarks and fault injection: compiled in, off unless enabled
//! (the broker's `fault.disk.sync.delay.ms`, settable at runtime through
//! IncrementalAlterConfigs on the broker resource).
//!
//! One setting per process, since a process is one broker with one disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static SYNC_DELAY_MS: AtomicU64 = AtomicU64::new(0);

/// Every [`crate::sync_files`] call first sleeps this long (0 turns the fault off): a disk
/// whose flushes are slow, as a saturated or failing device's are.
pub fn set_sync_delay(delay: Duration) {
    SYNC_DELAY_MS.store(delay.as_millis() as u64, Ordering::Relaxed);
}

pub fn sync_delay() -> Duration {
    Duration::from_millis(SYNC_DELAY_MS.load(Ordering::Relaxed))
}

pub(crate) fn before_sync() {
    let delay = sync_delay();
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
}
