//! Giving freed memory back. glibc's allocator keeps memory a program has freed for its
//! next allocations, per arena (one per thread that allocated, up to eight per core), and
//! returns it to the system only from the top of the main heap. A broker's allocations
//! come and go in bursts (a paused peer's queued Raft messages, a slow disk's waiting
//! requests): measured over an hour of chaos, the live heap stayed at 1-3 MB while resident
//! anonymous memory kept rising by 2-3 KB/s. Every `memory.trim.interval.ms` a thread of
//! its own (never a runtime worker) asks glibc to release the free pages of every arena
//! (`malloc_trim`, which takes each arena's lock only while it walks that arena's free
//! chunks).
//!
//! And keeping big buffers. glibc serves an allocation over its mmap threshold (128 KB to
//! start with, raised as such blocks are freed) with a fresh mapping and unmaps it when
//! freed: a request frame or a fetch's read of a megabyte or more then costs a page fault
//! per 4 KB page touched, every time. That was 15% of a broker's CPU taking one producer's
//! 1.4 MB requests (durable-512). With the threshold fixed at glibc's largest (32 MB) and
//! the heap's automatic trimming raised to match, such buffers come from the heap and are
//! reused; the trimming thread still gives idle memory back.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tracing::{error, info};

use crate::broker::Broker;

/// Starts the trimming thread for `broker` (nothing when the interval is 0, or on a
/// platform without glibc). It ends once the broker shuts down.
pub fn start(broker: &Arc<Broker>) {
    keep_big_buffers();
    let interval_ms = broker.config.settings.i64("memory.trim.interval.ms");
    if interval_ms <= 0 || !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let interval = Duration::from_millis(interval_ms as u64);
    let weak = Arc::downgrade(broker);
    match std::thread::Builder::new().name("memory-trim".into()).spawn(move || trim_loop(weak, interval)) {
        Ok(_) => info!(interval_ms, "memory trimming started"),
        Err(e) => error!(error = %e, "could not start the memory trimming thread"),
    }
}

/// Allocations up to this size come from the heap and are reused once freed (glibc's
/// largest mmap threshold on 64-bit).
const MMAP_THRESHOLD: i32 = 32 << 20;
/// Free memory at the top of the main heap kept at a `free` (the trimming thread returns it
/// at its next turn).
const TRIM_THRESHOLD: i32 = 64 << 20;

/// Sets glibc's mmap and trim thresholds (see the module's text); process-wide, so a second
/// broker in the process sets the same.
fn keep_big_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters, under its own lock.
    unsafe {
        if libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1
            || libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1
        {
            error!("could not set the allocator's mmap and trim thresholds");
        }
    }
}

fn trim_loop(broker: Weak<Broker>, interval: Duration) {
    loop {
        std::thread::sleep(interval);
        if broker.strong_count() == 0 {
            return;
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only walks the allocator's own free lists under its locks.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
