//! The admin API's JSON: health, readiness, and the cluster as this broker sees it (brokers
//! with their failure domains, partitions with their leaders and replicas placed on them).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use runnel_broker::broker::Broker;
use runnel_broker::replica_manager::isr_lag_ticks;
use serde::{Deserialize, Serialize};

/// A broker as `/v1/brokers` lists it.
#[derive(Serialize)]
pub struct BrokerView {
    pub id: i32,
    pub host: String,
    pub port: u16,
    /// Failure domains, outermost first (`region`, `zone`, `rack`, `host`).
    pub location: BTreeMap<String, String>,
    pub fenced: bool,
    pub controller: bool,
    /// `maintenance` or `shutdown` while its leaderships are drained away, else null.
    pub draining: Option<&'static str>,
    /// Its admin API (`http://host:port`), null without one.
    pub admin: Option<String>,
}

/// A partition as `/v1/partitions` lists it.
#[derive(Serialize)]
pub struct PartitionView {
    pub topic: String,
    pub partition: i32,
    /// -1 when no leader is known.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<ReplicaView>,
    pub under_replicated: bool,
}

#[derive(Serialize)]
pub struct ReplicaView {
    pub broker: i32,
    pub in_sync: bool,
    pub location: BTreeMap<String, String>,
}

/// Whether the broker is ready, and if not, why.
#[derive(Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// What keeps it from being ready (empty when ready).
    pub waiting_for: Vec<String>,
}

pub fn brokers(b: &Broker) -> Vec<BrokerView> {
    let controller = b.controller();
    let live: BTreeSet<i32> = controller.live_brokers().into_iter().map(|i| i.id).collect();
    let active = controller.controller();
    let draining = controller.draining();
    let mut out: Vec<BrokerView> = controller
        .brokers()
        .into_iter()
        .map(|i| BrokerView {
            id: i.id,
            host: i.host,
            port: i.port,
            location: i.location.into_iter().collect(),
            fenced: !live.contains(&i.id),
            controller: active == Some(i.id),
            draining: draining.get(&i.id).map(|d| crate::ops::drain_name(*d)),
            admin: (!i.admin.is_empty()).then_some(i.admin),
        })
        .collect();
    out.sort_by_key(|v| v.id);
    out
}

pub fn partitions(b: &Broker, topic: Option<&str>) -> Vec<PartitionView> {
    let locations: BTreeMap<i32, BTreeMap<String, String>> =
        b.controller().brokers().into_iter().map(|i| (i.id, i.location.into_iter().collect())).collect();
    let lag_ticks = isr_lag_ticks(&b.catalog.settings());
    let mut topics = b.catalog.topics_snapshot();
    topics.retain(|t| topic.is_none_or(|name| *t.name == *name));
    topics.sort_by(|x, y| x.name.cmp(&y.name));
    let mut out = Vec::new();
    for t in topics {
        for p in &t.partitions {
            let (leader, leader_epoch) = b.partition_leader(p);
            let isr: BTreeSet<i32> = b.partition_isr(p, lag_ticks).into_iter().collect();
            let replicas: Vec<ReplicaView> = p
                .replicas
                .iter()
                .map(|r| ReplicaView {
                    broker: *r,
                    in_sync: isr.contains(r),
                    location: locations.get(r).cloned().unwrap_or_default(),
                })
                .collect();
            let under_replicated = replicas.iter().any(|r| !r.in_sync);
            out.push(PartitionView {
                topic: t.name.to_string(),
                partition: p.index,
                leader,
                leader_epoch,
                replicas,
                under_replicated,
            });
        }
    }
    out
}

/// Ready: serving clients, registered and not fenced, and every partition with a replica
/// here has a leader and counts this replica in sync (its leader's view: caught up within
/// `replica.lag.time.max.ms`), so taking another broker down next loses no majority.
pub fn readiness(b: &Broker) -> Readiness {
    let mut waiting_for = Vec::new();
    if !b.serving.load(Ordering::Acquire) {
        waiting_for.push("not serving clients (starting or shutting down)".to_string());
    }
    let me = b.node_id();
    if !b.controller().live_brokers().iter().any(|i| i.id == me) {
        waiting_for.push("not registered, or fenced by the controller".to_string());
    }
    let lag_ticks = isr_lag_ticks(&b.catalog.settings());
    let (mut leaderless, mut behind) = (0, 0);
    for t in b.catalog.topics_snapshot() {
        for p in t.partitions.iter().filter(|p| !p.is_remote()) {
            if b.partition_leader(p).0 < 0 {
                leaderless += 1;
            } else if !b.partition_isr(p, lag_ticks).contains(&me) {
                behind += 1;
            }
        }
    }
    if leaderless > 0 {
        waiting_for.push(format!("{leaderless} partition(s) here without a leader"));
    }
    if behind > 0 {
        waiting_for.push(format!("{behind} replica(s) here not yet in sync"));
    }
    Readiness { ready: waiting_for.is_empty(), waiting_for }
}

/// `/v1/groups`: the groups, and the brokers whose groups are missing (not answering).
#[derive(Serialize, Deserialize)]
pub struct Groups {
    pub groups: Vec<GroupView>,
    pub unreachable: Vec<i32>,
}

/// A consumer group as `/v1/groups` lists it.
#[derive(Serialize, Deserialize, Clone)]
pub struct GroupView {
    pub group: String,
    /// `classic` or `consumer` (KIP-848).
    #[serde(rename = "type")]
    pub group_type: String,
    pub state: String,
    /// The broker coordinating it.
    pub coordinator: i32,
    pub members: usize,
    /// Sum of the partitions' lag below.
    pub lag: i64,
    pub partitions: Vec<GroupPartitionView>,
}

/// One partition a group has committed an offset for.
#[derive(Serialize, Deserialize, Clone)]
pub struct GroupPartitionView {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    /// The high watermark as this broker knows it (null when it holds no replica).
    pub end: Option<i64>,
    /// end - committed (null without an end).
    pub lag: Option<i64>,
}

/// The groups this broker coordinates, with their committed offsets and lag.
pub fn local_groups(b: &Broker) -> Vec<GroupView> {
    let me = b.node_id();
    let mut out = Vec::new();
    for g in b.group_coordinator.list() {
        let members = match g.group_type {
            "consumer" => b.group_coordinator.describe_consumer(&g.group_id).ok().flatten().map(|d| d.members.len()),
            _ => b.group_coordinator.describe(&g.group_id).ok().flatten().map(|d| d.members.len()),
        };
        let mut partitions = Vec::new();
        if let Ok(offsets) = b.group_coordinator.fetch(&g.group_id, None) {
            for ((topic, partition), committed) in offsets {
                let Some(committed) = committed else { continue };
                let end = b
                    .catalog
                    .topic(&topic)
                    .and_then(|t| t.partitions.get(partition.max(0) as usize).cloned())
                    .filter(|p| !p.is_remote())
                    .map(|p| p.high_watermark());
                let lag = end.map(|e| (e - committed.offset).max(0));
                partitions.push(GroupPartitionView { topic, partition, committed: committed.offset, end, lag });
            }
        }
        partitions.sort_by(|x, y| (&x.topic, x.partition).cmp(&(&y.topic, y.partition)));
        out.push(GroupView {
            group: g.group_id,
            group_type: g.group_type.to_string(),
            state: g.state.to_string(),
            coordinator: me,
            members: members.unwrap_or(0),
            lag: partitions.iter().filter_map(|p| p.lag).sum(),
            partitions,
        });
    }
    out.sort_by(|x, y| x.group.cmp(&y.group));
    out
}
