//! What a broker does when its own code fails: the panic policy and locks that honour it.
//!
//! A task that owns shared state (the Raft driver, the controller's apply task, the group
//! coordinator's tick, the replica manager, every background loop) cannot be restarted in
//! place: a panic may have left its state half-changed, and serving from it could ack a
//! write that is not there or show a client metadata that never was. So a panic anywhere in
//! the broker stops the process with exit code [`STOPPED`] (the panic hook of
//! [`install_panic_hook`] exits before unwinding, so no lock is ever released with
//! half-changed data behind it); a supervisor starts it again and it recovers from its
//! durable state, as after kill -9.
//!
//! The exception is work that owns nothing shared: a client connection. Its tasks run in
//! [`restartable`], and a panic there (a decoder or handler bug reached by one client's
//! request) unwinds and closes that connection only. What such a task touches that is
//! shared, it touches under a std lock: the unwinding poisons the lock, and the next task
//! to take it through [`LockExt`] stops the broker rather than read what the panic left.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (append, replicate, batched
//! fsync) → commit → response. Every lock taken on the way is taken through [`LockExt`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// The exit code of a broker that stopped itself (a panic, a poisoned lock, a failed
/// fsync, the watchdog): as `EX_SOFTWARE`, distinct from 1 (could not start).
pub const STOPPED: i32 = 70;

/// Stops the process at once, with `why` in the log: no destructor runs and nothing more
/// is written, as after kill -9.
pub fn stop(why: &str) -> ! {
    tracing::error!(reason = why, "stopping the broker; it restarts from its durable state");
    eprintln!("runnel: stopping: {why}");
    std::process::exit(STOPPED)
}

tokio::task_local! {
    static RESTARTABLE: &'static str;
}

/// Runs `fut` as work that owns no shared state (`what` names it in the log): a panic in it
/// unwinds and ends that work only, instead of stopping the broker.
pub async fn restartable<F: std::future::Future>(what: &'static str, fut: F) -> F::Output {
    RESTARTABLE.scope(what, fut).await
}

/// Installs the broker's panic policy (see the module docs). Called once at start-up by a
/// process that runs a broker; tools and tests keep Rust's default.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        match RESTARTABLE.try_with(|what| *what) {
            Ok(what) => {
                tracing::error!(task = what, %at, %message, "panic in a task that owns no shared state; ending that task only");
                default(info);
            }
            Err(_) => {
                let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
                default(info);
                stop(&format!("panic in a task that owns shared state (thread {thread}) at {at}: {message}"));
            }
        }
    }));
}

/// Locks that stop the broker when poisoned, instead of handing out what a panic left.
pub trait LockExt<T> {
    fn lock_or_stop(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn lock_or_stop(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|_| poisoned())
    }
}

/// [`LockExt`] for reader-writer locks.
pub trait RwLockExt<T> {
    fn read_or_stop(&self) -> RwLockReadGuard<'_, T>;
    fn write_or_stop(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn read_or_stop(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|_| poisoned())
    }
    fn write_or_stop(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|_| poisoned())
    }
}

/// The last time a loop made progress, marked by the loop and read by the watchdog.
pub struct Beat(AtomicU64);

impl Beat {
    /// A beat marked now.
    pub fn new() -> Beat {
        Beat(AtomicU64::new(process_ms()))
    }
    pub fn mark(&self) {
        self.0.store(process_ms(), Ordering::Relaxed);
    }
    /// How long ago the loop last made progress.
    pub fn age(&self) -> Duration {
        Duration::from_millis(process_ms().saturating_sub(self.0.load(Ordering::Relaxed)))
    }
}

impl Default for Beat {
    fn default() -> Beat {
        Beat::new()
    }
}

/// Milliseconds since the first call (a monotonic clock shared by every beat).
fn process_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// The process's wall clock (Kafka timestamps, retention, session deadlines), with the
/// offset the `fault.clock.offset.ms` fault hook sets: a clock that jumped.
pub mod clock {
    use std::sync::atomic::{AtomicI64, Ordering};

    static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

    /// Milliseconds since the Unix epoch, plus the injected offset.
    pub fn wall_ms() -> i64 {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        now.saturating_add(OFFSET_MS.load(Ordering::Relaxed))
    }

    /// Makes [`wall_ms`] jump by `ms` from the real time (0: the real time again).
    pub fn set_offset_ms(ms: i64) {
        OFFSET_MS.store(ms, Ordering::Relaxed);
    }
}

#[cold]
fn poisoned() -> ! {
    stop("a lock was poisoned: a panic left the state behind it half-changed")
}

#[cfg(test)]
mod tests {
    //! Each case that stops the process runs in a child: the test binary started again
    //! with `RUNNEL_SYNC_CHILD` naming the case.
    use super::*;
    use std::process::Command;
    use std::sync::Arc;

    fn child(case: &str) -> std::process::Output {
        let exe = std::env::current_exe().expect("test binary");
        Command::new(exe)
            .args(["--exact", "tests::children", "--nocapture", "--test-threads=1"])
            .env("RUNNEL_SYNC_CHILD", case)
            .output()
            .expect("running the child")
    }

    /// The child side: does what `RUNNEL_SYNC_CHILD` names, then exits 0 if it got through.
    #[test]
    fn children() {
        let Ok(case) = std::env::var("RUNNEL_SYNC_CHILD") else { return };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        match case.as_str() {
            "poisoned" => {
                let m = Arc::new(Mutex::new(1));
                let m2 = m.clone();
                let _ = std::thread::spawn(move || {
                    let _g = m2.lock_or_stop();
                    panic!("half-changed");
                })
                .join();
                let _ = *m.lock_or_stop();
            }
            "owner-panics" => {
                install_panic_hook();
                let r = rt.block_on(rt.spawn(async { panic!("apply task bug") }));
                drop(r);
            }
            "connection-panics" => {
                install_panic_hook();
                let r = rt.block_on(rt.spawn(restartable("connection", async { panic!("decoder bug") })));
                assert!(r.is_err(), "the task ended");
                // The process goes on, and so do other tasks.
                assert_eq!(rt.block_on(rt.spawn(async { 2 })).expect("task"), 2);
            }
            other => panic!("unknown case {other}"),
        }
        std::process::exit(0);
    }

    #[test]
    fn a_poisoned_lock_stops_the_process() {
        let out = child("poisoned");
        assert_eq!(out.status.code(), Some(STOPPED), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("lock was poisoned"), "{out:?}");
    }

    #[test]
    fn a_panic_in_a_task_owning_shared_state_stops_the_process() {
        let out = child("owner-panics");
        assert_eq!(out.status.code(), Some(STOPPED), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("owns shared state") && err.contains("apply task bug"), "{err}");
    }

    #[test]
    fn a_panic_in_a_restartable_task_ends_that_task_only() {
        let out = child("connection-panics");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("decoder bug"), "{out:?}");
    }
}
