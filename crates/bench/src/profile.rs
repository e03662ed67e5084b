//! CPU profiles of brokers while a benchmark runs (`runnel bench --profile-pid`): Linux
//! `perf record` samples the processes' stacks for the whole run, `perf script` prints them,
//! and inferno folds them and draws the flame graph. The folded stacks also give the table
//! of where the time went ([`Profile::text`]), by function, as a share of all samples.
//!
//! Needs `perf` (Debian: linux-perf) and the right to profile the processes (root, or
//! `kernel.perf_event_paranoid` at most 1 for one's own). Stacks are unwound from DWARF
//! call frame information (the release build keeps it), since Rust's release code keeps
//! no frame pointers; each sample copies [`STACK_BYTES`] of the stack, so the default rate
//! is a modest [`HZ_DEFAULT`].

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use inferno::collapse::perf::{Folder, Options as FoldOptions};
use inferno::collapse::Collapse;
use inferno::flamegraph::{self, Options as GraphOptions};
use serde::Serialize;

/// Samples a second per thread, unless asked otherwise.
pub const HZ_DEFAULT: u32 = 199;
/// Bytes of stack copied with each sample for DWARF unwinding.
pub const STACK_BYTES: u32 = 16_384;
/// Functions listed in the text table.
const TOP: usize = 20;
/// How long `perf record` gets to attach before the run starts, and to write its data
/// once told to stop.
const ATTACH: Duration = Duration::from_millis(500);
const STOP_MAX: Duration = Duration::from_secs(60);

/// `perf record` running against some processes.
pub struct Recording {
    child: Child,
    data: PathBuf,
}

/// Starts sampling `pids` at `hz`, into `data` (a file `perf record` writes).
pub fn start(pids: &[u32], hz: u32, data: &Path) -> Result<Recording> {
    if pids.is_empty() {
        bail!("no process to profile");
    }
    let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    let call_graph = format!("dwarf,{STACK_BYTES}");
    let mut child = Command::new("perf")
        .args(["record", "--quiet", "-F", &hz.max(1).to_string(), "--call-graph", &call_graph, "-o"])
        .arg(data)
        .args(["--pid", &list.join(",")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting `perf record` (Debian: apt-get install linux-perf)")?;
    std::thread::sleep(ATTACH);
    if let Some(status) = child.try_wait()? {
        bail!("`perf record` ended at once ({status}): {}", stderr_of(&mut child));
    }
    Ok(Recording { child, data: data.to_path_buf() })
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut text);
    }
    text.trim().to_string()
}

impl Recording {
    /// Stops sampling, draws the flame graph into `svg` (titled `title`), and returns
    /// where the time went.
    pub fn finish(mut self, svg: &Path, title: &str) -> Result<Profile> {
        // SIGINT: perf writes out what it sampled and exits.
        let pid = libc::pid_t::try_from(self.child.id()).context("perf's pid")?;
        // SAFETY: kill has no memory effects; the pid is our own child's, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = std::time::Instant::now() + STOP_MAX;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                bail!("`perf record` did not stop within {} s", STOP_MAX.as_secs());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let errors = stderr_of(&mut self.child);
        if !self.data.exists() {
            bail!("`perf record` wrote nothing ({status}): {errors}");
        }
        let script = Command::new("perf")
            .args(["script", "--no-inline", "-i"])
            .arg(&self.data)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("running `perf script`")?;
        if !script.status.success() {
            bail!("`perf script` failed ({})", script.status);
        }
        let mut folded = Vec::new();
        Folder::from(FoldOptions::default()).collapse(&script.stdout[..], &mut folded).context("folding stacks")?;
        let folded = String::from_utf8_lossy(&folded).into_owned();
        let profile = Profile::from_folded(&folded);
        if profile.weight == 0 {
            bail!("`perf record` took no sample of the processes: {errors}");
        }
        let mut opts = GraphOptions::default();
        opts.title = title.to_string();
        let out = std::fs::File::create(svg).with_context(|| format!("writing {}", svg.display()))?;
        flamegraph::from_lines(&mut opts, folded.lines(), std::io::BufWriter::new(out))
            .context("drawing the flame graph")?;
        Ok(profile)
    }
}

impl Drop for Recording {
    /// A run that failed leaves no `perf record` behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.data);
    }
}

/// Where the time went: the weight of every sample (perf's sample periods: nanoseconds of
/// CPU with the `cpu-clock` event a virtual machine falls back to), and the functions
/// that took the most.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Profile {
    pub weight: u64,
    /// By share of samples spent in the function itself, most first.
    pub top: Vec<Function>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Function {
    pub name: String,
    /// Share of all samples (%) in the function itself, and in it or what it called.
    pub self_pct: f64,
    pub total_pct: f64,
}

impl Profile {
    /// From folded stacks: one line a stack, `frame;frame;...;leaf WEIGHT`, the process
    /// (or thread) name first.
    pub fn from_folded(folded: &str) -> Profile {
        let mut weight = 0u64;
        let mut own: HashMap<&str, u64> = HashMap::new();
        let mut total: HashMap<&str, u64> = HashMap::new();
        for line in folded.lines() {
            let Some((stack, n)) = line.rsplit_once(' ') else { continue };
            let Ok(n) = n.parse::<u64>() else { continue };
            weight += n;
            let frames: Vec<&str> = stack.split(';').collect();
            if let Some(leaf) = frames.last() {
                *own.entry(leaf).or_default() += n;
            }
            // A recursive function counts once per stack.
            let mut seen = std::collections::HashSet::new();
            for f in frames.iter().skip(1) {
                if seen.insert(*f) {
                    *total.entry(f).or_default() += n;
                }
            }
        }
        let pct = |n: u64| if weight == 0 { 0.0 } else { n as f64 * 100.0 / weight as f64 };
        let mut top: Vec<Function> = own
            .iter()
            .map(|(name, n)| Function {
                name: name.to_string(),
                self_pct: pct(*n),
                total_pct: pct(total.get(name).copied().unwrap_or(*n)),
            })
            .collect();
        top.sort_by(|a, b| b.self_pct.total_cmp(&a.self_pct).then_with(|| a.name.cmp(&b.name)));
        top.truncate(TOP);
        Profile { weight, top }
    }

    pub fn text(&self) -> String {
        let mut out = "profile: the functions that took the most of the sampled CPU time, in themselves (self)\n\
                       and with what they called (total)\n"
            .to_string();
        out += "   self%  total%  function\n";
        for f in &self.top {
            out += &format!("  {:>6.1}  {:>6.1}  {}\n", f.self_pct, f.total_pct, f.name);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_stacks_give_self_and_total_shares() {
        let folded = "runnel;main;poll;read 6\nrunnel;main;poll;poll 2\nrunnel;main;fsync 2\nbad line\n";
        let p = Profile::from_folded(folded);
        assert_eq!(p.weight, 10);
        let f = |name: &str| p.top.iter().find(|f| f.name == name).cloned().expect(name);
        assert_eq!((f("read").self_pct, f("read").total_pct), (60.0, 60.0));
        assert_eq!((f("poll").self_pct, f("poll").total_pct), (20.0, 80.0));
        assert_eq!((f("fsync").self_pct, f("fsync").total_pct), (20.0, 20.0));
        assert_eq!(p.top[0].name, "read");
        assert!(p.text().contains("60.0    60.0  read"), "{}", p.text());
        assert_eq!(Profile::from_folded("").weight, 0);
    }
}
