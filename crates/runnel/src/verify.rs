//! `runnel verify`: run the queue workload against a cluster while faults are injected
//! from outside, then check the history. Exits non-zero when the checker finds anything.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use runnel_verify::{workload, ClientRegion, History, VerifyConfig};

#[derive(Args)]
pub struct VerifyArgs {
    /// Any Kafka-compatible bootstrap address.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub(crate) bootstrap: String,
    /// Topic to create for the run; default runnel-verify-<pid>.
    #[arg(long)]
    topic: Option<String>,
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Replicas per partition (default: the cluster's default.replication.factor).
    #[arg(long)]
    replication_factor: Option<i16>,
    #[arg(long, default_value_t = 2)]
    producers: usize,
    /// Consumers with assigned partitions (no group).
    #[arg(long, default_value_t = 2)]
    consumers: usize,
    /// Consumers in one consumer group subscribed to the topic (0: none).
    #[arg(long, default_value_t = 2)]
    group_consumers: usize,
    /// The group's id; default runnel-verify-<pid>.
    #[arg(long)]
    group: Option<String>,
    /// Values per produce request.
    #[arg(long, default_value_t = 5)]
    batch: usize,
    /// Produce requests per second per producer.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seconds of producing.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Seconds a request is retried (same sequence numbers) before its outcome is unknown.
    #[arg(long, default_value_t = 30.0)]
    retry_for: f64,
    /// Seconds one attempt waits for its answer before the connection is given up.
    #[arg(long, default_value_t = 2.0)]
    request_timeout: f64,
    /// The transactional workload: each producer writes in transactions (two partitions
    /// each, every fifth aborted) and every reader reads with read_committed; the checker
    /// also looks for aborted reads and transactions read in part.
    #[arg(long)]
    transactional: bool,
    /// Client regions, comma-separated: producer, consumer and group member i run in
    /// region i mod R, send its name as client.rack (reading from replicas there, KIP-392),
    /// and each region has a consumer group of its own. The report counts the bytes read
    /// per region.
    #[arg(long, value_delimiter = ',')]
    pub(crate) client_regions: Vec<String>,
    /// Draw the availability chart (operations per second and latency over time, faults
    /// shaded) into this SVG file.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Write the checker's report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the whole history (every send and poll) as JSON here.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Run no workload: check a history written earlier with --history.
    #[arg(long, conflicts_with = "history")]
    check_history: Option<PathBuf>,
}

impl VerifyArgs {
    pub fn config(&self, bootstrap: &str) -> VerifyConfig {
        let pid = std::process::id();
        VerifyConfig {
            bootstrap: bootstrap.to_string(),
            topic: self.topic.clone().unwrap_or_else(|| format!("runnel-verify-{pid}")),
            partitions: self.partitions.max(1),
            replication_factor: self.replication_factor.unwrap_or(-1),
            producers: self.producers.max(1),
            consumers: self.consumers,
            group_consumers: self.group_consumers,
            group: self.group.clone().unwrap_or_else(|| format!("runnel-verify-{pid}")),
            batch: self.batch.max(1),
            rate: self.rate,
            duration: Duration::from_secs_f64(self.duration.max(0.0)),
            retry_for: Duration::from_secs_f64(self.retry_for.max(0.0)),
            request_timeout: Duration::from_secs_f64(self.request_timeout.max(0.1)),
            transactional: self.transactional,
            regions: self.client_regions.iter().map(|r| ClientRegion { name: r.clone(), netns: None }).collect(),
            broker_regions: Default::default(),
        }
    }
}

pub async fn main(a: VerifyArgs) -> Result<()> {
    let history = match &a.check_history {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?
        }
        None => workload::run(a.config(&a.bootstrap), Instant::now()).await?,
    };
    report(&history, &a, "runnel verify")
}

/// Writes the history, the report and the chart where asked, prints the summary, and fails
/// when the checker found anything.
pub fn report(history: &History, a: &VerifyArgs, title: &str) -> Result<()> {
    judge(&print_report(history, a, title)?)
}

/// Fails when the checker found anything, printing what and the first examples.
pub fn judge(report: &runnel_verify::Report) -> Result<()> {
    if report.valid() {
        println!("no anomalies");
        return Ok(());
    }
    for (kind, n) in &report.counts {
        println!("{kind}: {n}");
        for e in report.examples.get(kind).into_iter().flatten() {
            println!("    {e:?}");
        }
    }
    bail!("the history has anomalies")
}

/// Checks the history; writes the history, the report and the chart where asked and prints
/// the summary, whatever the checker found.
pub fn print_report(history: &History, a: &VerifyArgs, title: &str) -> Result<runnel_verify::Report> {
    if let Some(p) = &a.history {
        std::fs::write(p, serde_json::to_string(history)?).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.chart {
        std::fs::write(p, runnel_verify::chart::svg(history, title))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    let report = runnel_verify::check(history);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    println!(
        "sends: {} ok, {} failed, {} unknown ({} of those found in the log); {} records read; \
         {} acknowledged values not read while the workload ran",
        report.sends_ok,
        report.sends_failed,
        report.sends_unknown,
        report.unknown_present,
        report.records_read,
        report.unseen
    );
    if !history.txns.is_empty() {
        let (committed, aborted, unknown) = report.txns;
        println!("transactions: {committed} committed, {aborted} never committed, {unknown} unknown (read_committed)");
    }
    if let Some(c) = &history.copier {
        println!(
            "copier: {} values below group {}'s committed offsets, each to be copied exactly once",
            report.copied, c.group
        );
    }
    if !report.faults.is_empty() {
        let (p50, p99) = report.baseline_send_ms;
        println!("sends away from faults: p50 {p50} ms, p99 {p99} ms");
    }
    for f in &report.faults {
        println!(
            "{:>7.1}s-{:.1}s {}: sends p50 {} ms, p99 {} ms; acknowledged sends stalled {:.2} s at most ({}); \
             slowest send {:.2} s; {} unknown and {} failed operations",
            f.start_ms as f64 / 1000.0,
            f.end_ms as f64 / 1000.0,
            f.fault,
            f.p50_send_ms,
            f.p99_send_ms,
            f.longest_stall_ms as f64 / 1000.0,
            f.stalled_stream,
            f.slowest_send_ms as f64 / 1000.0,
            f.unknown,
            f.failed
        );
        if let Some(r) = &f.recovery {
            let at = |ms: Option<u64>| {
                ms.map_or("not within the run".to_string(), |ms| format!("{:.2} s", ms as f64 / 1000.0))
            };
            println!(
                "          after the heal: the replicas cut off caught up in {}; every partition led by its preferred leader in {}",
                at(r.caught_up_ms),
                at(r.leaders_back_ms)
            );
        }
        for (region, r) in &f.regions {
            println!(
                "          clients in {region}: acknowledged sends stalled {:.2} s at most; \
                 consumers read again within {:.2} s; group members committed again within {:.2} s",
                r.longest_stall_ms as f64 / 1000.0,
                r.longest_read_gap_ms as f64 / 1000.0,
                r.longest_commit_gap_ms as f64 / 1000.0
            );
        }
    }
    if history.fetched.keys().any(|r| !r.is_empty()) {
        let (cross, all) = history.cross_region_fetched();
        println!("consumers read {all} bytes of records, {cross} of them from brokers in another region");
    }
    Ok(report)
}
