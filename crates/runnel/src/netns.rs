//! Network namespaces for a local cluster (`runnel dev`, `runnel chaos`): each broker in a
//! namespace of its own and, per region, a namespace for clients, all joined to the host by
//! veth pairs on one bridge. Between regions, latency from a userspace delayer on NFQUEUE
//! ([`delay`]).
//!
//! The address plan: broker i is in region r = i mod R and gets 10.231.T.(32(r+1) + i/R),
//! so that each region is one /27 block (10.231.T.(32(r+1))/27), its client namespace at
//! 10.231.T.(32(r+1)+30); the host keeps 10.231.T.1 on the bridge. T (the tag) makes the
//! names and the subnet of this run unique on the host.
//!
//! Latency: in every namespace, iptables-legacy rules queue the packets arriving from
//! another region's /27 to NFQUEUE, and this process's delayer accepts each one after the
//! one-way delay. So every packet between two regions is delayed once, at its receiver's
//! ingress, and nothing within a region, nor to or from the host, is. Not tc netem: the
//! kernels this runs on (a developer's, CI's) lack it, and the prio qdisc with it. A
//! bandwidth cap is an HTB qdisc on the namespace side of every veth, with u32 filters
//! sending packets for other regions to its one class.
//!
//! Needs root and iproute2 (`ip`); the latency needs iptables-legacy and a kernel with
//! nfnetlink_queue and the NFQUEUE target, the bandwidth cap `tc` and HTB.

mod delay;

use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

/// At most this many regions: six /27 blocks after the host's.
pub const MAX_REGIONS: u16 = 6;
/// At most this many brokers per region: the /27 keeps .30 for clients and .31 free.
pub const MAX_PER_REGION: u16 = 28;

/// Regions and the network between them, for `runnel dev` and `runnel chaos`.
#[derive(Args, Clone, Debug, Default)]
pub struct RegionArgs {
    /// Put broker i in region r(i mod REGIONS) (`broker.location=region=..,zone=..`): the
    /// placement spreads each partition's replicas over the regions.
    #[arg(long, default_value_t = 0)]
    pub regions: u16,
    /// Round-trip time between two regions (each direction gets half), in network
    /// namespaces, by a delayer on NFQUEUE: 30ms, 0.03s, or a number of milliseconds.
    /// Applies to all traffic between regions, clients in a region's namespace included.
    /// Needs root and iptables-legacy.
    #[arg(long, value_name = "RTT", value_parser = parse_time)]
    pub inter_region_latency: Option<Duration>,
    /// Jitter of each direction's delay between regions (normal distribution). A packet
    /// is never released before the one sent before it: no reordering.
    #[arg(long, value_name = "TIME", value_parser = parse_time, default_value = "0")]
    pub inter_region_jitter: Duration,
    /// Cap on each namespace's traffic to other regions (an HTB qdisc), in tc's syntax:
    /// 1gbit, 100mbit.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub inter_region_bandwidth: Option<String>,
    /// Run every broker in a network namespace of its own (root), even without latency.
    #[arg(long)]
    pub netns: bool,
    /// Voters of the metadata quorum: brokers 0..N, one per region first (broker i is in
    /// region i mod REGIONS); the other brokers follow the metadata log as observers.
    /// Default: every broker up to 3, then 3, and 5 from 5 brokers on.
    #[arg(long, value_name = "N")]
    pub controller_voters: Option<u16>,
}

impl RegionArgs {
    /// Whether any --inter-region-* option asks for latency, jitter or a bandwidth cap.
    pub fn shaped(&self) -> bool {
        self.inter_region_latency.is_some()
            || !self.inter_region_jitter.is_zero()
            || self.inter_region_bandwidth.is_some()
    }

    /// The network between regions the options ask for (no delay when none is given).
    pub fn latency(&self) -> Latency {
        Latency {
            round_trip: self.inter_region_latency.unwrap_or_default(),
            jitter: self.inter_region_jitter,
            rate: self.inter_region_bandwidth.clone(),
        }
    }

