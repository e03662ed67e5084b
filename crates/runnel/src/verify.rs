//! `runnel verify`: run the queue workload against a cluster while faults are injected
//! from outside, then check the history. Exits non-zero when the checker finds anything.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use runnel_verify::workload::{self, VerifyConfig};

#[derive(Args)]
pub struct VerifyArgs {
    /// Any Kafka-compatible bootstrap address.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Topic to create for the run; default runnel-verify-<pid>.
    #[arg(long)]
    topic: Option<String>,
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    #[arg(long, default_value_t = 1)]
    replication_factor: i16,
    #[arg(long, default_value_t = 2)]
    producers: usize,
    #[arg(long, default_value_t = 2)]
    consumers: usize,
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

pub async fn main(a: VerifyArgs) -> Result<()> {
    let cfg = VerifyConfig {
        bootstrap: a.bootstrap.clone(),
        topic: a.topic.clone().unwrap_or_else(|| format!("runnel-verify-{}", std::process::id())),
        partitions: a.partitions.max(1),
        replication_factor: a.replication_factor,
        producers: a.producers.max(1),
        consumers: a.consumers,
        batch: a.batch.max(1),
        rate: a.rate,
        duration: Duration::from_secs_f64(a.duration.max(0.0)),
        retry_for: Duration::from_secs_f64(a.retry_for.max(0.0)),
    };
    let history = match &a.check_history {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?
        }
        None => workload::run(cfg).await?,
    };
    if let Some(p) = &a.history {
        std::fs::write(p, serde_json::to_string(&history)?).with_context(|| format!("writing {}", p.display()))?;
    }
    let report = runnel_verify::check(&history);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    println!(
        "sends: {} ok, {} failed, {} unknown ({} of those found in the log); {} records read",
        report.sends_ok, report.sends_failed, report.sends_unknown, report.unknown_present, report.records_read
    );
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
