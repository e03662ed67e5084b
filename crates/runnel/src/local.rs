//! A local cluster of broker processes, for `runnel dev --brokers N` and `runnel chaos`:
//! one `runnel dev` process per broker, every broker a voter of the metadata quorum, and
//! per broker the handles a fault injector needs (kill -9, SIGSTOP/SIGCONT, start again).
//!
//! With network namespaces ([`crate::netns`]) each broker runs in a namespace of its own,
//! joined to the host by a veth pair on one bridge, so that a link taken down cuts the
//! broker off from its peers and from clients alike, and traffic between regions can be
//! delayed. Namespaces need root and iproute2.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::process::{Child, Command};

pub use crate::netns::Namespaces;

/// Where each broker lives on the network.
pub enum Network {
    /// Every broker on 127.0.0.1, on its own ports.
    Loopback,
    /// Every broker in its own namespace on one bridge.
    Namespaces(Namespaces),
}

/// Each broker's `broker.location`: with `regions`, broker i in region r(i mod regions)
/// (`region=r..,zone=..,rack=..,host=..`, a zone, rack and host of its own); without,
/// `zone={zone_prefix}-i`.
/// The name of region `r` in the locations of [`locations`].
pub fn region_name(r: u16) -> String {
    format!("r{r}")
}

pub fn locations(brokers: u16, regions: u16, zone_prefix: &str) -> Vec<String> {
    (0..brokers)
        .map(|i| {
            if regions == 0 {
                format!("zone={zone_prefix}-{i}")
            } else {
                let r = region_name(i % regions);
                format!("region={r},zone={r}-z{i},rack={r}-z{i}-a,host=h{i}")
            }
        })
        .collect()
}

/// Voters of a local cluster's metadata quorum when not given: every broker up to 3, then
/// 3 (a fourth voter would not let the quorum lose a second one), and 5 from 5 brokers on.
pub fn default_voters(brokers: u16) -> u16 {
    match brokers {
        0..=3 => brokers,
        4 => 3,
        _ => 5,
    }
}

pub struct LocalCluster {
    exe: PathBuf,
    port: u16,
    data_dir: PathBuf,
    overrides: Vec<String>,
    /// broker → `broker.location` (`region=...,zone=...`)
    locations: Vec<String>,
    network: Network,
    /// Brokers 0..voters are the metadata quorum's voters; the others are observers.
    voters: u16,
    children: Vec<Option<Child>>,
    /// Where each broker's output goes (inherited when `None`).
    log_dir: Option<PathBuf>,
    /// The client listener's security protocol: PLAINTEXT, or SSL (`runnel dev --tls`).
    protocol: &'static str,
    /// Another broker program to start instead of `runnel dev` (Apache Kafka, say).
    broker_command: Option<PathBuf>,
}

impl LocalCluster {
    /// Plans (does not start) `brokers` brokers: client ports `port..port+N`, Raft on
    /// `port+1000+i`, data under `data_dir/broker-i`.
    pub fn new(
        port: u16,
        brokers: u16,
        data_dir: &Path,
        overrides: Vec<String>,
        locations: Vec<String>,
        network: Network,
    ) -> Result<LocalCluster> {
        let exe = std::env::current_exe().context("locating the runnel binary")?;
        if port.checked_add(1000 + brokers).is_none() {
            bail!("port {port} out of range for {brokers} brokers");
        }
        Ok(LocalCluster {
            exe,
            port,
            data_dir: data_dir.to_path_buf(),
            overrides,
            locations,
            network,
            voters: default_voters(brokers),
            children: (0..brokers).map(|_| None).collect(),
            log_dir: None,
            protocol: "PLAINTEXT",
            broker_command: None,
        })
    }

    /// Makes brokers 0..n the metadata quorum's voters (None: [`default_voters`]). Broker
    /// i is in region i mod regions, so the voters are one per region first.
    pub fn set_controller_voters(&mut self, n: Option<u16>) -> Result<()> {
        let brokers = self.brokers();
        let n = n.unwrap_or_else(|| default_voters(brokers));
        if n == 0 || n > brokers {
            bail!("--controller-voters {n}: expected 1 to {brokers} (the brokers)");
        }
        self.voters = n;
        Ok(())
    }

