//! `runnel chaos`: starts a local cluster, runs the verify workload against it, injects
//! faults on a schedule (given, or drawn from a seed), heals every one of them, then checks
//! the history and draws the availability chart.
//!
//! The schedule's times count from the moment the workload runs (its topic created and
//! every partition led). Faults of a given schedule may overlap: each is applied at its
//! start and healed at its end, whatever else is in force. Drawn faults never overlap: each
//! one is applied, held, healed, and the cluster gets a pause before the next. Every run is
//! bounded: the workload's duration, then its final read.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use runnel_verify::router::Router;
use runnel_verify::FaultWindow;
use tokio::task::JoinHandle;

use crate::attach::Attached;
use crate::broker_settings::{has_broker_setting, set_broker_config};
use crate::local::{locations, Brokers, LocalCluster, Namespaces, Network};
use crate::netns::RegionArgs;
use crate::verify::VerifyArgs;

mod drill;
mod recovery;
mod run;
use run::{count, run, wait_registered, InForce};

/// The storage layer's fault hooks, as dynamic broker settings.
const SYNC_DELAY: &str = "fault.disk.sync.delay.ms";
const SYNC_FAIL: &str = "fault.disk.sync.fail";
const DISK_FULL: &str = "fault.disk.full";
const CLOCK_OFFSET: &str = "fault.clock.offset.ms";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// kill -9 a partition leader; started again when the fault ends.
    KillLeader,
    /// kill -9 a follower of a partition; started again when the fault ends.
    KillFollower,
    /// SIGTERM a partition leader: a clean stop, which must end within --stop-within-ms
    /// with exit status 0 (143 from a JVM); started again when the fault ends.
    StopLeader,
    /// The same for a follower of a partition.
    StopFollower,
    /// SIGSTOP a partition leader; SIGCONT when the fault ends.
    PauseLeader,
    PauseFollower,
    /// Every fsync of the leader's disk takes --disk-delay-ms longer.
    SlowDiskLeader,
    SlowDiskFollower,
    /// Every fsync of a follower's disk fails (the broker stops; started again at the end).
    FailDiskFollower,
    /// Every write to the leader's log fails with ENOSPC after writing half of it (the
    /// broker stops; started again at the end).
    DiskFullLeader,
    DiskFullFollower,
    /// The leader's wall clock jumps --clock-jump-ms (back to the real time when the fault
    /// ends).
    ClockJumpLeader,
    ClockJumpFollower,
    /// Take the leader's network link down (needs network namespaces: root, iproute2).
    IsolateLeader,
    IsolateFollower,
    /// Take down the links of every broker in the region of a partition leader, and of the
    /// region's clients.
    IsolateRegion,
    /// Add --latency-ms each way to all traffic between regions, on top of
    /// --inter-region-latency (a delayer on NFQUEUE in the network namespaces: needs root).
    RegionLatency,
    /// kill -9 a coordinator of the workload: with --transactional, in turn, the copier's
    /// transaction coordinator, its group's coordinator, and each producer's transaction
    /// coordinator; else its consumer group's. Started again when the fault ends.
    KillCoordinator,
    /// SIGSTOP that coordinator; SIGCONT when the fault ends.
    PauseCoordinator,
}

impl Fault {
    fn name(self) -> String {
        self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
    }

    /// The broker setting (a storage fault hook) a disk fault works through.
    fn disk_setting(self) -> Option<&'static str> {
        match self {
            Fault::SlowDiskLeader | Fault::SlowDiskFollower => Some(SYNC_DELAY),
            Fault::FailDiskFollower => Some(SYNC_FAIL),
            Fault::DiskFullLeader | Fault::DiskFullFollower => Some(DISK_FULL),
            Fault::ClockJumpLeader | Fault::ClockJumpFollower => Some(CLOCK_OFFSET),
            _ => None,
        }
    }

    fn needs_namespaces(self) -> bool {
        matches!(self, Fault::IsolateLeader | Fault::IsolateFollower | Fault::IsolateRegion | Fault::RegionLatency)
    }
}

