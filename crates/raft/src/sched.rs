//! A short scheduler slice for threads that wake, make one system call and sleep again,
//! such as the thread that syncs a round (`driver::BlockingPoolDisk`).
//!
//! Linux's EEVDF scheduler (6.6 and later) gives every thread a slice, 3 ms at most by
//! default, and a thread that wakes runs before the current one only if its virtual
//! deadline, its eligible time plus its slice, comes first. On a broker with one core a
//! round's sync thread woke behind the connection reader and the driver and started up to
//! 3 ms after the driver asked for it. Since Linux 6.12 a thread may ask for a shorter
//! slice (`sched_setattr` with `sched_runtime` under `SCHED_OTHER`, no privilege needed):
//! it is then picked soon after it wakes, and preempted as soon, which costs a thread that
//! runs for a few microseconds at a time nothing. Its weight is unchanged: a blocking-pool
//! thread that later runs a long job (hashing a password, say) is preempted more often, not
//! given more of the CPU. Older kernels refuse the request or ignore it; either way the
//! thread keeps the default slice.

use std::cell::Cell;
use std::io;

/// The slice a sync thread asks for: long enough for the system call it makes and the
/// wake-up of the driver after it.
pub const SHORT_SLICE_NANOS: u64 = 100_000;

/// `struct sched_attr` as `sched_setattr(2)` takes it (the first version, 48 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// The calling thread's scheduling attributes (`sched_getattr`).
fn current() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr { size: 0, policy: 0, flags: 0, nice: 0, priority: 0, runtime: 0, deadline: 0, period: 0 };
    let size = std::mem::size_of::<SchedAttr>() as libc::c_uint;
    // SAFETY: sched_getattr writes at most `size` bytes into `attr`, which is that large;
    // pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut SchedAttr, size, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

/// The calling thread's slice in nanoseconds, as the kernel reports it (0 where it does
/// not report one).
#[cfg(test)]
fn slice() -> io::Result<u64> {
    Ok(current()?.runtime)
}

/// Asks the kernel to give the calling thread a slice of `nanos` (it clamps the request to
/// 0.1-100 ms), keeping the thread's policy and nice value. Only a thread under
/// `SCHED_OTHER` asks; for any other policy this returns `Unsupported`. Any other error
/// means the kernel refused (before Linux 6.12): the thread keeps the slice it had.
pub fn ask_slice(nanos: u64) -> io::Result<()> {
    let mut attr = current()?;
    if attr.policy != libc::SCHED_OTHER as u32 {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "not a SCHED_OTHER thread"));
    }
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    attr.flags = 0;
    attr.runtime = nanos;
    // SAFETY: sched_setattr reads `size` bytes from a valid, initialised sched_attr of
    // that size; pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

thread_local! {
    static ASKED: Cell<bool> = const { Cell::new(false) };
}

/// [`ask_slice`] with [`SHORT_SLICE_NANOS`] once per thread, the first time the thread
/// calls this; a refusal is logged once per thread at debug level and not asked again.
pub fn short_slice_once() {
    ASKED.with(|asked| {
        if asked.replace(true) {
            return;
        }
        if let Err(e) = ask_slice(SHORT_SLICE_NANOS) {
            tracing::debug!("sync thread keeps the default scheduler slice: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_attr_is_the_kernels_first_version() {
        assert_eq!(std::mem::size_of::<SchedAttr>(), 48);
    }

    #[test]
    fn a_thread_asks_once_and_goes_on_whatever_the_kernel_says() {
        std::thread::spawn(|| {
            let nice_before = current().expect("sched_getattr").nice;
            short_slice_once();
            short_slice_once();
            assert!(ASKED.with(Cell::get));
            // Granted on 6.12 and later, refused before: both leave the thread running,
            // with the nice value it had.
            if ask_slice(SHORT_SLICE_NANOS).is_ok() {
                assert_eq!(slice().expect("sched_getattr"), SHORT_SLICE_NANOS);
                // The kernel clamps what it is asked for to 0.1-100 ms.
                ask_slice(1).expect("a clamped request is granted");
                assert_eq!(slice().expect("sched_getattr"), 100_000);
            }
            assert_eq!(current().expect("sched_getattr").nice, nice_before);
        })
        .join()
        .expect("the thread ran");
    }
}