    /// Brokers listen with TLS (the settings for it come as overrides).
    pub fn use_tls(&mut self) {
        self.protocol = "SSL";
    }

    /// Starts each broker as `program` (no arguments), which must exec the broker (keeping
    /// the pid that faults signal) after reading where and what it is from its environment:
    /// `RUNNEL_BROKER_ID`, `RUNNEL_BROKER_HOST` and `RUNNEL_BROKER_PORT` (the client
    /// listener), `RUNNEL_BROKER_CONTROLLER_PORT` (port + 1000 + id), `RUNNEL_BROKER_REGION`
    /// and `RUNNEL_BROKER_LOCATION`, `RUNNEL_BROKER_DATA_DIR`, `RUNNEL_BROKERS` (how many)
    /// and `RUNNEL_CONTROLLER_VOTERS` (`id@host:controller-port,...` of the metadata
    /// quorum's voters; a broker not among them is an observer), and
    /// the `--set` settings as `key=value` lines in `RUNNEL_BROKER_SETTINGS`.
    /// `bench/kafka-broker.sh` starts Apache Kafka this way (docs/chaos.md).
    pub fn use_broker_command(&mut self, program: PathBuf) {
        self.broker_command = Some(program);
    }

    /// Sends each broker's stdout and stderr to `dir/broker-i.log` instead of ours.
    pub fn log_to(&mut self, dir: &Path) {
        self.log_dir = Some(dir.to_path_buf());
    }

    pub fn brokers(&self) -> u16 {
        self.children.len() as u16
    }

    fn host(&self, i: u16) -> String {
        match &self.network {
            Network::Loopback => "127.0.0.1".to_string(),
            Network::Namespaces(n) => n.address(i),
        }
    }

    /// Per region: its brokers with their addresses and namespaces, and its namespace for
    /// clients, with how to run a client there (`None` on loopback).
    pub fn regions_summary(&self) -> Option<String> {
        let Network::Namespaces(n) = &self.network else { return None };
        let mut s = String::new();
        let between = match (n.regions(), n.latency()) {
            (1, _) => String::new(),
            (_, Some(l)) => format!(", {} between regions", l.describe()),
            (_, None) => ", no latency between regions".to_string(),
        };
        let _ = writeln!(
            s,
            "{} brokers in {} region(s), in network namespaces on bridge {} (the host is 10.231.{}.1){between}",
            self.brokers(),
            n.regions(),
            n.bridge(),
            n.tag()
        );
        for r in 0..n.regions() {
            let ids: Vec<u16> = (0..self.brokers()).filter(|i| n.region_of(*i) == r).collect();
            let members: Vec<String> = ids
                .iter()
                .map(|i| format!("broker {i} at {} (namespace {})", self.address(*i), n.namespace(*i)))
                .collect();
            let _ = writeln!(s, "region r{r} ({}): {}", n.block(r), members.join(", "));
            let near = ids.first().map(|i| self.address(*i)).unwrap_or_else(|| self.bootstrap());
            let ns = n.client_namespace(r);
            let _ = writeln!(
                s,
                "  clients: ip netns exec {ns} <command>   (address {}; e.g. ip netns exec {ns} kcat -b {near} -L)",
                n.client_address(r)
            );
        }
        let _ = write!(s, "bootstrap: {}", self.bootstrap());
        Some(s)
    }

    /// Broker `i`'s Raft address.
    fn raft_address(&self, i: u16) -> String {
        format!("{}:{}", self.host(i), self.port + 1000 + i)
    }

