//! The watchdog: a broker that stops making progress exits instead of hanging silently.
//!
//! Two loops must keep going round while the broker runs: the async runtime (a task marks
//! a beat every tenth of `watchdog.timeout.ms`) and the Raft driver (it marks a beat at
//! every turn with no sync in flight, at least once per tick, and whenever a round's sync
//! returns, so a sync that never returns stops it). A thread of its own, outside the runtime, reads the
//! beats; when one is older than `watchdog.timeout.ms` it logs what is stuck (each beat's
//! age, the oldest requests in flight with their client and API, and the state of every
//! thread of the process as Linux reports it) and stops the broker with exit code 70. A
//! supervisor starts it again; its data is safe by design (every acknowledged write was
//! fsynced on a quorum). A stopped process (SIGSTOP, a suspended VM) is not a hang: a
//! watchdog that wakes up late gives the loops a fresh timeout from the moment it woke.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use runnel_sync::Beat;
use tracing::{error, info};

use crate::broker::Broker;

/// How many in-flight requests the watchdog's report lists.
const REPORT_REQUESTS_MAX: usize = 20;

/// Starts the watchdog for `broker` (nothing when `watchdog.timeout.ms` is 0). Its thread
/// ends once the broker shuts down.
pub fn start(broker: &Arc<Broker>) {
    let timeout_ms = broker.config.settings.i64("watchdog.timeout.ms");
    if timeout_ms <= 0 {
        return;
    }
    let timeout = Duration::from_millis(timeout_ms as u64);
    let interval = (timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let runtime = Arc::new(Beat::new());
    let marker = runtime.clone();
    let weak = Arc::downgrade(broker);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            marker.mark();
            if weak.strong_count() == 0 {
                return;
            }
        }
    });
    let weak = Arc::downgrade(broker);
    let spawned =
        std::thread::Builder::new().name("watchdog".into()).spawn(move || watch(weak, runtime, timeout, interval));
    match spawned {
        Ok(_) => info!(timeout_ms, "watchdog started"),
        Err(e) => error!(error = %e, "could not start the watchdog thread"),
    }
}

fn watch(broker: Weak<Broker>, runtime: Arc<Beat>, timeout: Duration, interval: Duration) {
    let mut clock = Clock::new(interval);
    loop {
        std::thread::sleep(interval);
        let Some(b) = broker.upgrade() else { return };
        if b.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let beats = [("async runtime", runtime.age()), ("raft driver", b.replicas.driver().beat().age())];
        if let Some(stuck) = clock.stuck(Instant::now(), &beats, timeout) {
            report(&b, stuck, &beats, timeout);
            runnel_sync::stop(&format!(
                "watchdog: the {stuck} made no progress for {} ms (watchdog.timeout.ms)",
                timeout.as_millis()
            ));
        }
    }
}

/// The watchdog's own sense of time: a check that comes much later than planned means the
/// whole process was stopped, so the beats' ages count from when it woke up.
struct Clock {
    interval: Duration,
    last: Instant,
    woke: Instant,
}

impl Clock {
    fn new(interval: Duration) -> Clock {
        let now = Instant::now();
        Clock { interval, last: now, woke: now }
    }

    /// The first loop whose beat is older than `timeout`, not counting time the process
    /// spent stopped.
    fn stuck(&mut self, now: Instant, beats: &[(&'static str, Duration)], timeout: Duration) -> Option<&'static str> {
        if now.saturating_duration_since(self.last) > self.interval * 5 {
            self.woke = now;
        }
        self.last = now;
        let awake = now.saturating_duration_since(self.woke);
        beats.iter().find(|(_, age)| (*age).min(awake) > timeout).map(|(name, _)| *name)
    }
}

fn report(broker: &Broker, stuck: &str, beats: &[(&str, Duration)], timeout: Duration) {
    error!(stuck, timeout_ms = timeout.as_millis() as u64, "watchdog: the broker is not making progress");
    for (name, age) in beats {
        error!(loop_name = name, last_progress_ms_ago = age.as_millis() as u64, "watchdog: loop");
    }
    let requests = broker.requests.oldest(REPORT_REQUESTS_MAX);
    if requests.is_empty() {
        error!("watchdog: no request in flight");
    }
    for r in requests {
        error!(request = %r, "watchdog: in flight");
    }
    for t in threads() {
        error!(thread = %t, "watchdog: thread");
    }
}

/// Every thread of this process: name, state and what it waits in (from /proc on Linux).
fn threads() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten().take(1024) {
        let path = entry.path();
        let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        let name = read("comm").trim().to_string();
        let status = read("status");
        let state = status.lines().find_map(|l| l.strip_prefix("State:")).unwrap_or("?").trim().to_string();
        let wchan = read("wchan");
        out.push(format!("{} {name}: {state}, waiting in {}", entry.file_name().to_string_lossy(), wchan.trim()));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);
    const INTERVAL: Duration = Duration::from_secs(1);

    #[test]
    fn a_loop_older_than_the_timeout_is_stuck() {
        let mut clock = Clock::new(INTERVAL);
        let t0 = clock.last;
        let mut now = t0;
        let mut verdict = None;
        for s in 1..=12u64 {
            now = t0 + INTERVAL * s as u32;
            let beats = [("async runtime", Duration::from_millis(100)), ("raft driver", Duration::from_secs(s))];
            verdict = clock.stuck(now, &beats, TIMEOUT);
            if verdict.is_some() {
                break;
            }
        }
        assert_eq!(verdict, Some("raft driver"));
        assert_eq!(now, t0 + INTERVAL * 11);
    }

    #[test]
    fn loops_that_beat_are_not_stuck() {
        let mut clock = Clock::new(INTERVAL);
        let t0 = clock.last;
        for s in 1..=100u32 {
            let beats = [("async runtime", Duration::from_millis(900)), ("raft driver", Duration::from_millis(100))];
            assert_eq!(clock.stuck(t0 + INTERVAL * s, &beats, TIMEOUT), None);
        }
    }

    #[test]
    fn a_stopped_process_is_not_a_hang() {
        // SIGSTOP for 60 s: every beat is 60 s old when the watchdog wakes, which is late
        // itself; the loops get a full timeout from then.
        let mut clock = Clock::new(INTERVAL);
        let t0 = clock.last;
        let woke = t0 + Duration::from_secs(61);
        let stale = [("async runtime", Duration::from_secs(60))];
        assert_eq!(clock.stuck(woke, &stale, TIMEOUT), None);
        assert_eq!(clock.stuck(woke + INTERVAL, &[("async runtime", Duration::from_millis(50))], TIMEOUT), None);
        // A loop that stays stuck after the process resumed is still caught.
        let mut verdict = None;
        for s in 1..=12u32 {
            verdict =
                clock.stuck(woke + INTERVAL * s, &[("async runtime", Duration::from_secs(60 + s as u64))], TIMEOUT);
            if verdict.is_some() {
                assert_eq!(s, 11);
                break;
            }
        }
        assert_eq!(verdict, Some("async runtime"));
    }
}