#[derive(Args)]
pub struct ChaosArgs {
    #[command(flatten)]
    workload: VerifyArgs,
    /// Brokers of the cluster to start (with --attach: that the cluster has).
    #[arg(long, default_value_t = 3)]
    brokers: u16,
    /// First broker's client port (Raft on PORT+1000+i).
    #[arg(long, default_value_t = 19092)]
    port: u16,
    /// Where the brokers keep their data; default a fresh folder under the temp dir,
    /// removed at the end.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Regions (isolate-region takes one down whole), network namespaces, and always-on
    /// latency between regions for the whole run.
    #[command(flatten)]
    net: RegionArgs,
    /// Faults to draw from, in random order from the seed.
    #[arg(long, value_enum, value_delimiter = ',',
          default_values_t = [Fault::KillLeader, Fault::KillFollower, Fault::StopLeader, Fault::StopFollower,
                              Fault::PauseLeader, Fault::PauseFollower])]
    faults: Vec<Fault>,
    /// Instead of drawing: `START:FAULT:SECONDS,...`, e.g. `10:kill-leader:3,25:pause-follower:5`.
    /// START counts from when the workload runs (topic created, partitions led); faults may
    /// overlap.
    #[arg(long)]
    schedule: Option<String>,
    /// A drill: region-loss cuts one region (its brokers and clients) off from a third of
    /// the run to two thirds (unless --schedule says otherwise) and sums up RPO, RTO per
    /// surviving region, reads across regions and the recovery after the heal. Needs
    /// --regions 2 or more.
    #[arg(long, value_enum)]
    drill: Option<drill::Drill>,
    /// Write the drill's figures as JSON here.
    #[arg(long, requires = "drill")]
    drill_json: Option<PathBuf>,
    /// Start each broker with this program instead of `runnel dev`, in the same places
    /// (namespaces, ports, regions), which it reads from its environment (RUNNEL_BROKER_*;
    /// docs/chaos.md): `bench/kafka-broker.sh` runs Apache Kafka so, for the same drill
    /// side by side.
    #[arg(long, conflicts_with = "attach")]
    broker_command: Option<PathBuf>,
    /// Seed for the schedule and the targets (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds before the first drawn fault.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Seconds each drawn fault lasts.
    #[arg(long, default_value_t = 4.0)]
    fault_duration: f64,
    /// Mean seconds between one fault's end and the next one's start.
    #[arg(long, default_value_t = 4.0)]
    interval: f64,
    /// What a slow disk adds to every fsync, in milliseconds.
    #[arg(long, default_value_t = 500)]
    disk_delay_ms: u64,
    /// How far clock-jump moves a broker's wall clock, in milliseconds (negative: back).
    #[arg(long, default_value_t = 600_000, allow_hyphen_values = true)]
    clock_jump_ms: i64,
    /// What region-latency adds to each direction between regions, in milliseconds (on top
    /// of --inter-region-latency).
    #[arg(long, default_value_t = 50)]
    latency_ms: u64,
    /// How long a stop-* fault's broker may take to exit after SIGTERM, in milliseconds;
    /// past that it is killed and the run fails.
    #[arg(long, default_value_t = 60_000)]
    stop_within_ms: u64,
    /// Override a broker setting for every broker: --set log.segment.bytes=1048576
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Write each broker's output to DIR/broker-I.log (default: the data dir).
    #[arg(long)]
    logs: Option<PathBuf>,
    /// Start no cluster: break the one at --bootstrap, which `runnel dev --brokers N`
    /// started on this machine (it starts a killed broker again). Process and disk faults
    /// only.
    #[arg(long)]
    attach: bool,
}

/// One planned fault: from `start` (since the run began) for `hold`.
#[derive(Debug, Clone)]
struct Planned {
    start: Duration,
    fault: Fault,
    hold: Duration,
}