    /// Regions for the address plan: 1 when none are given.
    pub fn plan_regions(&self) -> u16 {
        self.regions.max(1)
    }
}

/// A time: `30ms`, `0.03s`, `500us`, or a bare number of milliseconds.
pub fn parse_time(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (number, seconds_per_unit) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1e-3)
    };
    let bad = || format!("{s}: expected a time such as 30ms, 0.03s or 30 (milliseconds)");
    let v: f64 = number.trim().parse().map_err(|_| bad())?;
    let secs = v * seconds_per_unit;
    if !(0.0..=3600.0).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A rate in tc's syntax: a number and a unit (bit, kbit, mbit, gbit, tbit, bps, kbps...).
pub fn parse_rate(s: &str) -> Result<String, String> {
    const UNITS: [&str; 18] = [
        "bit", "kbit", "mbit", "gbit", "tbit", "bps", "kbps", "mbps", "gbps", "tbps", "kibit", "mibit", "gibit",
        "tibit", "kibps", "mibps", "gibps", "tibps",
    ];
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    match number.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && UNITS.contains(&unit) => Ok(t),
        _ => Err(format!("{s}: expected a rate in tc's syntax, such as 1gbit, 100mbit or 10mbps")),
    }
}

/// The network between regions: the delay at every receiver's ingress, the cap at every
/// sender's egress.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    /// Each direction gets half.
    pub round_trip: Duration,
    /// Of each direction (normal distribution); zero for none.
    pub jitter: Duration,
    /// tc's syntax (`1gbit`); none for no cap.
    pub rate: Option<String>,
}

impl Latency {
    pub fn one_way(&self) -> Duration {
        self.round_trip / 2
    }

    /// `50 ms round trip (25 ms each way), jitter 2 ms, 1gbit`.
    pub fn describe(&self) -> String {
        let ms = |d: Duration| format!("{} ms", d.as_secs_f64() * 1000.0);
        let mut s = format!("{} round trip ({} each way)", ms(self.round_trip), ms(self.one_way()));
        if !self.jitter.is_zero() {
            let _ = write!(s, ", jitter {}", ms(self.jitter));
        }
        if let Some(r) = &self.rate {
            let _ = write!(s, ", at most {r}");
        }
        s
    }
}

/// Checks that `brokers` fit the address plan of `regions` (1 for none).
pub fn check_plan(brokers: u16, regions: u16) -> Result<()> {
    if regions == 0 || regions > MAX_REGIONS {
        bail!("network namespaces: at most {MAX_REGIONS} regions (each one a /27 of 10.231.T.0/24), not {regions}");
    }
    let per_region = brokers.div_ceil(regions);
    if per_region > MAX_PER_REGION {
        bail!("network namespaces: {brokers} brokers in {regions} region(s) is {per_region} in one region, at most {MAX_PER_REGION}");
    }
    Ok(())
}

/// Why network namespaces with latency between regions cannot be made here, if they
/// cannot: not root, no `ip` or `iptables-legacy` to run, or no NFQUEUE (tried in a
/// throwaway namespace).
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root".to_string());
    }
    for (tool, package) in [("ip", "iproute2"), ("iptables-legacy", "iptables")] {
        let ran = std::process::Command::new(tool).arg("-V").stdin(Stdio::null()).output();
        if !ran.is_ok_and(|o| o.status.success()) {
            return Some(format!("no `{tool}` ({package}) to run"));
        }
    }
    delay::probe().map(|why| format!("no latency between namespaces by NFQUEUE: {why}"))
}

/// Everything one [`Namespaces`] made on the host, to remove it.
#[derive(Clone)]
struct Made {
    bridge: String,
    namespaces: Vec<String>,
    host_links: Vec<String>,
    /// Stopped first: its rules removed and its queued packets accepted before the
    /// namespaces go.
    delayer: Arc<Mutex<Option<delay::Delayer>>>,
}

