//! `runnel decommission --bootstrap HOST:PORT --broker N`: moves every partition replica off
//! broker N before it leaves the cluster, with the Kafka protocol only (Metadata,
//! AlterPartitionReassignments, ListPartitionReassignments), so the broker can then be
//! stopped without any partition losing a replica. Each of N's replicas goes to a live
//! broker that does not hold the partition yet: one in N's rack (zone) when there is one, so
//! the spread over failure domains stays as it was, else the least loaded. Waits until the
//! moves are finished and no partition lists N.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ListPartitionReassignmentsRequest, MetadataRequest,
};
use runnel_client::{topic_name, Connection};

#[derive(clap::Args)]
pub struct DecommissionArgs {
    /// A broker of the cluster, host:port (a comma-separated list: the first that answers).
    #[arg(long)]
    bootstrap: String,
    /// The broker to empty.
    #[arg(long)]
    broker: i32,
    /// Give up waiting for the moves after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Print the moves without making them.
    #[arg(long)]
    dry_run: bool,
}

use runnel_controller::{replace_broker, Assignment};

pub async fn main(args: DecommissionArgs) -> Result<()> {
    let conn = Connection::connect_any(&args.bootstrap, "runnel-decommission", 4).await?;
    let (racks, assignment) = describe(&conn).await?;
    let gone = args.broker;
    let moves = replace_broker(&racks, &assignment, gone).map_err(anyhow::Error::msg)?;
    if moves.is_empty() {
        println!("broker {gone} holds no replicas");
        return Ok(());
    }
    for ((topic, p), to) in &moves {
        println!("{topic}-{p}: {:?} -> {to:?}", assignment[&(topic.clone(), *p)]);
    }
    if args.dry_run {
        return Ok(());
    }
    let mut by_topic: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
    for ((topic, p), to) in &moves {
        by_topic.entry(topic).or_default().push(
            ReassignablePartition::default()
                .with_partition_index(*p)
                .with_replicas(Some(to.iter().map(|b| BrokerId(*b)).collect())),
        );
    }
    let req = AlterPartitionReassignmentsRequest::default().with_timeout_ms(60_000).with_topics(
        by_topic
            .into_iter()
            .map(|(t, ps)| ReassignableTopic::default().with_name(topic_name(t)).with_partitions(ps))
            .collect(),
    );
    let resp = conn.call(&req, 0).await.context("AlterPartitionReassignments")?;
    if resp.error_code != 0 {
        bail!("AlterPartitionReassignments: {}", error_text(resp.error_code, resp.error_message.as_deref()));
    }
    for t in &resp.responses {
        if let Some(p) = t.partitions.iter().find(|p| p.error_code != 0) {
            bail!(
                "moving {}-{}: {}",
                t.name.as_str(),
                p.partition_index,
                error_text(p.error_code, p.error_message.as_deref())
            );
        }
    }
    println!("{} moves started; waiting for them to finish", moves.len());
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let mut shown = None;
    loop {
        let ongoing = conn
            .call(&ListPartitionReassignmentsRequest::default().with_timeout_ms(30_000).with_topics(None), 0)
            .await
            .context("ListPartitionReassignments")?
            .topics
            .iter()
            .map(|t| t.partitions.len())
            .sum::<usize>();
        let (_, now) = describe(&conn).await?;
        let left = now.values().filter(|r| r.contains(&gone)).count();
        if shown != Some((ongoing, left)) {
            println!(
                "{} of {} moves finished; {left} partitions still list broker {gone}",
                moves.len() - left.min(moves.len()),
                moves.len()
            );
            shown = Some((ongoing, left));
        }
        if ongoing == 0 && left == 0 {
            println!("broker {gone} holds no replicas: it can be stopped");
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("after {} s, {left} partitions still list broker {gone} ({ongoing} moves under way)", args.timeout_s);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Live brokers with their racks, and every partition's replicas.
async fn describe(conn: &Connection) -> Result<(BTreeMap<i32, Option<String>>, Assignment)> {
    let resp = conn.call(&MetadataRequest::default().with_topics(None), 12).await.context("Metadata")?;
    let racks = resp.brokers.iter().map(|b| (b.node_id.0, b.rack.as_ref().map(|r| r.to_string()))).collect();
    let mut assignment = Assignment::new();
    for t in &resp.topics {
        let Some(name) = &t.name else { continue };
        for p in &t.partitions {
            assignment.insert((name.to_string(), p.partition_index), p.replica_nodes.iter().map(|b| b.0).collect());
        }
    }
    Ok((racks, assignment))
}

fn error_text(code: i16, message: Option<&str>) -> String {
    let name = ResponseError::try_from_code(code).map_or_else(|| format!("error {code}"), |e| format!("{e:?}"));
    match message {
        Some(m) => format!("{name}: {m}"),
        None => name,
    }
}