/// splitmix64: a small, seedable generator, so a schedule can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn parse_schedule(s: &str) -> Result<Vec<Planned>> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let [start, fault, hold] = parts[..] else { bail!("--schedule {item}: expected START:FAULT:SECONDS") };
        let fault = Fault::from_str(fault, true).map_err(|e| anyhow::anyhow!("--schedule {item}: {e}"))?;
        let secs = |v: &str| -> Result<Duration> {
            let f: f64 = v.parse().with_context(|| format!("--schedule {item}: {v} is not a number of seconds"))?;
            Ok(Duration::from_secs_f64(f.max(0.0)))
        };
        out.push(Planned { start: secs(start)?, fault, hold: secs(hold)? });
    }
    out.sort_by_key(|p| p.start);
    Ok(out)
}

/// Faults drawn from `faults` until `duration` less a margin for the last to heal.
fn draw_schedule(a: &ChaosArgs, rng: &mut Rng, duration: Duration) -> Vec<Planned> {
    let mut out = Vec::new();
    let hold = Duration::from_secs_f64(a.fault_duration.max(0.1));
    let mut t = Duration::from_secs_f64(a.warmup.max(0.0));
    while !a.faults.is_empty() && t + hold + Duration::from_secs(2) <= duration {
        let fault = a.faults[rng.below(a.faults.len())];
        out.push(Planned { start: t, fault, hold });
        let gap = a.interval.max(0.5) * (0.5 + rng.unit());
        t += hold + Duration::from_secs_f64(gap);
    }
    out
}

/// The brokers a fault hits and how to heal it.
enum Applied {
    Killed(Vec<u16>),
    Paused(Vec<u16>),
    Config(u16, &'static str),
    /// The disk fails: the broker stops by itself, or is healed through the setting.
    FailingDisk(u16, &'static str),
    Isolated(Vec<u16>),
    /// A region cut off: its brokers, and its clients' namespace.
    IsolatedRegion(u16, Vec<u16>),
    Latency,
}

/// One step of a run: a planned fault applied at its start, or healed at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    // Heals come first at equal times: a fault that ends when the next starts is gone first.
    Heal,
    Apply,
}

struct Chaos<C: Brokers> {
    cluster: C,
    router: Router,
    rng: Rng,
    regions: u16,
    disk_delay_ms: u64,
    clock_jump_ms: i64,
    latency_ms: u64,
    /// region-latency faults in force: they nest, the delay goes back to the base when the
    /// last one ends.
    latency_faults: usize,
    /// Brokers whose link is down, and how many faults in force hold it down.
    links_down: HashMap<u16, usize>,
    /// Regions whose client namespace's link is down, and how many faults hold it down.
    clients_down: HashMap<u16, usize>,
    /// Paused brokers, and how many faults in force hold them paused.
    paused: HashMap<u16, usize>,
    /// Brokers whose exit is the fault's expected effect.
    may_exit: Vec<u16>,
    /// Brokers that exited on their own, outside any fault that explains it.
    unexpected_exits: Vec<String>,
    /// Clean stops that failed: a broker still running --stop-within-ms after SIGTERM, or
    /// one that exited with a failure.
    failed_stops: Vec<String>,
    stop_within: Duration,
    /// Set by SIGINT or SIGTERM: heal the fault in force and stop.
    interrupt: Arc<AtomicBool>,
    /// (FindCoordinator key type, key) of the coordinators the *-coordinator faults hit,
    /// one after the other.
    coordinator_keys: Vec<(i8, String)>,
    /// *-coordinator faults so far.
    coordinator_faults: usize,
    /// Recoveries being watched after a heal: (index of the fault's window, the watch).
    recoveries: Vec<(usize, tokio::task::JoinHandle<runnel_verify::Recovery>)>,
    /// When the workload's producers stop: watches end by then.
    until: Instant,
}

impl<C: Brokers> Chaos<C> {
    /// A partition's leader and one of its followers, drawn at random from the topic.
    async fn targets(&mut self) -> Result<(u16, u16)> {
        let parts = self.router.replicas().await?;
        let usable: Vec<&(i32, Vec<i32>)> = parts.iter().filter(|(l, r)| *l >= 0 && r.len() > 1).collect();
        let Some((leader, replicas)) = usable.get(self.rng.below(usable.len())) else {
            bail!("no partition has a leader and a follower now: {parts:?}");
        };
        let followers: Vec<i32> = replicas.iter().copied().filter(|r| r != leader).collect();
        let follower = followers[self.rng.below(followers.len())];
        Ok((*leader as u16, follower as u16))
    }