impl Made {
    fn remove(&self) {
        let delayer = self.delayer.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Stopped outside the lock: it runs iptables and joins its threads.
        drop(delayer);
        // Deleting the host end of a veth deletes both ends; the namespace may still hold a
        // broker that is exiting, which keeps it alive (not its links) until it is gone.
        for l in &self.host_links {
            let _ = ip(&["link", "del", l]);
        }
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// The namespaces of this process that exist now, for [`remove_all`].
static LIVE: Mutex<Vec<Made>> = Mutex::new(Vec::new());

/// Removes every namespace, link and bridge this process made and has not removed yet
/// (the delayer's rules and threads first): for an exit that skips destructors
/// (`std::process::exit`).
pub fn remove_all() {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for m in live {
        m.remove();
    }
}

/// A bridge, a namespace per broker and one for clients per region, removed when dropped.
pub struct Namespaces {
    tag: u32,
    brokers: u16,
    regions: u16,
    /// The latency between regions the delayer started with (`None`: there is none).
    latency: Option<Latency>,
    made: Made,
}

/// One namespace: its name, its veth's two ends, its address and region.
struct Member {
    namespace: String,
    host_link: String,
    inner_link: String,
    address: String,
    region: u16,
}

impl Namespaces {
    /// Creates the bridge, and per broker and per region's clients a namespace with a veth
    /// pair whose host end is on the bridge; with two regions or more and `latency`, the
    /// delayer between regions (and the bandwidth cap). Without `latency`, nothing is
    /// delayed and [`Namespaces::set_extra_delay`] fails. Everything made is removed again
    /// on a failure half-way, and on drop.
    pub fn create(brokers: u16, regions: u16, latency: Option<Latency>) -> Result<Namespaces> {
        let regions = regions.max(1);
        check_plan(brokers, regions)?;
        let tag = claim_tag()?;
        let mut n = Namespaces {
            tag,
            brokers,
            regions,
            latency: None,
            made: Made {
                bridge: format!("rnbr{tag}"),
                namespaces: Vec::new(),
                host_links: Vec::new(),
                delayer: Arc::default(),
            },
        };
        for m in n.members() {
            n.made.namespaces.push(m.namespace);
            n.made.host_links.push(m.host_link);
        }
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).push(n.made.clone());
        // The bridge exists already (claim_tag made it): on an error, drop removes it all.
        n.try_create()?;
        if let Some(latency) = latency.filter(|_| regions >= 2) {
            n.install_latency(&latency)?;
            n.latency = Some(latency);
        }
        Ok(n)
    }

    pub fn tag(&self) -> u32 {
        self.tag
    }

    pub fn regions(&self) -> u16 {
        self.regions
    }

    pub fn bridge(&self) -> &str {
        &self.made.bridge
    }

    /// The latency between regions the delayer started with, if there is one.
    pub fn latency(&self) -> Option<&Latency> {
        self.latency.as_ref()
    }

    pub fn region_of(&self, broker: u16) -> u16 {
        broker % self.regions
    }

    fn octet(&self, region: u16, k: u16) -> u16 {
        32 * (region + 1) + k
    }

    /// Broker `i`'s address inside its namespace.
    pub fn address(&self, i: u16) -> String {
        format!("10.231.{}.{}", self.tag, self.octet(self.region_of(i), i / self.regions))
    }

    /// Region `r`'s block, `10.231.T.X/27`.
    pub fn block(&self, r: u16) -> String {
        format!("10.231.{}.{}/27", self.tag, self.octet(r, 0))
    }

    /// Broker `i`'s namespace.
    pub fn namespace(&self, i: u16) -> String {
        format!("runnel-{}-b{i}", self.tag)
    }

    /// Region `r`'s namespace for clients.
    pub fn client_namespace(&self, r: u16) -> String {
        format!("runnel-{}-r{r}", self.tag)
    }

    /// The address of region `r`'s client namespace.
    pub fn client_address(&self, r: u16) -> String {
        format!("10.231.{}.{}", self.tag, self.octet(r, 30))
    }

    fn members(&self) -> Vec<Member> {
        let t = self.tag;
        let brokers = (0..self.brokers).map(|i| Member {
            namespace: self.namespace(i),
            host_link: format!("rnh{t}b{i}"),
            inner_link: format!("rnn{t}b{i}"),
            address: self.address(i),
            region: self.region_of(i),
        });
        let clients = (0..self.regions).map(|r| Member {
            namespace: self.client_namespace(r),
            host_link: format!("rnh{t}r{r}"),
            inner_link: format!("rnn{t}r{r}"),
            address: self.client_address(r),
            region: r,
        });
        brokers.chain(clients).collect()
    }

    /// The blocks of the regions other than `region`.
    fn other_blocks(&self, region: u16) -> Vec<String> {
        (0..self.regions).filter(|r| *r != region).map(|r| self.block(r)).collect()
    }

    fn try_create(&self) -> Result<()> {
        let br = self.bridge();
        ip(&["addr", "add", &format!("10.231.{}.1/24", self.tag), "dev", br])?;
        ip(&["link", "set", br, "up"])?;
        for m in self.members() {
            let ns = m.namespace.as_str();
            ip(&["netns", "add", ns])?;
            ip(&["link", "add", &m.host_link, "type", "veth", "peer", "name", &m.inner_link])?;
            ip(&["link", "set", &m.inner_link, "netns", ns])?;
            ip(&["-n", ns, "addr", "add", &format!("{}/24", m.address), "dev", &m.inner_link])?;
            ip(&["-n", ns, "link", "set", &m.inner_link, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["link", "set", &m.host_link, "master", br])?;
            ip(&["link", "set", &m.host_link, "up"])?;
        }
        Ok(())
    }

    /// The delayer in every namespace, for packets from other regions, then the bandwidth
    /// cap if one is asked for.
    fn install_latency(&self, latency: &Latency) -> Result<()> {
        let targets: Vec<delay::Target> = self
            .members()
            .into_iter()
            .map(|m| delay::Target { blocks: self.other_blocks(m.region), namespace: m.namespace })
            .collect();
        let d = delay::Delayer::start(&targets, latency.one_way(), latency.jitter)
            .context("latency between regions (a userspace delayer on NFQUEUE)")?;
        *self.made.delayer.lock().unwrap_or_else(|e| e.into_inner()) = Some(d);
        if let Some(rate) = &latency.rate {
            for m in self.members() {
                self.cap(&m, rate).context("--inter-region-bandwidth (tc, HTB)")?;
            }
        }
        Ok(())
    }

    /// On `m`'s side of its veth: an HTB qdisc whose unclassified traffic goes out at once
    /// (`default 0`), one class at `rate`, and u32 filters sending packets for other
    /// regions to it.
    fn cap(&self, m: &Member, rate: &str) -> Result<()> {
        let (ns, dev) = (m.namespace.as_str(), m.inner_link.as_str());
        tc(&["-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "0"])?;
        tc(&[
            "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb", "rate", rate, "ceil", rate,
            "quantum", "65536",
        ])?;
        for block in self.other_blocks(m.region) {
            tc(&[
                "-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
                "ip", "dst", &block, "flowid", "1:2",
            ])?;
        }
        Ok(())
    }

    /// Sets the one-way delay between regions to the base one plus `extra` (zero: back to
    /// the base), for every packet sent from now on.
    pub fn set_extra_delay(&self, extra: Duration) -> Result<()> {
        match self.made.delayer.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(d) => {
                d.set_extra(extra);
                Ok(())
            }
            None => bail!("no latency between regions: none was asked for (--inter-region-latency)"),
        }
    }

    /// Takes broker `i`'s link down (`up: false`) or brings it back.
    pub fn set_link(&self, i: u16, up: bool) -> Result<()> {
        let link = format!("rnh{}b{i}", self.tag);
        ip(&["link", "set", &link, if up { "up" } else { "down" }])
    }

    /// Takes region `r`'s client namespace's link down (`up: false`) or brings it back.
    pub fn set_client_link(&self, r: u16, up: bool) -> Result<()> {
        let link = format!("rnh{}r{r}", self.tag);
        ip(&["link", "set", &link, if up { "up" } else { "down" }])
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        self.made.remove();
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|m| m.bridge != self.made.bridge);
    }
}

/// Picks a tag no other run on this host uses (no bridge and no namespace of that tag),
/// and holds it by creating its bridge.
fn claim_tag() -> Result<u32> {
    let first = std::process::id() % 200;
    for k in 0..200 {
        let tag = (first + k) % 200 + 20;
        let prefix = format!("runnel-{tag}-");
        let taken = std::fs::read_dir("/run/netns")
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(&prefix)))
            .unwrap_or(false);
        if taken {
            continue;
        }
        match ip(&["link", "add", &format!("rnbr{tag}"), "type", "bridge"]) {
            Ok(()) => return Ok(tag),
            Err(e) if format!("{e:#}").contains("File exists") => continue,
            Err(e) => return Err(e),
        }
    }
    bail!("no free subnet 10.231.T.0/24 for network namespaces: bridges rnbr20..rnbr219 all exist")
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program} (iproute2): network namespaces need it, and root"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let hint = if stderr.contains("qdisc kind is unknown") {
            " (this kernel lacks the HTB qdisc: CONFIG_NET_SCH_HTB)"
        } else {
            ""
        };
        bail!("{program} {}: {}{hint}", args.join(" "), stderr.trim());
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    run("ip", args)
}

