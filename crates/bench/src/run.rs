//! One benchmark run: create the topic, start consumers at the log end, run the producers
//! to their count or duration, let the consumers catch up to the final log end, check what
//! the cluster stored, and build the report.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use runnel_client::{wall_ms, Cluster};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::consumer::{self, ConsumerPlan};
use crate::producer::{self, ProducerPlan};
use crate::report::Report;
use crate::stats::{Live, Recorder};
use crate::Workload;

/// How long consumers may take, after the producers finish, to read up to the log end.
const CATCH_UP: Duration = Duration::from_secs(60);
/// Upper bound on a run given by record count only.
const RUN_MAX: Duration = Duration::from_secs(3600);

pub async fn run(bootstrap: &str, w: Workload, progress: bool) -> Result<Report> {
    if w.producers == 0 {
        bail!("at least one producer is needed");
    }
    let w = Arc::new(w);
    let mut cluster = Cluster::connect(bootstrap, "runnel-bench-admin").await?;
    if !w.existing_topic {
        cluster
            .create_topic(&w.topic, w.partitions, w.replication_factor, &w.topic_configs)
            .await
            .with_context(|| format!("creating {}", w.topic))?;
    }
    let result = measure(&mut cluster, w.clone(), progress).await;
    if !w.existing_topic && !w.keep_topic {
        if let Err(e) = cluster.delete_topic(&w.topic).await {
            eprintln!("runnel bench: could not delete topic {}: {e:#}", w.topic);
        }
    }
    result
}

async fn measure(cluster: &mut Cluster, w: Arc<Workload>, progress: bool) -> Result<Report> {
    let layout = cluster.layout(&w.topic).await?;
    let start = cluster.end_offsets(&layout).await?;
    let live = Arc::new(Live::default());
    let t0 = Instant::now();
    let started_at = wall_ms();
    let run_for = if w.records.is_some() { RUN_MAX } else { Duration::from_secs_f64(w.duration_s.max(0.0)) };
    let deadline = t0 + run_for;

    let (end_tx, end_rx) = watch::channel(None);
    let mut consumers = JoinSet::new();
    for c in 0..w.consumers {
        let mine: BTreeMap<usize, i64> =
            start.iter().enumerate().filter(|(p, _)| p % w.consumers == c).map(|(p, o)| (p, *o)).collect();
        if mine.is_empty() {
            continue;
        }
        consumers.spawn(consumer::run(ConsumerPlan {
            topic: w.topic.clone(),
            layout: layout.clone(),
            addresses: cluster.brokers.clone(),
            start: mine,
            t0,
            index: c,
            live: live.clone(),
            end: end_rx.clone(),
            deadline: deadline + CATCH_UP,
        }));
    }

    let mut producers = JoinSet::new();
    for i in 0..w.producers {
        let share = |total: u64| total / w.producers as u64 + u64::from((i as u64) < total % w.producers as u64);
        producers.spawn(producer::run(ProducerPlan {
            workload: w.clone(),
            layout: layout.clone(),
            addresses: cluster.brokers.clone(),
            t0,
            deadline,
            records: w.records.map(share),
            rate: w.rate.map(|r| r / w.producers as f64),
            index: i,
            live: live.clone(),
        }));
    }

    let ticker = progress.then(|| {
        let live = live.clone();
        tokio::spawn(async move {
            let mut last = 0u64;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let produced = Live::get(&live.produced);
                eprint!(
                    "\r[{:>4}s] produced {:>12} ({:>9} rec/s)  consumed {:>12}  errors {:>6} ",
                    t0.elapsed().as_secs(),
                    produced,
                    produced - last,
                    Live::get(&live.consumed),
                    Live::get(&live.errors)
                );
                let _ = std::io::stderr().flush();
                last = produced;
            }
        })
    });

    let mut produce = Recorder::new(t0);
    while let Some(done) = producers.join_next().await {
        produce.merge(done.context("producer task")??);
    }
    let produce_elapsed = t0.elapsed();
    let mut end = cluster.end_offsets(&layout).await?;
    if w.acks == 0 {
        // Unanswered requests may still be in the brokers' hands (read, appended, or
        // appended and not yet fsynced, which is when the end offset moves): the end
        // offsets are read again until they account for every record sent, or hold still
        // for a second (a request refused or lost), 10 s at most.
        let settle = Instant::now() + Duration::from_secs(10);
        let mut still_since = Instant::now();
        while Instant::now() < settle && stored_since(&start, &end) < produce.records {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let again = cluster.end_offsets(&layout).await?;
            if again != end {
                still_since = Instant::now();
                end = again;
            } else if still_since.elapsed() >= Duration::from_secs(1) {
                break;
            }
        }
    }
    let _ = end_tx.send(Some(end.clone()));
    let mut e2e = Recorder::new(t0);
    while let Some(done) = consumers.join_next().await {
        e2e.merge(done.context("consumer task")??);
    }
    if let Some(t) = ticker {
        t.abort();
        eprintln!();
    }
    let stored = stored_since(&start, &end);
    Ok(Report::build(
        &cluster.bootstrap,
        &w,
        started_at,
        produce_elapsed,
        produce,
        (w.consumers > 0).then_some(e2e),
        stored,
    ))
}

/// Records stored between two readings of the end offsets.
fn stored_since(start: &[i64], end: &[i64]) -> u64 {
    end.iter().zip(start).map(|(e, s)| (e - s).max(0) as u64).sum()
}