    fn interrupted(&self) -> bool {
        self.interrupt.load(Ordering::Relaxed)
    }

    fn region_of(&self, broker: u16) -> u16 {
        broker % self.regions.max(1)
    }

    /// The broker coordinating the next of `coordinator_keys` now, and which key that is.
    async fn coordinator(&mut self) -> Result<(u16, String)> {
        let (key_type, key) = self.coordinator_keys[self.coordinator_faults % self.coordinator_keys.len()].clone();
        self.coordinator_faults += 1;
        let req =
            FindCoordinatorRequest::default().with_key(StrBytes::from_string(key.clone())).with_key_type(key_type);
        let r = self.router.call_any(&req, runnel_client::FIND_COORDINATOR_VERSION).await?;
        if r.error_code != 0 || r.node_id.0 < 0 {
            bail!("no coordinator for {key} now (error code {})", r.error_code);
        }
        Ok((r.node_id.0 as u16, key))
    }

    async fn apply(&mut self, fault: Fault) -> Result<(String, Applied)> {
        let (leader, follower) = self.targets().await?;
        let mut of = String::new();
        let target = match fault {
            Fault::KillCoordinator | Fault::PauseCoordinator => {
                let (broker, key) = self.coordinator().await?;
                of = format!(" of {key}");
                broker
            }
            Fault::KillLeader
            | Fault::StopLeader
            | Fault::PauseLeader
            | Fault::SlowDiskLeader
            | Fault::DiskFullLeader
            | Fault::ClockJumpLeader
            | Fault::IsolateLeader => leader,
            _ => follower,
        };
        let what = format!("{} (broker {target}){of}", fault.name());
        let addr = self.cluster.address(target);
        if let Some(key) = fault.disk_setting() {
            if !has_broker_setting(&mut self.router, &addr, target, key).await? {
                bail!("broker {target} has no {key}: disk faults need Runnel's fault hooks");
            }
        }
        let applied = match fault {
            Fault::KillLeader | Fault::KillFollower | Fault::KillCoordinator => {
                self.cluster.kill(target).await?;
                Applied::Killed(vec![target])
            }
            Fault::StopLeader | Fault::StopFollower => {
                if self.paused.contains_key(&target) {
                    // It would take SIGTERM only once another fault's SIGCONT came.
                    bail!("broker {target} is paused: it cannot stop until it resumes");
                }
                let signalled = Instant::now();
                if let Some(failed) = self.cluster.terminate(target, self.stop_within).await? {
                    eprintln!("runnel chaos: {failed}");
                    self.failed_stops.push(failed);
                }
                let took = signalled.elapsed().as_secs_f64();
                return Ok((format!("{what}, stopped in {took:.2}s"), Applied::Killed(vec![target])));
            }
            Fault::PauseLeader | Fault::PauseFollower | Fault::PauseCoordinator => {
                if !self.paused.contains_key(&target) {
                    self.cluster.pause(target)?;
                }
                count(&mut self.paused, target, true);
                Applied::Paused(vec![target])
            }
            Fault::SlowDiskLeader | Fault::SlowDiskFollower => {
                let delay = self.disk_delay_ms.to_string();
                set_broker_config(&mut self.router, &addr, target, SYNC_DELAY, Some(&delay)).await?;
                Applied::Config(target, SYNC_DELAY)
            }
            Fault::FailDiskFollower | Fault::DiskFullLeader | Fault::DiskFullFollower => {
                let key = fault.disk_setting().unwrap_or(SYNC_FAIL);
                self.may_exit.push(target);
                set_broker_config(&mut self.router, &addr, target, key, Some("true")).await?;
                Applied::FailingDisk(target, key)
            }
            Fault::ClockJumpLeader | Fault::ClockJumpFollower => {
                let jump = self.clock_jump_ms.to_string();
                set_broker_config(&mut self.router, &addr, target, CLOCK_OFFSET, Some(&jump)).await?;
                Applied::Config(target, CLOCK_OFFSET)
            }
            Fault::IsolateLeader | Fault::IsolateFollower => {
                self.links(&[target], false)?;
                Applied::Isolated(vec![target])
            }
            Fault::RegionLatency => {
                let ns = self.cluster.namespaces().context("region-latency needs network namespaces")?;
                if self.latency_faults == 0 {
                    ns.set_extra_delay(Duration::from_millis(self.latency_ms))?;
                }
                self.latency_faults += 1;
                let base = ns.latency().map(|l| l.one_way().as_secs_f64() * 1000.0).unwrap_or_default();
                let what = format!(
                    "region-latency +{} ms each way ({} ms each way in all)",
                    self.latency_ms,
                    base + self.latency_ms as f64
                );
                return Ok((what, Applied::Latency));
            }
            Fault::IsolateRegion => {
                let region = self.region_of(leader);
                let members: Vec<u16> =
                    self.cluster.ids().into_iter().filter(|b| self.region_of(*b) == region).collect();
                self.links(&members, false)?;
                self.client_link(region, false)?;
                let what = format!("isolate-region r{region} (brokers {members:?}, leader {leader}, and its clients)");
                return Ok((what, Applied::IsolatedRegion(region, members)));
            }
        };
        Ok((what, applied))
    }