fn tc(args: &[&str]) -> Result<()> {
    run("tc", args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_rates_parse_as_documented() {
        assert_eq!(parse_time("30ms"), Ok(Duration::from_millis(30)));
        assert_eq!(parse_time("0.03s"), Ok(Duration::from_millis(30)));
        assert_eq!(parse_time("30"), Ok(Duration::from_millis(30)));
        assert_eq!(parse_time("2.5"), Ok(Duration::from_micros(2500)));
        assert_eq!(parse_time("500us"), Ok(Duration::from_micros(500)));
        assert!(parse_time("-1ms").is_err() && parse_time("fast").is_err() && parse_time("1h").is_err());
        assert_eq!(parse_rate("1gbit").as_deref(), Ok("1gbit"));
        assert_eq!(parse_rate("100Mbit").as_deref(), Ok("100mbit"));
        assert!(parse_rate("100").is_err() && parse_rate("fast").is_err() && parse_rate("0mbit").is_err());
    }

    #[test]
    fn each_region_is_one_block_with_its_clients_at_30() {
        let n = Namespaces {
            tag: 57,
            brokers: 9,
            regions: 3,
            latency: None,
            made: Made {
                bridge: "test-only".to_string(),
                namespaces: Vec::new(),
                host_links: Vec::new(),
                delayer: Arc::default(),
            },
        };
        let addrs: Vec<String> = (0..9).map(|i| n.address(i)).collect();
        assert_eq!(addrs[0], "10.231.57.32");
        assert_eq!(addrs[1], "10.231.57.64");
        assert_eq!(addrs[2], "10.231.57.96");
        assert_eq!(addrs[3], "10.231.57.33");
        assert_eq!(addrs[8], "10.231.57.98");
        assert_eq!(n.block(1), "10.231.57.64/27");
        assert_eq!(n.client_address(2), "10.231.57.126");
        assert_eq!(n.client_namespace(0), "runnel-57-r0");
        for m in n.members() {
            assert!(m.host_link.len() <= 15 && m.inner_link.len() <= 15, "{}", m.host_link);
        }
        assert_eq!(n.other_blocks(1), ["10.231.57.32/27", "10.231.57.96/27"]);
        // Nothing was made: dropping it must not touch the host.
        std::mem::forget(n);
        assert!(check_plan(9, 3).is_ok());
        assert!(check_plan(29, 1).is_err() && check_plan(7, 7).is_err());
        let l = Latency { round_trip: Duration::from_millis(25), jitter: Duration::from_millis(2), rate: None };
        assert_eq!(l.describe(), "25 ms round trip (12.5 ms each way), jitter 2 ms");
    }
}
