//! A local cluster of broker processes, for `runnel dev --brokers N` and `runnel chaos`:
//! one `runnel dev` process per broker, every broker a voter of the metadata quorum, and
//! per broker the handles a fault injector needs (kill -9, SIGSTOP/SIGCONT, start again).
//!
//! With network namespaces each broker runs in a namespace of its own, joined to the host
//! by a veth pair on one bridge, so that a link taken down cuts the broker off from its
//! peers and from clients alike. Namespaces need root and iproute2.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::process::{Child, Command};

/// Where each broker lives on the network.
pub enum Network {
    /// Every broker on 127.0.0.1, on its own ports.
    Loopback,
    /// Every broker in its own namespace on one bridge.
    Namespaces(Namespaces),
}

pub struct Namespaces {
    /// Makes the names of this run's namespaces, links and subnet unique on the host.
    tag: u32,
    brokers: u16,
}

impl Namespaces {
    /// Creates the bridge, and per broker a namespace with a veth pair whose host end is on
    /// the bridge. Undone by [`Namespaces::remove`] (also on a failure half-way).
    pub fn create(brokers: u16) -> Result<Namespaces> {
        let n = Namespaces { tag: std::process::id() % 200 + 20, brokers };
        if let Err(e) = n.try_create() {
            n.remove();
            return Err(e);
        }
        Ok(n)
    }

    fn bridge(&self) -> String {
        format!("rcbr{}", self.tag)
    }

    fn host_link(&self, i: u16) -> String {
        format!("rch{}x{i}", self.tag)
    }

    fn namespace(&self, i: u16) -> String {
        format!("runnel-chaos-{}-{i}", self.tag)
    }

    /// The host's address on the bridge: what the brokers reach the host at.
    pub fn host_address(&self) -> String {
        format!("10.231.{}.1", self.tag)
    }

    /// Broker `i`'s address inside its namespace.
    pub fn address(&self, i: u16) -> String {
        format!("10.231.{}.{}", self.tag, 10 + i)
    }

    fn try_create(&self) -> Result<()> {
        let br = self.bridge();
        let subnet = format!("10.231.{}", self.tag);
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{subnet}.1/24"), "dev", &br])?;
        ip(&["link", "set", &br, "up"])?;
        for i in 0..self.brokers {
            let ns = self.namespace(i);
            let host = self.host_link(i);
            let inner = format!("rcn{}x{i}", self.tag);
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", self.address(i)), "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["link", "set", &host, "master", &br])?;
            ip(&["link", "set", &host, "up"])?;
        }
        Ok(())
    }

    /// Takes broker `i`'s link down (`up: false`) or brings it back.
    pub fn set_link(&self, i: u16, up: bool) -> Result<()> {
        ip(&["link", "set", &self.host_link(i), if up { "up" } else { "down" }])
    }

    pub fn remove(&self) {
        for i in 0..self.brokers {
            let _ = ip(&["netns", "del", &self.namespace(i)]);
            let _ = ip(&["link", "del", &self.host_link(i)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

fn ip(args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip (iproute2): network namespaces need it, and root")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

pub struct LocalCluster {
    exe: PathBuf,
    port: u16,
    data_dir: PathBuf,
    overrides: Vec<String>,
    /// Settings for one broker only (after `overrides`).
    own: Vec<Vec<String>>,
    /// broker → `broker.location` (`region=...,zone=...`)
    locations: Vec<String>,
    network: Network,
    children: Vec<Option<Child>>,
    /// Where each broker's output goes (inherited when `None`).
    log_dir: Option<PathBuf>,
    /// The client listener's security protocol: PLAINTEXT, or SSL (`runnel dev --tls`).
    protocol: &'static str,
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
            own: (0..brokers).map(|_| Vec::new()).collect(),
            locations,
            network,
            children: (0..brokers).map(|_| None).collect(),
            log_dir: None,
            protocol: "PLAINTEXT",
        })
    }

    /// Brokers listen with TLS (the settings for it come as overrides).
    pub fn use_tls(&mut self) {
        self.protocol = "SSL";
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

    /// Adds a setting for broker `i` alone, from its next start on.
    pub fn set_own(&mut self, i: u16, setting: String) {
        if let Some(o) = self.own.get_mut(i as usize) {
            o.push(setting);
        }
    }

    /// Where the host (this process) can listen so that every broker reaches it.
    pub fn host_side(&self) -> String {
        match &self.network {
            Network::Loopback => "127.0.0.1".to_string(),
            Network::Namespaces(n) => n.host_address(),
        }
    }

    /// Broker `i`'s Raft address.
    pub fn raft_address(&self, i: u16) -> String {
        format!("{}:{}", self.host(i), self.port + 1000 + i)
    }

    fn command(&self, i: u16) -> Result<Command> {
        let n = self.brokers();
        let voters: Vec<String> = (0..n).map(|j| format!("{j}@{}", self.raft_address(j))).collect();
        // RUNNEL_BROKER_WRAPPER names a program each broker is started through (it gets the
        // broker's command line and should exec it, keeping the pid the faults signal): a
        // heap profiler for one broker, say. docs/chaos.md.
        let mut program: Vec<std::ffi::OsString> = std::env::var_os("RUNNEL_BROKER_WRAPPER").into_iter().collect();
        program.push(self.exe.clone().into_os_string());
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
        cmd.arg("dev")
            .arg("--port")
            .arg((self.port + i).to_string())
            .arg("--data-dir")
            .arg(self.data_dir.join(format!("broker-{i}")))
            .args(["--set", &format!("listeners={}://{}", self.protocol, self.address(i))])
            .args(["--set", &format!("node.id={i}")])
            .args(["--set", &format!("controller.quorum.voters={}", voters.join(","))])
            .args(["--set", &format!("default.replication.factor={}", n.min(3))])
            .args(["--set", &format!("offsets.topic.replication.factor={}", n.min(3))])
            .args(["--set", &format!("broker.location={location}")]);
        for o in self.overrides.iter().chain(self.own.get(i as usize).into_iter().flatten()) {
            cmd.args(["--set", o]);
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

    /// Starts broker `id` again, after a kill or an exit.
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
        // only to exit cleanly, SIGKILL works regardless.
        if let Network::Namespaces(n) = &self.network {
            for c in self.children.iter_mut() {
                if let Some(child) = c {
                    let _ = child.start_kill();
                }
                *c = None;
            }
            n.remove();
        }
    }
}
