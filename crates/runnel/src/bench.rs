//! `runnel bench`, `runnel bench compare`, `runnel bench size`: the command line of the
//! load generator in `runnel-bench`.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use runnel_bench::scenario::{scenario, NAMES};
use runnel_bench::size::{inter_region, size, SizeInput, Traffic, TrafficInput};
use runnel_bench::Workload;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: Box<RunArgs>,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Run the same workload against two clusters, alternating, and print B/A ratios.
    Compare {
        /// Bootstrap address of cluster A.
        #[arg(long)]
        a: String,
        /// Bootstrap address of cluster B.
        #[arg(long)]
        b: String,
        /// Rounds (each runs A and B once, alternating which goes first).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds of a first, discarded run against each side (0: none).
        #[arg(long, default_value_t = 5.0)]
        warmup: f64,
        /// A broker process of cluster A on this machine (repeat for each): its CPU per GB
        /// produced becomes a figure (with --pid-b).
        #[arg(long = "pid-a")]
        pids_a: Vec<u32>,
        /// A broker process of cluster B on this machine (repeat for each).
        #[arg(long = "pid-b")]
        pids_b: Vec<u32>,
        /// Write the page cache's unwritten data out (sync) before every run, so that one
        /// side's write-back does not land on the other's turn.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        settle: bool,
        /// While one side runs, move every thread of the other side's brokers (--pid-a,
        /// --pid-b) to these CPUs (a list as taskset -c takes it), and back before their own
        /// run: brokers pinned to the same CPUs then each have them to themselves.
        #[arg(long, value_name = "CPUS")]
        park_cpus: Option<String>,
        #[command(flatten)]
        run: Box<RunArgs>,
    },
    /// SCRAM logins per second against one broker: connect, log in, disconnect, again.
    Logins {
        /// The broker's SASL listener.
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        #[arg(long)]
        user: String,
        #[arg(long)]
        password: String,
        /// Workers logging in at the same time.
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// Seconds to log in for.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Client settings (security.protocol=SASL_SSL or SSL: TLS with ssl.truststore.*).
        #[arg(long, value_name = "FILE")]
        command_config: Option<PathBuf>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Brokers (and cost) needed for a target load, from a measured per-broker throughput.
    Size {
        /// Client MB/s one broker sustained in a cluster with the target replication factor.
        #[arg(long, conflicts_with = "from_report")]
        per_broker_mb_s: Option<f64>,
        /// Take the throughput from a `runnel bench --json` report of a cluster of --brokers.
        #[arg(long)]
        from_report: Option<PathBuf>,
        /// Brokers of the cluster the report measured.
        #[arg(long, default_value_t = 1)]
        brokers: u32,
        /// Target produce load in MB/s.
        #[arg(long)]
        target_mb_s: f64,
        #[arg(long, default_value_t = 1024.0)]
        record_bytes: f64,
        #[arg(long, default_value_t = 3)]
        replication_factor: u32,
        /// Failure domains replicas spread over (e.g. 3 zones); the cluster must survive losing one.
        #[arg(long, default_value_t = 3)]
        domains: u32,
        /// Capacity kept free, 0..1.
        #[arg(long, default_value_t = 0.3)]
        headroom: f64,
        /// Price of one broker per hour (any currency).
        #[arg(long)]
        broker_hour_price: Option<f64>,
        /// Regions the failure domains span: above 1, the traffic between regions is
        /// reported too (replicas one per region first).
        #[arg(long, default_value_t = 1)]
        regions: u32,
        /// Consumer groups per region, each reading everything.
        #[arg(long, default_value_t = 1)]
        groups_per_region: u32,
        /// Share of writes led in the producer's own region: 1 with leader.preference
        /// keeping leaders where the writers are, 1/regions with leaders spread.
        #[arg(long, default_value_t = 1.0)]
        local_leader_share: f64,
        /// Consumers read from leaders (no fetch from follower).
        #[arg(long)]
        no_follower_fetching: bool,
        /// Price of one GB between regions (any currency).
        #[arg(long)]
        inter_region_gb_price: Option<f64>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Any Kafka-compatible bootstrap address.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// A named workload (durable-512, tiny-8, lz4-1k, latency-1k, keyed-many, partitions-N);
    /// the options below override it.
    #[arg(long)]
    scenario: Option<String>,
    /// Topic to create (and delete afterwards); default runnel-bench-<pid>.
    #[arg(long)]
    topic: Option<String>,
    /// Use --topic as it exists: no create, no delete.
    #[arg(long)]
    existing_topic: bool,
    /// Keep the created topic after the run.
    #[arg(long)]
    keep_topic: bool,
    #[arg(long)]
    partitions: Option<i32>,
    #[arg(long)]
    replication_factor: Option<i16>,
    /// Topic config for the created topic, KEY=VALUE (repeatable).
    #[arg(long = "topic-config", value_name = "KEY=VALUE")]
    topic_configs: Vec<String>,
    #[arg(long)]
    producers: Option<usize>,
    #[arg(long)]
    consumers: Option<usize>,
    /// Record value size in bytes, or MIN-MAX for a uniform spread.
    #[arg(long)]
    record_size: Option<String>,
    /// Distinct keys (keyed records, Kafka's murmur2 partitioning); 0 = unkeyed.
    #[arg(long)]
    keys: Option<u64>,
    /// none, gzip, snappy, lz4, zstd.
    #[arg(long)]
    compression: Option<String>,
    /// 0, 1 or all (-1).
    #[arg(long)]
    acks: Option<String>,
    #[arg(long)]
    batch_size: Option<usize>,
    #[arg(long)]
    linger_ms: Option<u64>,
    #[arg(long)]
    idempotence: Option<bool>,
    /// Records per second over all producers; latency is then measured from each record's
    /// scheduled time (coordinated-omission correction).
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds to produce for.
    #[arg(long)]
    duration: Option<f64>,
    /// Records to produce (instead of a duration).
    #[arg(long)]
    records: Option<u64>,
    #[arg(long)]
    max_in_flight: Option<usize>,
    #[arg(long)]
    buffer_memory: Option<usize>,
    /// Write the report as JSON here ("-" for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG chart (throughput and latency over time) here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Live progress line on stderr (default: when stderr is a terminal).
    #[arg(long)]
    progress: Option<bool>,
    /// Client settings in Kafka's properties format, as Kafka's tools take them:
    /// security.protocol=SSL with ssl.truststore.* (and ssl.keystore.* for a client
    /// certificate) connects over TLS.
    #[arg(long, value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// Record a CPU profile of this process (a broker's pid; repeatable) for the whole run
    /// with Linux perf: a flame graph into --profile-svg, and the functions that took the
    /// most time in the report.
    #[arg(long = "profile-pid", value_name = "PID")]
    profile_pids: Vec<u32>,
    /// Where the flame graph of --profile-pid goes.
    #[arg(long, value_name = "FILE", default_value = "profile.svg")]
    profile_svg: PathBuf,
    /// Samples a second per thread for --profile-pid.
    #[arg(long, default_value_t = runnel_bench::profile::HZ_DEFAULT)]
    profile_hz: u32,
}

impl RunArgs {
    /// Applies --command-config: TLS for every connection when it asks for SSL.
    fn connect_with(&self) -> Result<()> {
        connect_with(self.command_config.as_deref(), false)
    }

    fn workload(&self) -> Result<Workload> {
        let mut w = match &self.scenario {
            Some(s) => scenario(s).ok_or_else(|| anyhow!("unknown scenario {s}; known: {}", NAMES.join(", ")))?,
            None => Workload::default(),
        };
        w.topic = self.topic.clone().unwrap_or_else(|| format!("runnel-bench-{}", std::process::id()));
        w.existing_topic = self.existing_topic;
        w.keep_topic = self.keep_topic;
        if self.existing_topic && self.topic.is_none() {
            bail!("--existing-topic needs --topic");
        }
        macro_rules! set {
            ($field:ident, $from:expr) => {
                if let Some(v) = $from {
                    w.$field = v;
                }
            };
        }
        set!(partitions, self.partitions);
        set!(replication_factor, self.replication_factor);
        set!(producers, self.producers);
        set!(consumers, self.consumers);
        set!(batch_bytes, self.batch_size);
        set!(linger_ms, self.linger_ms);
        set!(idempotent, self.idempotence);
        set!(in_flight, self.max_in_flight);
        set!(buffer_bytes, self.buffer_memory);
        if let Some(k) = self.keys {
            w.keys = (k > 0).then_some(k);
        }
        if let Some(r) = self.rate {
            w.rate = (r > 0.0).then_some(r);
        }
        if let Some(d) = self.duration {
            w.duration_s = d;
            w.records = None;
        }
        if let Some(n) = self.records {
            w.records = Some(n);
        }
        if let Some(c) = &self.compression {
            w.codec = runnel_bench::codec(c).ok_or_else(|| anyhow!("unknown compression {c}"))?;
            w.compression = c.clone();
        }
        if let Some(a) = &self.acks {
            w.acks = match a.as_str() {
                "all" | "-1" => -1,
                "1" => 1,
                "0" => 0,
                other => bail!("--acks {other}: expected 0, 1 or all"),
            };
        }
        if let Some(s) = &self.record_size {
            let parse = |x: &str| x.trim().parse::<usize>().with_context(|| format!("--record-size {s}"));
            w.record_bytes = match s.split_once('-') {
                Some((lo, hi)) => (parse(lo)?, parse(hi)?),
                None => (parse(s)?, parse(s)?),
            };
            if w.record_bytes.0 > w.record_bytes.1 {
                bail!("--record-size {s}: MIN is above MAX");
            }
        }
        for kv in &self.topic_configs {
            let (k, v) = kv.split_once('=').with_context(|| format!("--topic-config {kv}: expected KEY=VALUE"))?;
            w.topic_configs.insert(k.to_string(), v.to_string());
        }
        if w.in_flight == 0 || w.batch_bytes == 0 || w.partitions <= 0 {
            bail!("--max-in-flight, --batch-size and --partitions must be positive");
        }
        Ok(w)
    }

    fn progress(&self) -> bool {
        self.progress.unwrap_or_else(|| std::io::IsTerminal::is_terminal(&std::io::stderr()))
    }
}

/// Applies a client properties file: TLS for every connection when security.protocol is
/// SSL (or SASL_SSL, when `sasl` says the caller logs in itself).
fn connect_with(path: Option<&std::path::Path>, sasl: bool) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let props: std::collections::BTreeMap<String, String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once(['=', ':']).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let protocol = props.get("security.protocol").map_or("PLAINTEXT", String::as_str).to_ascii_uppercase();
    match protocol.as_str() {
        "PLAINTEXT" => Ok(()),
        "SASL_PLAINTEXT" if sasl => Ok(()),
        "SSL" | "SASL_SSL" if protocol == "SSL" || sasl => {
            let get = |k: &str| -> String {
                props.get(k).cloned().unwrap_or_else(|| match k {
                    "ssl.enabled.protocols" => "TLSv1.2,TLSv1.3".into(),
                    "ssl.endpoint.identification.algorithm" => "https".into(),
                    "ssl.keystore.type" | "ssl.truststore.type" => "JKS".into(),
                    _ => String::new(),
                })
            };
            let (config, _) = runnel_security::tls::client_config(&get).with_context(|| path.display().to_string())?;
            runnel_client::use_tls(config);
            Ok(())
        }
        other => {
            bail!("{}: security.protocol={other} is not supported by runnel bench (PLAINTEXT, SSL)", path.display())
        }
    }
}