    /// `runnel dev`'s arguments for broker `i`. A broker that is not a voter (an observer)
    /// lists its Raft address as its CONTROLLER listener.
    fn runnel_args(&self, cmd: &mut Command, i: u16, voters: &[String], location: &str) {
        let n = self.brokers();
        let mut listeners = format!("{}://{}", self.protocol, self.address(i));
        if i >= self.voters {
            listeners.push_str(&format!(",CONTROLLER://{}", self.raft_address(i)));
        }
        cmd.arg("dev")
            .arg("--port")
            .arg((self.port + i).to_string())
            .arg("--data-dir")
            .arg(self.data_dir.join(format!("broker-{i}")))
            .args(["--set", &format!("listeners={listeners}")])
            .args(["--set", &format!("node.id={i}")])
            .args(["--set", &format!("controller.quorum.voters={}", voters.join(","))])
            .args(["--set", &format!("default.replication.factor={}", n.min(3))])
            .args(["--set", &format!("offsets.topic.replication.factor={}", n.min(3))])
            .args(["--set", &format!("broker.location={location}")]);
        for o in &self.overrides {
            match o.strip_prefix("admin.listeners=") {
                Some(admin) => cmd.args(["--set", &format!("admin.listeners={}", admin_listeners_of(admin, i))]),
                None => cmd.args(["--set", o]),
            };
        }
    }

    fn command(&self, i: u16) -> Result<Command> {
        let n = self.brokers();
        let voters: Vec<String> = (0..self.voters).map(|j| format!("{j}@{}", self.raft_address(j))).collect();
        // RUNNEL_BROKER_WRAPPER names a program each broker is started through (it gets the
        // broker's command line and should exec it, keeping the pid the faults signal): a
        // heap profiler for one broker, say. docs/chaos.md.
        let mut program: Vec<std::ffi::OsString> = std::env::var_os("RUNNEL_BROKER_WRAPPER").into_iter().collect();
        program.push(self.broker_command.clone().unwrap_or_else(|| self.exe.clone()).into_os_string());
        let mut cmd = match &self.network {
            Network::Loopback => {
                let mut c = Command::new(&program[0]);
                c.args(&program[1..]);
                c
            }
            Network::Namespaces(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.namespace(i)]).args(&program);
                c
            }
        };
        let location = self.locations.get(i as usize).cloned().unwrap_or_else(|| format!("zone=dev-{i}"));
        if self.broker_command.is_some() {
            let region = location.split(',').find_map(|l| l.strip_prefix("region=")).unwrap_or("");
            cmd.env("RUNNEL_BROKER_ID", i.to_string())
                .env("RUNNEL_BROKER_HOST", self.host(i))
                .env("RUNNEL_BROKER_PORT", (self.port + i).to_string())
                .env("RUNNEL_BROKER_CONTROLLER_PORT", (self.port + 1000 + i).to_string())
                .env("RUNNEL_BROKER_REGION", region)
                .env("RUNNEL_BROKER_LOCATION", &location)
                .env("RUNNEL_BROKER_DATA_DIR", self.data_dir.join(format!("broker-{i}")))
                .env("RUNNEL_BROKERS", n.to_string())
                .env("RUNNEL_CONTROLLER_VOTERS", voters.join(","))
                .env("RUNNEL_BROKER_SETTINGS", self.overrides.join("\n"));
        } else {
            self.runnel_args(&mut cmd, i, &voters, &location);
        }
        cmd.stdin(Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only calls prctl,
        // which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                // A broker dies with the tool that started it, even when that is killed.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        if let Some(dir) = &self.log_dir {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(format!("broker-{i}.log")))
                .context("opening a broker log")?;
            cmd.stdout(log.try_clone()?).stderr(log);
        }
        Ok(cmd)
    }

    pub async fn start_all(&mut self) -> Result<()> {
        for i in 0..self.brokers() {
            self.start(i).await?;
        }
        Ok(())
    }
}

/// What `runnel chaos` needs of a cluster's brokers, each named by its broker id: a cluster
/// it started itself ([`LocalCluster`]) or one it attached to ([`crate::attach::Attached`]).
pub(crate) trait Brokers {
    /// Every broker's id.
    fn ids(&self) -> Vec<u16>;