    /// Takes the links of `brokers` down, or brings them back up once no other fault in
    /// force holds them down.
    fn links(&mut self, brokers: &[u16], up: bool) -> Result<()> {
        let Some(ns) = self.cluster.namespaces() else {
            bail!("network faults need network namespaces");
        };
        for b in brokers {
            if up && count(&mut self.links_down, *b, false) <= 1 {
                ns.set_link(*b, true)?;
            } else if !up && !self.links_down.contains_key(b) {
                ns.set_link(*b, false)?;
            }
            if !up {
                count(&mut self.links_down, *b, true);
            }
        }
        Ok(())
    }

    /// The same for region `r`'s client namespace (when the workload's clients run there).
    fn client_link(&mut self, r: u16, up: bool) -> Result<()> {
        let Some(ns) = self.cluster.namespaces() else {
            bail!("network faults need network namespaces");
        };
        if up && count(&mut self.clients_down, r, false) <= 1 {
            ns.set_client_link(r, true)?;
        } else if !up {
            if !self.clients_down.contains_key(&r) {
                ns.set_client_link(r, false)?;
            }
            count(&mut self.clients_down, r, true);
        }
        Ok(())
    }

    async fn heal(&mut self, applied: Applied) -> Result<()> {
        match applied {
            Applied::Killed(brokers) => {
                for b in brokers {
                    // Another fault in force may have started it again already, or cut it off.
                    if !self.cluster.running(b) {
                        self.cluster.start(b).await?;
                    }
                    if !self.links_down.contains_key(&b) {
                        self.cluster.wait_listening(b, Duration::from_secs(30)).await?;
                    }
                }
            }
            Applied::Paused(brokers) => {
                for b in brokers {
                    if count(&mut self.paused, b, false) <= 1 && self.cluster.running(b) {
                        self.cluster.resume(b)?;
                    }
                }
            }
            Applied::Config(b, key) => {
                let addr = self.cluster.address(b);
                set_broker_config(&mut self.router, &addr, b, key, None).await?;
            }
            Applied::FailingDisk(b, key) => {
                self.check_exits().await;
                if self.cluster.running(b) {
                    let addr = self.cluster.address(b);
                    // It may die between the look and the call; then it is started below.
                    let _ = set_broker_config(&mut self.router, &addr, b, key, None).await;
                    self.check_exits().await;
                }
                if !self.cluster.running(b) {
                    self.cluster.start(b).await?;
                    if !self.links_down.contains_key(&b) {
                        self.cluster.wait_listening(b, Duration::from_secs(30)).await?;
                    }
                }
                self.may_exit.retain(|x| *x != b);
            }
            Applied::Isolated(brokers) => self.links(&brokers, true)?,
            Applied::IsolatedRegion(region, brokers) => {
                self.links(&brokers, true)?;
                self.client_link(region, true)?;
            }
            Applied::Latency => {
                self.latency_faults = self.latency_faults.saturating_sub(1);
                if self.latency_faults == 0 {
                    let ns = self.cluster.namespaces().context("region-latency needs network namespaces")?;
                    ns.set_extra_delay(Duration::ZERO)?;
                }
            }
        }
        Ok(())
    }

