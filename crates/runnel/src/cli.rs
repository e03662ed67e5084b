//! `runnel topic`, `runnel group` and `runnel cluster`: everyday administration over the
//! Kafka protocol (`--bootstrap`), so they work against any Kafka-compatible cluster, as
//! Kafka's `kafka-topics`, `kafka-configs` and `kafka-consumer-groups` do.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use runnel_client::{Cluster, Tp};

#[derive(clap::Args)]
pub struct Target {
    /// A broker of the cluster, host:port (a comma-separated list: the first that answers).
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
}

#[derive(clap::Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// -1: the broker's default.replication.factor.
        #[arg(long, default_value_t = -1)]
        replication_factor: i16,
        /// A topic config, KEY=VALUE (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// List the topics with their partition count and replication factor.
    List {
        #[command(flatten)]
        target: Target,
        /// Also Kafka's internal topics.
        #[arg(long)]
        internal: bool,
    },
    /// A topic's partitions (leader, replicas, in-sync replicas) and configs set on it.
    Describe {
        #[command(flatten)]
        target: Target,
        name: String,
    },
    /// Delete a topic.
    Delete {
        #[command(flatten)]
        target: Target,
        name: String,
    },
    /// Set (--set KEY=VALUE) and remove (--delete KEY) a topic's config overrides.
    AlterConfig {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

#[derive(clap::Subcommand)]
pub enum GroupCommand {
    /// List the consumer groups with their state.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// A group's state, members, and per partition its committed offset, the log end and
    /// the lag.
    Describe {
        #[command(flatten)]
        target: Target,
        group: String,
    },
    /// Set an idle group's committed offsets on a topic's partitions: earliest, latest, an
    /// offset, or @TIMESTAMP_MS (the first record at or after that time).
    Seek {
        #[command(flatten)]
        target: Target,
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        to: String,
    },
    /// Delete an idle group and its committed offsets.
    Delete {
        #[command(flatten)]
        target: Target,
        group: String,
    },
}

#[derive(clap::Subcommand)]
pub enum ClusterCommand {
    /// The brokers by rack, the controller, and partition health (under-replicated and
    /// offline partitions).
    Status {
        #[command(flatten)]
        target: Target,
    },
}

async fn connect(target: &Target) -> Result<Cluster> {
    Cluster::connect(&target.bootstrap, "runnel-cli")
        .await
        .with_context(|| format!("connecting to {}", target.bootstrap))
}

fn key_value(s: &str) -> Result<(String, String)> {
    let (k, v) = s.split_once('=').with_context(|| format!("{s}: expected KEY=VALUE"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

fn list(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

pub async fn topic(cmd: TopicCommand) -> Result<()> {
    match cmd {
        TopicCommand::Create { target, name, partitions, replication_factor, configs } => {
            let configs: BTreeMap<String, String> = configs.iter().map(|c| key_value(c)).collect::<Result<_>>()?;
            connect(&target).await?.create_topic(&name, partitions, replication_factor, &configs).await?;
            println!("created topic {name}");
        }
        TopicCommand::List { target, internal } => {
            let topics = connect(&target).await?.topics(None).await?;
            println!("{:<40} {:>10} {:>8}", "topic", "partitions", "replicas");
            for t in topics.iter().filter(|t| internal || !t.internal) {
                let rf = t.partitions.first().map_or(0, |p| p.replicas.len());
                println!("{:<40} {:>10} {:>8}", t.name, t.partitions.len(), rf);
            }
        }
        TopicCommand::Describe { target, name } => {
            let c = connect(&target).await?;
            let topics = c.topics(Some(std::slice::from_ref(&name))).await?;
            let Some(t) = topics.first() else { bail!("topic {name} does not exist") };
            println!("topic {}: {} partitions", t.name, t.partitions.len());
            println!("{:>9} {:>7} {:<16} {:<16} status", "partition", "leader", "replicas", "in-sync");
            for p in &t.partitions {
                let status = if p.leader < 0 {
                    "offline"
                } else if p.isr.len() < p.replicas.len() {
                    "under-replicated"
                } else {
                    "ok"
                };
                println!("{:>9} {:>7} {:<16} {:<16} {status}", p.partition, p.leader, list(&p.replicas), list(&p.isr));
            }
            let set: Vec<_> = c.topic_configs(&name).await?.into_iter().filter(|e| e.source == 1).collect();
            if !set.is_empty() {
                println!("configs set on the topic:");
                for e in set {
                    println!("  {}={}", e.name, e.value.unwrap_or_default());
                }
            }
        }
        TopicCommand::Delete { target, name } => {
            connect(&target).await?.delete_topic(&name).await?;
            println!("deleted topic {name}");
        }
        TopicCommand::AlterConfig { target, name, set, delete } => {
            if set.is_empty() && delete.is_empty() {
                bail!("nothing to change: give --set KEY=VALUE or --delete KEY");
            }
            let set: Vec<(String, String)> = set.iter().map(|s| key_value(s)).collect::<Result<_>>()?;
            connect(&target).await?.alter_topic_configs(&name, &set, &delete).await?;
            println!("altered the configs of {name}");
        }
    }
    Ok(())
}

pub async fn group(cmd: GroupCommand) -> Result<()> {
    match cmd {
        GroupCommand::List { target } => {
            let groups = connect(&target).await?.list_groups().await?;
            println!("{:<40} {:<20} type", "group", "state");
            for g in groups {
                println!("{:<40} {:<20} {}", g.group, g.state, g.kind);
            }
        }
        GroupCommand::Describe { target, group } => {
            let c = connect(&target).await?;
            let (state, members) = c.describe_group(&group).await?;
            println!("group {group}: {state}, {} member(s)", members.len());
            for m in &members {
                println!("  member {} (client {}, {})", m.member_id, m.client_id, m.host);
            }
            let committed = c.committed(&group).await?;
            let parts: Vec<Tp> = committed.keys().cloned().collect();
            let ends = if parts.is_empty() { BTreeMap::new() } else { c.offsets_at(&parts, -1).await? };
            println!("{:<32} {:>9} {:>12} {:>12} {:>10}", "topic", "partition", "committed", "end", "lag");
            let mut total = 0;
            for ((topic, p), offset) in &committed {
                let end = ends.get(&(topic.clone(), *p)).copied();
                let lag = end.map(|e| (e - offset).max(0));
                total += lag.unwrap_or(0);
                let show = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
                println!("{topic:<32} {p:>9} {offset:>12} {:>12} {:>10}", show(end), show(lag));
            }
            println!("total lag {total}");
        }
        GroupCommand::Seek { target, group, topic, to } => {
            let c = connect(&target).await?;
            let topics = c.topics(Some(std::slice::from_ref(&topic))).await?;
            let Some(t) = topics.first() else { bail!("topic {topic} does not exist") };
            let parts: Vec<Tp> = t.partitions.iter().map(|p| (topic.clone(), p.partition)).collect();
            let offsets = match to.as_str() {
                "earliest" => c.offsets_at(&parts, -2).await?,
                "latest" => c.offsets_at(&parts, -1).await?,
                ts if ts.starts_with('@') => {
                    let ms: i64 = ts[1..].parse().with_context(|| format!("--to {ts}: expected @TIMESTAMP_MS"))?;
                    // No record at or after the time: the log end, as Kafka's tool does.
                    let at = c.offsets_at(&parts, ms).await?;
                    let ends = c.offsets_at(&parts, -1).await?;
                    at.into_iter().map(|(tp, o)| (tp.clone(), if o < 0 { ends[&tp] } else { o })).collect()
                }
                n => {
                    let offset: i64 = n
                        .parse()
                        .with_context(|| format!("--to {n}: expected earliest, latest, an offset or @TIMESTAMP_MS"))?;
                    if offset < 0 {
                        bail!("--to {n}: an offset is 0 or more");
                    }
                    parts.iter().map(|tp| (tp.clone(), offset)).collect()
                }
            };
            c.commit_offsets(&group, &offsets).await?;
            for ((t, p), o) in &offsets {
                println!("{group}: {t}-{p} at {o}");
            }
        }
        GroupCommand::Delete { target, group } => {
            connect(&target).await?.delete_group(&group).await?;
            println!("deleted group {group}");
        }
    }
    Ok(())
}

pub async fn cluster(cmd: ClusterCommand) -> Result<()> {
    let ClusterCommand::Status { target } = cmd;
    let c = connect(&target).await?;
    let (cluster_id, controller, brokers) = c.describe_cluster().await?;
    let topics = c.topics(None).await?;
    println!("cluster {cluster_id}, controller {controller}");
    let mut by_rack: BTreeMap<String, Vec<&runnel_client::BrokerInfo>> = BTreeMap::new();
    for b in &brokers {
        by_rack.entry(b.rack.clone().unwrap_or_else(|| "(no rack)".into())).or_default().push(b);
    }
    let mut leads: BTreeMap<i32, usize> = BTreeMap::new();
    let mut holds: BTreeMap<i32, usize> = BTreeMap::new();
    let mut partitions = 0;
    // topic -> (under-replicated partitions, offline partitions)
    let mut unhealthy: BTreeMap<&str, (Vec<i32>, Vec<i32>)> = BTreeMap::new();
    for t in &topics {
        for p in &t.partitions {
            partitions += 1;
            *leads.entry(p.leader).or_default() += 1;
            for r in &p.replicas {
                *holds.entry(*r).or_default() += 1;
            }
            if p.leader < 0 {
                unhealthy.entry(&t.name).or_default().1.push(p.partition);
            } else if p.isr.len() < p.replicas.len() {
                unhealthy.entry(&t.name).or_default().0.push(p.partition);
            }
        }
    }
    let line = |id: i32, address: &str, tags: &[&str]| {
        println!(
            "  broker {id:>3} {address:<22} leads {:>5}, holds {:>5} replicas {}",
            leads.get(&id).copied().unwrap_or(0),
            holds.get(&id).copied().unwrap_or(0),
            tags.join(" ")
        )
    };
    for (rack, bs) in &by_rack {
        println!("rack {rack}");
        for b in bs {
            let mut tags = Vec::new();
            if b.id == controller {
                tags.push("controller");
            }
            if b.fenced {
                tags.push("fenced");
            }
            line(b.id, &b.address, &tags);
        }
    }
    // Brokers that hold replicas but are not listed: fenced (Kafka lists only live ones) or
    // gone.
    let listed: BTreeSet<i32> = brokers.iter().map(|b| b.id).collect();
    let missing: Vec<i32> = holds.keys().copied().filter(|id| !listed.contains(id)).collect();
    if !missing.is_empty() {
        println!("not live (fenced or gone)");
        for id in missing {
            line(id, "-", &["fenced"]);
        }
    }
    let (under, offline) =
        unhealthy.values().fold((0, 0), |(u, o), (under, offline)| (u + under.len(), o + offline.len()));
    println!("{} topics, {partitions} partitions: {under} under-replicated, {offline} offline", topics.len());
    let few = |ps: &[i32]| {
        let shown: Vec<String> = ps.iter().take(20).map(i32::to_string).collect();
        format!("{}{}", shown.join(","), if ps.len() > 20 { ",..." } else { "" })
    };
    for (topic, (under, offline)) in &unhealthy {
        if !under.is_empty() {
            println!("  {topic}: {} under-replicated (partitions {})", under.len(), few(under));
        }
        if !offline.is_empty() {
            println!("  {topic}: {} offline (partitions {})", offline.len(), few(offline));
        }
    }
    Ok(())
}