fn write_out(path: &PathBuf, text: &str) -> Result<()> {
    if path.as_os_str() == "-" {
        println!("{text}");
        return Ok(());
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn print_traffic(what: &str, t: &Traffic, record_bytes: f64) {
    println!(
        "{what}: {:.1} MB/s ({:.1} writes to leaders elsewhere, {:.1} replication, {:.1} reads), {:.2} GB per GB produced; each region stores {:.0} GB a day",
        t.total_mb_s, t.produce_mb_s, t.replication_mb_s, t.consume_mb_s, t.gb_per_gb_produced, t.stored_gb_per_day_per_region
    );
    if let (Some(g), Some(m), Some(month)) = (t.cost_per_gb_produced, t.cost_per_million_records, t.cost_per_month) {
        println!("  cost {g:.4} per GB produced, {m:.6} per million {record_bytes}-byte records, {month:.0} a month");
    }
}

pub async fn main(args: BenchArgs) -> Result<()> {
    match args.command {
        None => {
            let a = &args.run;
            a.connect_with()?;
            let workload = a.workload()?;
            let recording = if a.profile_pids.is_empty() {
                None
            } else {
                let (pids, hz) = (a.profile_pids.clone(), a.profile_hz);
                let mut data = a.profile_svg.clone().into_os_string();
                data.push(".perf.data");
                let start = move || runnel_bench::profile::start(&pids, hz, std::path::Path::new(&data));
                Some(tokio::task::spawn_blocking(start).await??)
            };
            let report = runnel_bench::run(&a.bootstrap, workload, a.progress()).await?;
            print!("{}", report.text());
            if let Some(recording) = recording {
                let svg = a.profile_svg.clone();
                let pids: Vec<String> = a.profile_pids.iter().map(|p| p.to_string()).collect();
                let title =
                    format!("runnel bench {}: pid {}", a.scenario.as_deref().unwrap_or("custom"), pids.join(", "));
                let profile = tokio::task::spawn_blocking(move || recording.finish(&svg, &title)).await??;
                print!("{}", profile.text());
                println!("flame graph: {}", a.profile_svg.display());
            }
            if let Some(p) = &a.json {
                write_out(p, &serde_json::to_string_pretty(&report)?)?;
            }
            if let Some(p) = &a.svg {
                write_out(p, &report.svg())?;
            }
            Ok(())
        }
        Some(BenchCommand::Logins {
            bootstrap,
            mechanism,
            user,
            password,
            connections,
            duration,
            command_config,
            json,
        }) => {
            connect_with(command_config.as_deref(), true)?;
            let address = bootstrap.split(',').next().unwrap_or_default().trim().to_string();
            let duration = std::time::Duration::from_secs_f64(duration.max(0.1));
            let r = runnel_bench::logins::logins(&address, &mechanism, &user, &password, connections, duration).await?;
            print!("{}", r.text());
            if let Some(p) = &json {
                write_out(p, &serde_json::to_string_pretty(&r)?)?;
            }
            Ok(())
        }
        Some(BenchCommand::Compare { a, b, rounds, warmup, pids_a, pids_b, settle, park_cpus, run }) => {
            run.connect_with()?;
            let park = park_cpus.as_deref().map(runnel_bench::park::CpuSet::parse).transpose()?;
            let plan = runnel_bench::compare::Plan { rounds, warmup_s: warmup.max(0.0), pids_a, pids_b, settle, park };
            let c = runnel_bench::compare::compare(&a, &b, run.workload()?, &plan, run.progress()).await?;
            print!("{}", c.text());
            if let Some(p) = &run.json {
                write_out(p, &serde_json::to_string_pretty(&c)?)?;
            }
            Ok(())
        }
        Some(BenchCommand::Size {
            per_broker_mb_s,
            from_report,
            brokers,
            target_mb_s,
            record_bytes,
            replication_factor,
            domains,
            headroom,
            broker_hour_price,
            regions,
            groups_per_region,
            local_leader_share,
            no_follower_fetching,
            inter_region_gb_price,
            json,
        }) => {
            let layout = TrafficInput {
                target_mb_s,
                record_bytes,
                replication_factor,
                regions,
                groups_per_region,
                local_leader_share,
                follower_fetching: !no_follower_fetching,
                gb_price: inter_region_gb_price,
            };
            // The same layout as a stretched Kafka cluster runs by default: leaders spread
            // over the regions, consumers reading from leaders.
            let kafka = TrafficInput {
                local_leader_share: 1.0 / f64::from(regions.max(1)),
                follower_fetching: false,
                ..layout.clone()
            };
            let traffic = if regions > 1 {
                Some((inter_region(&layout).map_err(|e| anyhow!(e))?, inter_region(&kafka).map_err(|e| anyhow!(e))?))
            } else {
                None
            };
            let per_broker_mb_s = match (per_broker_mb_s, from_report) {
                (Some(v), _) => v,
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
                    let v: serde_json::Value = serde_json::from_str(&text).context("parsing the report")?;
                    let mb = v["produce"]["mb_per_s"].as_f64().context("report has no produce.mb_per_s")?;
                    mb / brokers.max(1) as f64
                }
                (None, None) => bail!("give --per-broker-mb-s or --from-report"),
            };
            let input = SizeInput {
                per_broker_mb_s,
                target_mb_s,
                record_bytes,
                replication_factor,
                domains,
                headroom,
                broker_hour_price,
            };
            let out = size(&input).map_err(|e| anyhow!(e))?;
            if json {
                let (between, kafka_default) = traffic.unzip();
                let all = serde_json::json!({
                    "input": input, "output": out, "layout": layout,
                    "between_regions": between, "between_regions_leaders_spread_reads_from_leaders": kafka_default,
                });
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                println!(
                    "{} brokers ({} per failure domain x {domains}) for {target_mb_s} MB/s at {per_broker_mb_s:.1} MB/s per broker, rf {replication_factor}, {:.0}% headroom",
                    out.brokers,
                    out.brokers_per_domain,
                    headroom * 100.0
                );
                println!(
                    "utilisation {:.0}% normally, {:.0}% after losing one failure domain",
                    out.utilisation_normal * 100.0,
                    out.utilisation_after_domain_loss * 100.0
                );
                if let (Some(h), Some(m)) = (out.cost_per_hour, out.cost_per_million_records) {
                    println!("cost {h:.2} per hour, {m:.6} per million {record_bytes}-byte records");
                }
                if let Some((t, k)) = &traffic {
                    print_traffic("between regions", t, record_bytes);
                    print_traffic("leaders spread, reads from leaders (a stretched Kafka's defaults)", k, record_bytes);
                }
            }
            Ok(())
        }
    }
}