    /// Broker `id`'s client address.
    fn address(&self, id: u16) -> String;

    /// The network namespaces the brokers run in, if they do.
    fn namespaces(&self) -> Option<&Namespaces>;

    /// The process of broker `id`, while it runs.
    fn pid(&self, id: u16) -> Option<u32>;

    /// kill -9; returns once the process is gone.
    async fn kill(&mut self, id: u16) -> Result<()>;

    /// SIGTERM, a clean stop; returns once the process is gone. `Some` says what went
    /// wrong: it was still running `within` after the signal (then it is killed), or it
    /// exited with a failure.
    async fn terminate(&mut self, id: u16, within: Duration) -> Result<Option<String>>;

    /// Starts broker `id` again, after a kill, a stop or an exit.
    async fn start(&mut self, id: u16) -> Result<()>;

    fn running(&self, id: u16) -> bool;

    /// Brokers that exited by themselves since the last look (id and status).
    fn exited(&mut self) -> Vec<(u16, std::process::ExitStatus)>;

    /// The end of a run: what was started is stopped, what was found is left running.
    async fn stop(&mut self);

    fn signal(&self, id: u16, sig: i32) -> Result<()> {
        send_signal(self.pid(id).with_context(|| format!("broker {id} is not running"))?, sig)
    }

    /// SIGSTOP.
    fn pause(&self, id: u16) -> Result<()> {
        self.signal(id, libc::SIGSTOP)
    }

    /// SIGCONT.
    fn resume(&self, id: u16) -> Result<()> {
        self.signal(id, libc::SIGCONT)
    }

    /// Every broker's client address, comma-separated.
    fn bootstrap(&self) -> String {
        self.ids().into_iter().map(|i| self.address(i)).collect::<Vec<_>>().join(",")
    }