    /// Waits until the workload runs: its topic exists and every partition has a leader.
    /// `None` when the workload ended first or the run was interrupted.
    async fn wait_running<T>(&mut self, partitions: i32, workload: &JoinHandle<T>) -> Result<Option<Instant>> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if workload.is_finished() || self.interrupted() {
                return Ok(None);
            }
            if let Ok(parts) = self.router.replicas().await {
                if parts.len() >= partitions as usize && parts.iter().all(|(leader, _)| *leader >= 0) {
                    return Ok(Some(Instant::now()));
                }
            }
            if Instant::now() > deadline {
                bail!("the workload's topic has no leader for every partition after 120 s");
            }
            self.hold(Duration::from_millis(200)).await;
        }
    }

    /// Applies `fault`; a connection to a broker that just restarted may be stale, so a
    /// failure is tried again twice, a second apart.
    async fn apply_retrying<T>(&mut self, fault: Fault, workload: &JoinHandle<T>) -> Result<(String, Applied)> {
        let mut outcome = self.apply(fault).await;
        for _ in 0..2 {
            if outcome.is_ok() || workload.is_finished() || self.interrupted() {
                break;
            }
            self.hold(Duration::from_secs(1)).await;
            outcome = self.apply(fault).await;
        }
        outcome
    }

    /// Heals a fault in force and records its window on the timeline from `t0`.
    async fn heal_one(&mut self, f: InForce, t0: Instant, windows: &mut Vec<FaultWindow>) -> Result<()> {
        let cut = match &f.applied {
            Applied::Isolated(brokers) | Applied::IsolatedRegion(_, brokers) => Some(brokers.clone()),
            _ => None,
        };
        // Taken before the heal: a write that commits only once the region is back does
        // not count.
        let metadata_write_ms = match f.metadata {
            Some(probe) if probe.is_finished() => probe.await.ok().flatten(),
            Some(probe) => {
                probe.abort();
                None
            }
            None => None,
        };
        let healed = self.heal(f.applied).await;
        let end = Instant::now();
        if let Some(cut) = cut {
            // Watched while the run goes on; collected with the history.
            let watch =
                recovery::watch(self.cluster.bootstrap(), self.router.topic().to_string(), cut, end, self.until);
            self.recoveries.push((windows.len(), tokio::spawn(watch)));
        }
        windows.push(FaultWindow {
            fault: f.what.clone(),
            start_ms: f.since.saturating_duration_since(t0).as_millis() as u64,
            end_ms: end.saturating_duration_since(t0).as_millis() as u64,
            recovery: None,
            metadata_write_ms,
        });
        healed.with_context(|| format!("healing {}", f.what))?;
        println!("{:>7.1}s {} healed", end.saturating_duration_since(t0).as_secs_f64(), f.what);
        Ok(())
    }

    /// Restarts brokers that exited by themselves; an exit no fault explains is recorded.
    async fn check_exits(&mut self) {
        for (b, status) in self.cluster.exited() {
            if !self.may_exit.contains(&b) {
                let msg = format!("broker {b} exited on its own ({status}); started again");
                eprintln!("runnel chaos: {msg}");
                self.unexpected_exits.push(msg);
                let _ = self.cluster.start(b).await;
            }
        }
    }

    /// Holds for `d`, looking for brokers that died by themselves meanwhile; returns early
    /// when the run is interrupted.
    async fn hold(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until && !self.interrupted() {
            self.check_exits().await;
            tokio::time::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(200))).await;
        }
    }
}

