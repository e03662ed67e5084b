//! `runnel chaos`: starts a local cluster, runs the verify workload against it, injects
//! faults on a schedule (given, or drawn from a seed), heals every one of them, then checks
//! the history and draws the availability chart.
//!
//! Faults never overlap: each one is applied, held, healed, and the cluster gets a pause
//! before the next. Every run is bounded: the workload's duration, then its final read.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::{DescribeConfigsRequest, FindCoordinatorRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use runnel_verify::router::Router;
use runnel_verify::{workload, FaultWindow};

use crate::attach::Attached;
use crate::local::{Brokers, LocalCluster, Namespaces, Network};
use crate::verify::VerifyArgs;

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
    /// Take down the links of every broker in the region of a partition leader.
    IsolateRegion,
    /// Add --latency-ms each way to all traffic between brokers of different regions
    /// (through a delaying proxy between them).
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
        matches!(self, Fault::IsolateLeader | Fault::IsolateFollower | Fault::IsolateRegion)
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
    /// Put broker i in region r(i mod REGIONS) (`broker.location=region=..,zone=..`): the
    /// placement spreads replicas over regions, and isolate-region takes one down whole.
    #[arg(long, default_value_t = 0)]
    regions: u16,
    /// Faults to draw from, in random order from the seed.
    #[arg(long, value_enum, value_delimiter = ',',
          default_values_t = [Fault::KillLeader, Fault::KillFollower, Fault::PauseLeader, Fault::PauseFollower])]
    faults: Vec<Fault>,
    /// Instead of drawing: `START:FAULT:SECONDS,...`, e.g. `10:kill-leader:3,25:pause-follower:5`.
    #[arg(long)]
    schedule: Option<String>,
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
    /// What region-latency adds to each direction between regions, in milliseconds.
    #[arg(long, default_value_t = 50)]
    latency_ms: u64,
    /// Run every broker in its own network namespace even if no fault needs it.
    #[arg(long)]
    netns: bool,
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

/// Sets (`Some`) or removes (`None`) a dynamic setting of broker `id`, asking that broker.
async fn set_broker_config(router: &mut Router, addr: &str, id: u16, key: &str, value: Option<&str>) -> Result<()> {
    let op = if value.is_some() { 0 } else { 1 };
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(4)
        .with_resource_name(StrBytes::from_string(id.to_string()))
        .with_configs(vec![AlterableConfig::default()
            .with_name(StrBytes::from_string(key.to_string()))
            .with_config_operation(op)
            .with_value(value.map(|v| StrBytes::from_string(v.to_string())))])]);
    let resp = router.call_at(addr, &req, 1).await?;
    match resp.responses.first().map(|r| r.error_code) {
        Some(0) => Ok(()),
        code => bail!("setting {key} on broker {id}: error code {code:?}"),
    }
}

/// Whether broker `id` has the setting `key`: a disk fault needs Runnel's fault hooks
/// (Apache Kafka would accept `fault.disk.*` as a custom setting and do nothing with it).
async fn has_broker_setting(router: &mut Router, addr: &str, id: u16, key: &str) -> Result<bool> {
    let req = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(4)
        .with_resource_name(StrBytes::from_string(id.to_string()))
        .with_configuration_keys(Some(vec![StrBytes::from_string(key.to_string())]))]);
    let resp = router.call_at(addr, &req, 1).await?;
    Ok(resp.results.iter().any(|r| r.error_code == 0 && r.configs.iter().any(|c| c.name.as_str() == key)))
}

/// The brokers a fault hits and how to heal it.
enum Applied {
    Killed(Vec<u16>),
    Paused(Vec<u16>),
    Config(u16, &'static str),
    /// The disk fails: the broker stops by itself, or is healed through the setting.
    FailingDisk(u16, &'static str),
    Isolated(Vec<u16>),
    Latency,
}

struct Chaos<C: Brokers> {
    cluster: C,
    router: Router,
    rng: Rng,
    regions: u16,
    disk_delay_ms: u64,
    clock_jump_ms: i64,
    latency_ms: u64,
    /// The delay of every proxy between regions (none without region-latency).
    cross_region_delay: Option<Arc<AtomicU64>>,
    /// Brokers whose exit is the fault's expected effect.
    may_exit: Vec<u16>,
    /// Brokers that exited on their own, outside any fault that explains it.
    unexpected_exits: Vec<String>,
    /// Set by SIGINT or SIGTERM: heal the fault in force and stop.
    interrupt: Arc<AtomicBool>,
    /// (FindCoordinator key type, key) of the coordinators the *-coordinator faults hit,
    /// one after the other.
    coordinator_keys: Vec<(i8, String)>,
    /// *-coordinator faults so far.
    coordinator_faults: usize,
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
            Fault::PauseLeader | Fault::PauseFollower | Fault::PauseCoordinator => {
                self.cluster.pause(target)?;
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
                let delay = self.cross_region_delay.as_ref().context("no proxies between regions")?;
                delay.store(self.latency_ms, Ordering::Relaxed);
                let what = format!("region-latency {} ms each way", self.latency_ms);
                return Ok((what, Applied::Latency));
            }
            Fault::IsolateRegion => {
                let region = self.region_of(leader);
                let members: Vec<u16> =
                    self.cluster.ids().into_iter().filter(|b| self.region_of(*b) == region).collect();
                self.links(&members, false)?;
                let what = format!("isolate-region r{region} (brokers {members:?}, leader {leader})");
                return Ok((what, Applied::Isolated(members)));
            }
        };
        Ok((what, applied))
    }

