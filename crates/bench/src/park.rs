//! CPU affinity of broker processes on this machine, so that `runnel bench compare --park-cpus`
//! can move the side that is not being measured off the CPUs of the side that is.
//!
//! Two systems pinned to the same CPU (`bench/pin.sh`) take turns on it, but the idle one
//! still runs: a Kafka broker between its runs uses 4-9% of a core (its JVM's timers,
//! schedulers and compiler), and more just after a run while it deletes the run's topic. That
//! comes out of the other side's run, not its own. Every thread of a process is moved
//! (`sched_setaffinity` per thread id in `/proc/PID/task`); threads started while parked
//! inherit the parked set and are moved back with the rest.

use std::io;

use anyhow::{bail, Context, Result};

/// A set of CPUs.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl std::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

/// The CPUs as a list, `0,2,3`.
impl std::fmt::Display for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cpus: Vec<String> =
            (0..libc::CPU_SETSIZE as usize).filter(|c| self.contains(*c)).map(|c| c.to_string()).collect();
        f.write_str(&cpus.join(","))
    }
}

impl CpuSet {
    fn empty() -> CpuSet {
        // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
        CpuSet(unsafe { std::mem::zeroed() })
    }

    fn contains(&self, cpu: usize) -> bool {
        // SAFETY: CPU_ISSET reads one bit of the array; `cpu` is below CPU_SETSIZE.
        cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu, &self.0) }
    }

    /// Parses a CPU list as `taskset -c` takes it: `1`, `0,2`, `0-3,6`.
    pub fn parse(list: &str) -> Result<CpuSet> {
        let mut set = CpuSet::empty();
        let max = libc::CPU_SETSIZE as usize;
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (lo.trim(), hi.trim()),
                None => (part, part),
            };
            let lo: usize = lo.parse().with_context(|| format!("bad CPU {lo:?} in {list:?}"))?;
            let hi: usize = hi.parse().with_context(|| format!("bad CPU {hi:?} in {list:?}"))?;
            if lo > hi || hi >= max {
                bail!("bad CPU range {part:?} in {list:?}");
            }
            for cpu in lo..=hi {
                // SAFETY: CPU_SET sets one bit of the array; `cpu` is below CPU_SETSIZE.
                unsafe { libc::CPU_SET(cpu, &mut set.0) };
            }
        }
        if (0..max).all(|c| !set.contains(c)) {
            bail!("no CPU in {list:?}");
        }
        Ok(set)
    }

    /// The CPUs process (or thread) `pid` may run on.
    pub fn of(pid: u32) -> io::Result<CpuSet> {
        let mut set = CpuSet::empty();
        // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into `set`.
        let rc =
            unsafe { libc::sched_getaffinity(pid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &mut set.0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(set)
    }

    /// Moves every thread of process `pid` onto these CPUs. A thread that ended meanwhile is
    /// skipped; the process itself gone is an error.
    pub fn apply_to(&self, pid: u32) -> io::Result<()> {
        let mut moved = 0;
        for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let Some(tid) = entry?.file_name().to_str().and_then(|t| t.parse::<libc::pid_t>().ok()) else {
                continue;
            };
            // SAFETY: the kernel reads size_of::<cpu_set_t>() bytes from `self.0`.
            let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
            if rc == 0 {
                moved += 1;
            } else {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ESRCH) {
                    return Err(e);
                }
            }
        }
        if moved == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("process {pid} has no threads left")));
        }
        Ok(())
    }
}

/// Where each side's brokers run when measured, and where the other side waits.
pub struct Parking {
    park: CpuSet,
    /// (pid, its CPUs when the comparison began) of each side.
    a: Vec<(u32, CpuSet)>,
    b: Vec<(u32, CpuSet)>,
}

impl Parking {
    /// Notes where the brokers of both sides run now (their home while measured).
    pub fn new(park: CpuSet, pids_a: &[u32], pids_b: &[u32]) -> Result<Parking> {
        let home = |pids: &[u32]| -> Result<Vec<(u32, CpuSet)>> {
            pids.iter()
                .map(|p| Ok((*p, CpuSet::of(*p).with_context(|| format!("CPUs of broker process {p}"))?)))
                .collect()
        };
        Ok(Parking { park, a: home(pids_a)?, b: home(pids_b)? })
    }

    /// Before a run of side `a` (else b): its brokers go home, the other side's to the park.
    pub fn before_run(&self, a: bool) -> Result<()> {
        let (run, wait) = if a { (&self.a, &self.b) } else { (&self.b, &self.a) };
        for (pid, _) in wait {
            self.park.apply_to(*pid).with_context(|| format!("parking broker process {pid}"))?;
        }
        for (pid, home) in run {
            home.apply_to(*pid).with_context(|| format!("moving broker process {pid} back"))?;
        }
        Ok(())
    }

    /// Every broker back where it was when the comparison began (best effort: a broker that
    /// is gone is skipped).
    pub fn restore(&self) {
        for (pid, home) in self.a.iter().chain(&self.b) {
            let _ = home.apply_to(*pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(s: &CpuSet) -> Vec<usize> {
        (0..64).filter(|c| s.contains(*c)).collect()
    }

    #[test]
    fn parses_cpu_lists_as_taskset_does() {
        assert_eq!(cpus(&CpuSet::parse("1").unwrap()), vec![1]);
        assert_eq!(cpus(&CpuSet::parse("0,2").unwrap()), vec![0, 2]);
        assert_eq!(cpus(&CpuSet::parse("0-3,6").unwrap()), vec![0, 1, 2, 3, 6]);
        assert_eq!(CpuSet::parse(" 2-3, 0").unwrap().to_string(), "0,2,3");
        for bad in ["", "x", "3-1", "1-", "99999", ","] {
            assert!(CpuSet::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn moves_every_thread_of_a_process_and_back() {
        let me = std::process::id();
        let home = CpuSet::of(me).unwrap();
        let first = (0..libc::CPU_SETSIZE as usize).find(|c| home.contains(*c)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid takes no arguments.
            ready_tx.send(unsafe { libc::gettid() } as u32).unwrap();
            rx.recv().ok();
        });
        let tid = ready_rx.recv().unwrap();
        let one = CpuSet::parse(&first.to_string()).unwrap();
        one.apply_to(me).unwrap();
        assert_eq!(cpus(&CpuSet::of(tid).unwrap()), vec![first], "the other thread moved too");
        assert_eq!(cpus(&CpuSet::of(me).unwrap()), vec![first]);
        home.apply_to(me).unwrap();
        assert_eq!(cpus(&CpuSet::of(tid).unwrap()), cpus(&home));
        drop(tx);
        t.join().unwrap();
        assert!(CpuSet::parse("0").unwrap().apply_to(u32::MAX >> 1).is_err(), "no such process");
    }
}