    /// Waits until broker `id` accepts connections.
    async fn wait_listening(&self, id: u16, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        let addr = self.address(id);
        loop {
            let attempt = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(&addr)).await;
            if let Ok(Ok(_)) = attempt {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("broker {id} is not listening on {addr} after {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Brokers for LocalCluster {
    fn ids(&self) -> Vec<u16> {
        (0..self.brokers()).collect()
    }

    fn address(&self, i: u16) -> String {
        format!("{}:{}", self.host(i), self.port + i)
    }

    fn namespaces(&self) -> Option<&Namespaces> {
        match &self.network {
            Network::Loopback => None,
            Network::Namespaces(n) => Some(n),
        }
    }

    /// kill -9, and reaps it.
    async fn kill(&mut self, i: u16) -> Result<()> {
        self.signal(i, libc::SIGKILL)?;
        if let Some(mut c) = self.children[i as usize].take() {
            let _ = c.wait().await;
        }
        Ok(())
    }

    /// SIGTERM, and reaps it.
    async fn terminate(&mut self, i: u16, within: Duration) -> Result<Option<String>> {
        self.signal(i, libc::SIGTERM)?;
        let Some(mut child) = self.children[i as usize].take() else { return Ok(None) };
        match tokio::time::timeout(within, child.wait()).await {
            Ok(status) => {
                let status = status.context("waiting for a broker to stop")?;
                Ok((!stopped_cleanly(status)).then(|| format!("broker {i} stopped with {status} after SIGTERM")))
            }
            Err(_) => {
                let _ = child.kill().await;
                Ok(Some(format!("broker {i} still ran {within:?} after SIGTERM; killed")))
            }
        }
    }

    fn pid(&self, i: u16) -> Option<u32> {
        self.children.get(i as usize)?.as_ref()?.id()
    }

    /// Starts broker `i` (again); prints its pid.
    async fn start(&mut self, i: u16) -> Result<()> {
        let child = self.command(i)?.kill_on_drop(true).spawn().context("starting a broker")?;
        println!("broker {i} pid {} listening on {}", child.id().unwrap_or(0), self.address(i));
        use std::io::Write;
        let _ = std::io::stdout().flush();
        self.children[i as usize] = Some(child);
        Ok(())
    }

    fn running(&self, i: u16) -> bool {
        self.children.get(i as usize).is_some_and(|c| c.is_some())
    }

    fn exited(&mut self) -> Vec<(u16, std::process::ExitStatus)> {
        let mut out = Vec::new();
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(child) = c {
                if let Ok(Some(status)) = child.try_wait() {
                    out.push((i as u16, status));
                    *c = None;
                }
            }
        }
        out
    }

    /// SIGCONT (a paused broker cannot stop), SIGTERM, and waits for every broker.
    async fn stop(&mut self) {
        for i in 0..self.brokers() {
            let _ = self.resume(i);
            let _ = self.signal(i, libc::SIGTERM);
        }
        for c in self.children.iter_mut() {
            if let Some(mut child) = c.take() {
                if tokio::time::timeout(Duration::from_secs(10), child.wait()).await.is_err() {
                    let _ = child.kill().await;
                }
            }
        }
    }
}

/// Whether a broker's exit after SIGTERM was a clean stop: status 0, or 143 (128 + SIGTERM),
/// which is how a JVM exits once its shutdown hooks ran (Apache Kafka's clean stop, under
/// `runnel chaos --broker-command`). Killed by the signal itself is not clean.
fn stopped_cleanly(status: std::process::ExitStatus) -> bool {
    status.success() || status.code() == Some(128 + libc::SIGTERM)
}

/// Sends `sig` to process `pid`.
pub(crate) fn send_signal(pid: u32, sig: i32) -> Result<()> {
    // SAFETY: kill only sends a signal.
    if unsafe { libc::kill(pid as i32, sig) } != 0 {
        bail!("signal {sig} to pid {pid}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // Children die with their handles (kill_on_drop); a paused one needs SIGCONT first
        // only to exit cleanly, SIGKILL works regardless. The namespaces are removed after
        // this, when `network` is dropped.
        for child in self.children.iter_mut().flatten() {
            let _ = child.start_kill();
        }
    }
}

/// `admin.listeners` for broker `i` of a local cluster: each entry's port plus `i`, as the
/// client ports are, so `--set admin.listeners=http://127.0.0.1:9644` gives broker 0 9644,
/// broker 1 9645, and so on.
fn admin_listeners_of(setting: &str, i: u16) -> String {
    let shift = |entry: &str| -> String {
        match entry.trim().rsplit_once(':') {
            Some((head, port)) => match port.trim_end_matches('/').parse::<u16>() {
                Ok(p) => format!("{head}:{}", p.saturating_add(i)),
                Err(_) => entry.trim().to_string(),
            },
            None => entry.trim().to_string(),
        }
    };
    setting.split(',').filter(|e| !e.trim().is_empty()).map(shift).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_broker_gets_its_own_admin_port() {
        assert_eq!(super::admin_listeners_of("http://127.0.0.1:9644", 0), "http://127.0.0.1:9644");
        assert_eq!(
            super::admin_listeners_of("http://127.0.0.1:9644, http://[::1]:9700/", 2),
            "http://127.0.0.1:9646,http://[::1]:9702"
        );
    }

    #[test]
    fn a_clean_stop_exits_zero_or_as_a_jvm_does_after_its_shutdown_hooks() {
        use std::os::unix::process::ExitStatusExt;
        use std::process::ExitStatus;
        // Wait statuses: an exit code sits in the second byte, a killing signal in the first.
        assert!(super::stopped_cleanly(ExitStatus::from_raw(0)));
        assert!(super::stopped_cleanly(ExitStatus::from_raw(143 << 8)));
        assert!(!super::stopped_cleanly(ExitStatus::from_raw(1 << 8)));
        assert!(!super::stopped_cleanly(ExitStatus::from_raw(70 << 8)));
        assert!(!super::stopped_cleanly(ExitStatus::from_raw(libc::SIGTERM)));
        assert!(!super::stopped_cleanly(ExitStatus::from_raw(libc::SIGKILL)));
    }
}