pub async fn main(a: ChaosArgs) -> Result<()> {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    let mut rng = Rng(seed);
    let cfg = a.workload.config("");
    let schedule = match (&a.schedule, a.drill) {
        (Some(s), _) => parse_schedule(s)?,
        (None, Some(drill)) => parse_schedule(&drill.schedule(cfg.duration))?,
        (None, None) => draw_schedule(&a, &mut rng, cfg.duration),
    };
    let by_region = [Fault::IsolateRegion, Fault::RegionLatency];
    if schedule.iter().any(|p| by_region.contains(&p.fault)) && a.net.regions < 2 {
        bail!("isolate-region and region-latency need --regions 2 or more");
    }
    if a.net.shaped() && a.net.regions < 2 {
        bail!("--inter-region-latency, --inter-region-jitter and --inter-region-bandwidth need --regions 2 or more");
    }
    let planned = schedule
        .iter()
        .map(|p| format!("{:.1}s {} {:.1}s", p.start.as_secs_f64(), p.fault.name(), p.hold.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    // What needs network namespaces, for the message when they cannot be made.
    let mut needs_netns: Vec<String> =
        schedule.iter().filter(|p| p.fault.needs_namespaces()).map(|p| p.fault.name()).collect();
    needs_netns.sort();
    needs_netns.dedup();
    needs_netns.extend(a.net.shaped().then(|| "--inter-region-*".to_string()));
    needs_netns.extend(a.net.netns.then(|| "--netns".to_string()));
    if a.attach {
        if !needs_netns.is_empty() {
            bail!(
                "--attach: {} need(s) network namespaces, of a cluster that runnel chaos starts itself",
                needs_netns.join(", ")
            );
        }
        let mut router = Router::new(&a.workload.bootstrap, "", "runnel-chaos", Duration::from_secs(3));
        wait_registered(&mut router, a.brokers, Duration::from_secs(60))
            .await
            .context("--attach: waiting for --brokers brokers")?;
        let cluster = Attached::new(router.brokers()).context("--attach")?;
        println!(
            "runnel chaos: seed {seed}, attached to {} brokers, {} faults planned: {planned}",
            a.brokers,
            schedule.len()
        );
        return run(cluster, &a, schedule, rng).await;
    }
    let network = if needs_netns.is_empty() {
        Network::Loopback
    } else {
        crate::netns::check_plan(a.brokers, a.net.plan_regions())?;
        if let Some(why) = crate::netns::unavailable() {
            bail!(
                "{} need(s) network namespaces, which need root, iproute2 and iptables-legacy; here: {why}. runnel chaos does not run a different experiment without them",
                needs_netns.join(", ")
            );
        }
        let latency_fault = schedule.iter().any(|p| p.fault == Fault::RegionLatency);
        let latency = (a.net.shaped() || latency_fault).then(|| a.net.latency());
        let n = Namespaces::create(a.brokers, a.net.regions, latency)
            .with_context(|| format!("{}: making the network namespaces", needs_netns.join(", ")))?;
        Network::Namespaces(n)
    };
    let (data_dir, temporary) = match &a.data_dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("runnel-chaos-{}", std::process::id())), true),
    };
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let logs = a.logs.clone().unwrap_or_else(|| data_dir.clone());
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let locations = locations(a.brokers, a.net.regions, "chaos");
    let mut cluster = LocalCluster::new(a.port, a.brokers, &data_dir, a.settings.clone(), locations, network)?;
    cluster.set_controller_voters(a.net.controller_voters)?;
    cluster.log_to(&logs);
    if let Some(program) = &a.broker_command {
        cluster.use_broker_command(std::fs::canonicalize(program).with_context(|| format!("{}", program.display()))?);
    }
    println!("runnel chaos: seed {seed}, {} brokers, {} faults planned: {planned}", a.brokers, schedule.len());
    cluster.start_all().await?;
    if let Some(summary) = cluster.regions_summary() {
        println!("{summary}");
    }
    let result = run(cluster, &a, schedule, rng).await;
    if temporary && result.is_ok() {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    result
}
