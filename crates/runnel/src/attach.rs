//! `runnel chaos --attach`: the brokers of a cluster that some other process started on
//! this machine (`runnel dev --brokers N`, or Apache Kafka from its own scripts). Each
//! broker's process is found through /proc by the TCP port it listens on. Before a broker
//! is killed, its command line, working directory, environment and output file are read
//! from /proc, so that it can be started again the same way, unless its own supervisor
//! (as `runnel dev` does) has already started it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::local::{send_signal, Brokers, Namespaces};

/// How long a killed or stopped broker's own supervisor gets to start it again before we do.
const SUPERVISOR_GRACE: Duration = Duration::from_secs(3);

pub struct Attached {
    /// broker id → client address
    brokers: BTreeMap<u16, String>,
    /// Each killed or stopped broker, until it runs again: how it was started, and when it
    /// went.
    killed: HashMap<u16, (Launch, Instant)>,
    /// Brokers we started again: they outlive this process, as the ones we found do.
    started: Vec<Child>,
}

impl Attached {
    /// The brokers `(id, address)`, each of which must be a process on this machine.
    pub fn new(brokers: Vec<(i32, String)>) -> Result<Attached> {
        let mut by_id = BTreeMap::new();
        for (id, address) in brokers {
            let id = u16::try_from(id).with_context(|| format!("broker id {id} out of range"))?;
            let port = port_of(&address)?;
            if listening_pid(port).is_none() {
                bail!("broker {id} ({address}): no process on this machine listens on port {port}");
            }
            by_id.insert(id, address);
        }
        Ok(Attached { brokers: by_id, killed: HashMap::new(), started: Vec::new() })
    }
}

impl Attached {
    /// Sends `sig` to broker `id`'s process, having read how it was started (to start it
    /// again: `killed`), and waits up to `within` for it to go. Its supervisor's grace
    /// counts from then. Returns the pid, and whether the process is gone.
    async fn signal_and_wait(&mut self, id: u16, sig: i32, within: Duration) -> Result<(u32, bool)> {
        let pid = self.pid(id).with_context(|| format!("broker {id} is not running"))?;
        let launch = Launch::of(pid).with_context(|| format!("reading how broker {id} (pid {pid}) was started"))?;
        send_signal(pid, sig)?;
        let until = Instant::now() + within;
        while alive(pid) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.killed.insert(id, (launch, Instant::now()));
        Ok((pid, !alive(pid)))
    }
}

impl Brokers for Attached {
    fn ids(&self) -> Vec<u16> {
        self.brokers.keys().copied().collect()
    }

    fn address(&self, id: u16) -> String {
        self.brokers.get(&id).cloned().unwrap_or_default()
    }

    fn namespaces(&self) -> Option<&Namespaces> {
        None
    }

    async fn kill(&mut self, id: u16) -> Result<()> {
        self.signal_and_wait(id, libc::SIGKILL, Duration::from_secs(5)).await?;
        Ok(())
    }

    /// SIGTERM; its exit status is its parent's to see.
    async fn terminate(&mut self, id: u16, within: Duration) -> Result<Option<String>> {
        let (pid, gone) = self.signal_and_wait(id, libc::SIGTERM, within).await?;
        if gone {
            return Ok(None);
        }
        send_signal(pid, libc::SIGKILL)?;
        Ok(Some(format!("broker {id} (pid {pid}) still ran {within:?} after SIGTERM; killed")))
    }

    fn pid(&self, id: u16) -> Option<u32> {
        listening_pid(port_of(self.brokers.get(&id)?).ok()?)
    }

    /// Starts a broker we killed again, unless its supervisor did (a process with its
    /// command line runs) within [`SUPERVISOR_GRACE`] of the kill.
    async fn start(&mut self, id: u16) -> Result<()> {
        let Some((launch, killed_at)) = self.killed.remove(&id) else { return Ok(()) };
        let grace_until = killed_at + SUPERVISOR_GRACE;
        loop {
            if self.running(id) || launch.running() {
                return Ok(());
            }
            if Instant::now() >= grace_until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let child = launch.spawn().with_context(|| format!("starting broker {id} again"))?;
        println!("broker {id} pid {} started again", child.id());
        self.started.push(child);
        Ok(())
    }

    fn running(&self, id: u16) -> bool {
        self.pid(id).is_some()
    }

    /// Whoever started them watches them.
    fn exited(&mut self) -> Vec<(u16, std::process::ExitStatus)> {
        // Reap the brokers we started that have exited since.
        self.started.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
        Vec::new()
    }

    /// They keep running.
    async fn stop(&mut self) {}
}

/// How a process was started, read from /proc: enough to start it again.
struct Launch {
    program: PathBuf,
    argv: Vec<OsString>,
    cwd: PathBuf,
    env: Vec<(OsString, OsString)>,
    /// Its standard output, when that is a file (appended to by the new process).
    output: Option<PathBuf>,
}

impl Launch {
    fn of(pid: u32) -> Result<Launch> {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let argv = nul_separated(std::fs::read(dir.join("cmdline"))?);
        let Some(arg0) = argv.first() else { bail!("pid {pid} has no command line") };
        let env = nul_separated(std::fs::read(dir.join("environ"))?)
            .into_iter()
            .filter_map(|kv| {
                let b = kv.as_bytes();
                let eq = b.iter().position(|c| *c == b'=')?;
                Some((OsString::from_vec(b[..eq].to_vec()), OsString::from_vec(b[eq + 1..].to_vec())))
            })
            .collect();
        // The binary it runs; if that was replaced since (" (deleted)"), the one at argv[0].
        let program =
            std::fs::read_link(dir.join("exe")).ok().filter(|p| p.exists()).unwrap_or_else(|| PathBuf::from(arg0));
        let cwd = std::fs::read_link(dir.join("cwd"))?;
        let output = std::fs::read_link(dir.join("fd/1")).ok().filter(|p| p.is_file());
        Ok(Launch { program, argv, cwd, env, output })
    }

    /// Whether some process runs with this command line (a supervisor started it again).
    fn running(&self) -> bool {
        let Ok(procs) = std::fs::read_dir("/proc") else { return false };
        procs.flatten().any(|p| {
            std::fs::read(p.path().join("cmdline")).is_ok_and(|c| !c.is_empty() && nul_separated(c) == self.argv)
        })
    }

    /// In a session of its own, so that it outlives us and our terminal's signals.
    fn spawn(&self) -> Result<Child> {
        let mut cmd = Command::new(&self.program);
        if let Some(arg0) = self.argv.first() {
            cmd.arg0(arg0);
        }
        cmd.args(self.argv.iter().skip(1)).current_dir(&self.cwd).env_clear().envs(self.env.iter().cloned());
        cmd.stdin(Stdio::null());
        match &self.output {
            Some(path) => {
                let out = std::fs::OpenOptions::new().append(true).open(path)?;
                cmd.stdout(out.try_clone()?).stderr(out);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        // SAFETY: setsid is async-signal-safe; it runs in the forked child before exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        Ok(cmd.spawn()?)
    }
}

fn nul_separated(bytes: Vec<u8>) -> Vec<OsString> {
    bytes.split(|b| *b == 0).filter(|s| !s.is_empty()).map(|s| OsString::from_vec(s.to_vec())).collect()
}

/// Whether `pid` exists and has not died (a zombie waiting for its parent has).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

fn port_of(address: &str) -> Result<u16> {
    let port = address.rsplit_once(':').map(|(_, p)| p);
    port.and_then(|p| p.parse().ok()).with_context(|| format!("no port in broker address {address}"))
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