    fn links(&self, brokers: &[u16], up: bool) -> Result<()> {
        let Some(ns) = self.cluster.namespaces() else {
            bail!("network faults need network namespaces");
        };
        for b in brokers {
            ns.set_link(*b, up)?;
        }
        Ok(())
    }

    async fn heal(&mut self, applied: Applied) -> Result<()> {
        match applied {
            Applied::Killed(brokers) => {
                for b in brokers {
                    self.cluster.start(b).await?;
                    self.cluster.wait_listening(b, Duration::from_secs(30)).await?;
                }
            }
            Applied::Paused(brokers) => {
                for b in brokers {
                    self.cluster.resume(b)?;
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
                    self.cluster.wait_listening(b, Duration::from_secs(30)).await?;
                }
                self.may_exit.retain(|x| *x != b);
            }
            Applied::Isolated(brokers) => self.links(&brokers, true)?,
            Applied::Latency => {
                if let Some(d) = &self.cross_region_delay {
                    d.store(0, Ordering::Relaxed);
                }
            }
        }
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

fn locations(brokers: u16, regions: u16) -> Vec<String> {
    (0..brokers)
        .map(|i| {
            if regions == 0 {
                format!("zone=chaos-{i}")
            } else {
                let r = i % regions;
                format!("region=r{r},zone=r{r}-z{i},rack=r{r}-z{i}-a,host=h{i}")
            }
        })
        .collect()
}

pub async fn main(a: ChaosArgs) -> Result<()> {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    let mut rng = Rng(seed);
    let cfg = a.workload.config("");
    let schedule = match &a.schedule {
        Some(s) => parse_schedule(s)?,
        None => draw_schedule(&a, &mut rng, cfg.duration),
    };
    let by_region = [Fault::IsolateRegion, Fault::RegionLatency];
    if schedule.iter().any(|p| by_region.contains(&p.fault)) && a.regions < 2 {
        bail!("isolate-region and region-latency need --regions 2 or more");
    }
    let planned = schedule
        .iter()
        .map(|p| format!("{:.1}s {} {:.1}s", p.start.as_secs_f64(), p.fault.name(), p.hold.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    if a.attach {
        if schedule.iter().any(|p| p.fault.needs_namespaces() || p.fault == Fault::RegionLatency) {
            bail!("--attach: network faults need a cluster that runnel chaos starts itself");
        }
        let mut router = Router::new(&a.workload.bootstrap, "", "runnel-chaos", Duration::from_secs(3));
        wait_registered(&mut router, a.brokers).await.context("--attach: waiting for --brokers brokers")?;
        let cluster = Attached::new(router.brokers()).context("--attach")?;
        println!(
            "runnel chaos: seed {seed}, attached to {} brokers, {} faults planned: {planned}",
            a.brokers,
            schedule.len()
        );
        return run(cluster, &a, schedule, rng, None).await;
    }
    let netns = a.netns || schedule.iter().any(|p| p.fault.needs_namespaces());
    let network = if netns { Network::Namespaces(Namespaces::create(a.brokers)?) } else { Network::Loopback };
    let (data_dir, temporary) = match &a.data_dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("runnel-chaos-{}", std::process::id())), true),
    };
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let logs = a.logs.clone().unwrap_or_else(|| data_dir.clone());
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let mut cluster =
        LocalCluster::new(a.port, a.brokers, &data_dir, a.settings.clone(), locations(a.brokers, a.regions), network)?;
    cluster.log_to(&logs);
    let cross_region_delay = if schedule.iter().any(|p| p.fault == Fault::RegionLatency) {
        Some(proxy_regions(&mut cluster, a.regions).await?)
    } else {
        None
    };
    println!("runnel chaos: seed {seed}, {} brokers, {} faults planned: {planned}", a.brokers, schedule.len());
    cluster.start_all().await?;
    let result = run(cluster, &a, schedule, rng, cross_region_delay).await;
    if temporary && result.is_ok() {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    result
}

/// Puts a delaying proxy on every path from a broker to a peer in another region; returns
/// the one delay they all follow (0 until region-latency sets it).
async fn proxy_regions(cluster: &mut LocalCluster, regions: u16) -> Result<Arc<AtomicU64>> {
    let delay = Arc::new(AtomicU64::new(0));
    let n = cluster.brokers();
    for i in 0..n {
        let mut dial = Vec::new();
        for j in (0..n).filter(|j| j % regions != i % regions) {
            let listen = format!("{}:0", cluster.host_side());
            let addr = crate::proxy::start(&listen, cluster.raft_address(j), delay.clone()).await?;
            dial.push(format!("{j}@{addr}"));
        }
        if !dial.is_empty() {
            cluster.set_own(i, format!("fault.raft.dial={}", dial.join(",")));
        }
    }
    Ok(delay)
}

async fn run<C: Brokers>(
    cluster: C,
    a: &ChaosArgs,
    schedule: Vec<Planned>,
    rng: Rng,
    cross_region_delay: Option<Arc<AtomicU64>>,
) -> Result<()> {
    let brokers = cluster.ids();
    for i in &brokers {
        cluster.wait_listening(*i, Duration::from_secs(30)).await?;
    }
    let bootstrap = cluster.bootstrap();
    let cfg = a.workload.config(&bootstrap);
    let mut router = Router::new(&bootstrap, &cfg.topic, "runnel-chaos", Duration::from_secs(3));
    wait_registered(&mut router, brokers.len() as u16).await?;
    // The first SIGINT or SIGTERM heals the fault in force and stops the run; a second one
    // ends the process at once.
    let interrupt = Arc::new(AtomicBool::new(false));
    let on_signal = interrupt.clone();
    tokio::spawn(async move {
        crate::stop_signal().await;
        eprintln!("runnel chaos: interrupted; healing the fault in force (again to quit at once)");
        on_signal.store(true, Ordering::Relaxed);
        crate::stop_signal().await;
        std::process::exit(130);
    });
    let coordinator_keys = if cfg.transactional {
        let copier = format!("{}-copier", cfg.topic);
        let producers = (0..cfg.producers).map(|i| (1, format!("{}-txn-{i}", cfg.topic)));
        [(1, copier.clone()), (0, copier)].into_iter().chain(producers).collect()
    } else {
        vec![(0, cfg.group.clone())]
    };
    let t0 = Instant::now();
    let workload = tokio::spawn(workload::run(cfg, t0));
    let mut chaos = Chaos {
        cluster,
        router,
        rng,
        regions: a.regions,
        disk_delay_ms: a.disk_delay_ms,
        clock_jump_ms: a.clock_jump_ms,
        latency_ms: a.latency_ms,
        cross_region_delay,
        may_exit: Vec::new(),
        unexpected_exits: Vec::new(),
        interrupt,
        coordinator_keys,
        coordinator_faults: 0,
    };
    let mut windows = Vec::new();
    let mut skipped = Vec::new();
    for p in &schedule {
        let due = t0 + p.start;
        chaos.hold(due.saturating_duration_since(Instant::now())).await;
        if workload.is_finished() || chaos.interrupted() {
            break;
        }
        let started = Instant::now();
        // A connection to a broker that just restarted may be stale: try again twice.
        let mut outcome = chaos.apply(p.fault).await;
        for _ in 0..2 {
            if outcome.is_ok() || workload.is_finished() || chaos.interrupted() {
                break;
            }
            chaos.hold(Duration::from_secs(1)).await;
            outcome = chaos.apply(p.fault).await;
        }
        match outcome {
            Ok((what, applied)) => {
                println!("{:>7.1}s {what} for {:.1}s", started.duration_since(t0).as_secs_f64(), p.hold.as_secs_f64());
                chaos.hold(p.hold).await;
                let healed = chaos.heal(applied).await;
                windows.push(FaultWindow {
                    fault: what.clone(),
                    start_ms: started.duration_since(t0).as_millis() as u64,
                    end_ms: t0.elapsed().as_millis() as u64,
                });
                healed.with_context(|| format!("healing {what}"))?;
            }
            Err(e) => {
                println!("{:>7.1}s {} skipped: {e:#}", started.duration_since(t0).as_secs_f64(), p.fault.name());
                skipped.push(p.fault.name());
            }
        }
    }
    // Keep restarting brokers that die on their own until the workload (and its final
    // read) is over.
    while !workload.is_finished() && !chaos.interrupted() {
        chaos.hold(Duration::from_millis(200)).await;
    }
    if chaos.interrupted() {
        workload.abort();
        chaos.cluster.stop().await;
        bail!("interrupted after {} faults, each healed; the history was not checked", windows.len());
    }
    let mut history = workload.await.context("workload task")??;
    history.faults = windows;
    chaos.cluster.stop().await;
    let title = format!("runnel chaos: {} brokers, {} faults", brokers.len(), history.faults.len());
    println!("faults injected: {} ({} skipped)", history.faults.len(), skipped.len());
    let checked = crate::verify::report(&history, &a.workload, &title);
    if !chaos.unexpected_exits.is_empty() {
        for e in &chaos.unexpected_exits {
            println!("unexpected exit: {e}");
        }
        checked?;
        bail!("{} broker(s) exited on their own", chaos.unexpected_exits.len());
    }
    checked
}

/// Waits until Metadata lists every broker.
async fn wait_registered(router: &mut Router, brokers: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if router.refresh().await.is_ok() && router.broker_count() == brokers as usize {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the cluster did not register {brokers} brokers within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
