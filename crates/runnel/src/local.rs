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
    /// Brokers some other process started (`runnel dev --brokers N`): broker → client
    /// address. Found by the port they listen on; that process restarts one that dies.
    attached: Option<Vec<String>>,
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
            attached: None,
        })
    }

    /// The brokers at `addresses` (broker i at `addresses[i]`), started by someone else
    /// that starts a broker again when it dies, as `runnel dev --brokers N` does.
    pub fn attach(addresses: Vec<String>) -> Result<LocalCluster> {
        Ok(LocalCluster {
            exe: PathBuf::new(),
            port: 0,
            data_dir: PathBuf::new(),
            overrides: Vec::new(),
            own: Vec::new(),
            locations: Vec::new(),
            network: Network::Loopback,
            children: addresses.iter().map(|_| None).collect(),
            log_dir: None,
            attached: Some(addresses),
        })
    }

    /// Sends each broker's stdout and stderr to `dir/broker-i.log` instead of ours.
    pub fn log_to(&mut self, dir: &Path) {
        self.log_dir = Some(dir.to_path_buf());
    }

    pub fn brokers(&self) -> u16 {
        self.children.len() as u16
    }

    pub fn network(&self) -> &Network {
        &self.network
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

    /// Broker `i`'s client address.
    pub fn address(&self, i: u16) -> String {
        if let Some(a) = self.attached.as_ref().and_then(|a| a.get(i as usize)) {
            return a.clone();
        }
        format!("{}:{}", self.host(i), self.port + i)
    }

    /// Every broker's client address, comma-separated.
    pub fn bootstrap(&self) -> String {
        (0..self.brokers()).map(|i| self.address(i)).collect::<Vec<_>>().join(",")
    }

    fn command(&self, i: u16) -> Result<Command> {
        let n = self.brokers();
        let voters: Vec<String> = (0..n).map(|j| format!("{j}@{}", self.raft_address(j))).collect();
        let mut cmd = match &self.network {
            Network::Loopback => Command::new(&self.exe),
            Network::Namespaces(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.namespace(i)]).arg(&self.exe);
                c
            }
        };
        let location = self.locations.get(i as usize).cloned().unwrap_or_else(|| format!("zone=dev-{i}"));
        cmd.arg("dev")
            .arg("--port")
            .arg((self.port + i).to_string())
            .arg("--data-dir")
            .arg(self.data_dir.join(format!("broker-{i}")))
            .args(["--set", &format!("listeners=PLAINTEXT://{}", self.address(i))])
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

    /// Starts broker `i` (again); prints its pid. Attached: its own supervisor does that.
    pub fn start(&mut self, i: u16) -> Result<u32> {
        if self.attached.is_some() {
            return Ok(0);
        }
        let child = self.command(i)?.kill_on_drop(true).spawn().context("starting a broker")?;
        let pid = child.id().unwrap_or(0);
        println!("broker {i} pid {pid} listening on {}", self.address(i));
        use std::io::Write;
        let _ = std::io::stdout().flush();
        self.children[i as usize] = Some(child);
        Ok(pid)
    }

    pub fn start_all(&mut self) -> Result<()> {
        for i in 0..self.brokers() {
            self.start(i)?;
        }
        Ok(())
    }

    /// Waits until broker `i` accepts connections.
    pub async fn wait_listening(&self, i: u16, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        let addr = self.address(i);
        loop {
            let attempt = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(&addr)).await;
            if let Ok(Ok(_)) = attempt {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("broker {i} is not listening on {addr} after {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn pid(&self, i: u16) -> Option<u32> {
        if self.attached.is_some() {
            let port = self.address(i).rsplit_once(':')?.1.parse().ok()?;
            return listening_pid(port);
        }
        self.children.get(i as usize)?.as_ref()?.id()
    }

    fn signal(&self, i: u16, sig: i32) -> Result<()> {
        let pid = self.pid(i).with_context(|| format!("broker {i} is not running"))?;
        // SAFETY: kill only sends a signal, to a child this process started.
        if unsafe { libc::kill(pid as i32, sig) } != 0 {
            bail!("signal {sig} to broker {i}: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// kill -9, and reaps it (attached: waits until its port is free).
    pub async fn kill(&mut self, i: u16) -> Result<()> {
        self.signal(i, libc::SIGKILL)?;
        if self.attached.is_some() {
            let until = Instant::now() + Duration::from_secs(5);
            while self.pid(i).is_some() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if let Some(mut c) = self.children[i as usize].take() {
            let _ = c.wait().await;
        }
        Ok(())
    }

    pub fn pause(&self, i: u16) -> Result<()> {
        self.signal(i, libc::SIGSTOP)
    }

    pub fn resume(&self, i: u16) -> Result<()> {
        self.signal(i, libc::SIGCONT)
    }

    /// Brokers that died by themselves since the last look (status and index). Attached
    /// brokers are watched by whoever started them.
    pub fn exited(&mut self) -> Vec<(u16, std::process::ExitStatus)> {
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

    pub fn running(&self, i: u16) -> bool {
        if self.attached.is_some() {
            return self.pid(i).is_some();
        }
        self.children.get(i as usize).is_some_and(|c| c.is_some())
    }

    /// SIGCONT (a paused broker cannot stop), SIGTERM, and waits for every broker. Attached
    /// brokers are left running.
    pub async fn stop(&mut self) {
        if self.attached.is_some() {
            return;
        }
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

/// The process listening on TCP `port` (IPv4 or IPv6), from /proc.
fn listening_pid(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEXIP:HEXPORT; state 0A is LISTEN; column 9 the inode.
            let (Some(local), Some(state), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9)) else { continue };
            let listening_here =
                local.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok()).is_some_and(|p| p == port);
            if listening_here && *state == "0A" {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path()) {
                if inodes.iter().any(|i| link.as_os_str() == i.as_str()) {
                    return Some(pid);
                }
            }
        }
    }
    None
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
