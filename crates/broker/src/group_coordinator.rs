//! Group coordinators in a cluster. Groups live in the replicated `__consumer_offsets`
//! topic; a group's coordinator is the leader of the partition its id hashes to (as in
//! Kafka). That broker reads the partition back when it starts leading it and drops its
//! groups when it stops, so a coordinator that dies or is cut off is replaced by the new
//! partition leader, with every acknowledged commit (a Raft-committed write) in place.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::offsets_log::{topic_configs, OFFSETS_TOPIC};
use runnel_controller::BrokerInfo;

/// How often a broker compares the offsets partitions it leads with those it serves.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);

/// The broker coordinating `group`: the leader of its offsets-log partition. The first
/// lookup creates the topic through the controller, once enough brokers are registered
/// to place `offsets.topic.replication.factor` replicas; until then, and while the
/// partition has no leader, the answer is COORDINATOR_NOT_AVAILABLE and clients retry.
pub fn locate(b: &Broker, group: &str) -> Result<BrokerInfo, (ResponseError, String)> {
    let unavailable = |msg: String| (ResponseError::CoordinatorNotAvailable, msg);
    let controller = &b.controller;
    let brokers = controller.live_brokers();
    let Some(topic) = b.catalog.topic(OFFSETS_TOPIC) else {
        let (rf, partitions, configs) = {
            let s = b.catalog.settings();
            // Groups must work whatever the topology; an unsafe placement is logged.
            let mut configs = topic_configs(&s);
            configs.insert("placement.unsafe.allow".into(), "true".into());
            // A cluster of one has one replica to give, as Kafka's single-node config sets.
            let rf = if controller.single { 1 } else { s.i64("offsets.topic.replication.factor") };
            (rf, s.i64("offsets.topic.num.partitions"), configs)
        };
        if (brokers.len() as i64) < rf {
            return Err(unavailable(format!(
                "{OFFSETS_TOPIC} needs {rf} brokers (offsets.topic.replication.factor), {} are registered and not fenced",
                brokers.len()
            )));
        }
        if !b.offsets_creating.swap(true, Ordering::AcqRel) {
            let (controller, creating) = (controller.clone(), b.offsets_creating.clone());
            tokio::spawn(async move {
                let created =
                    controller.create_topic(OFFSETS_TOPIC, partitions as i32, rf as i16, None, configs, false);
                if let Err((code, msg)) = created.await {
                    if code != ResponseError::TopicAlreadyExists {
                        warn!(?code, %msg, "creating {OFFSETS_TOPIC} failed");
                    }
                }
                creating.store(false, Ordering::Release);
            });
        }
        return Err(unavailable(format!("{OFFSETS_TOPIC} is being created")));
    };
    let p = b.group_coordinator.partition_for(group);
    let part = topic.partitions.get(p as usize).ok_or_else(|| {
        unavailable(format!("{OFFSETS_TOPIC} has {} partitions, the group needs {p}", topic.partitions.len()))
    })?;
    let (leader, _) = b.partition_leader(part);
    brokers
        .into_iter()
        .find(|info| info.id == leader)
        .ok_or_else(|| unavailable(format!("{OFFSETS_TOPIC}-{p} has no leader right now")))
}

/// Waits (at most `limit`) until the coordinator serves every offsets partition this broker
/// leads, so that a broker that leads them at start (a cluster of one always does) answers
/// its first group requests with the groups read back, not NOT_COORDINATOR.
pub async fn until_led_partitions_loaded(b: &Broker, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let loaded = b.group_coordinator.loaded_partitions();
        let pending = b.catalog.topic(OFFSETS_TOPIC).is_some_and(|topic| {
            topic.partitions.iter().any(|p| p.leader_error().is_none() && loaded.binary_search(&p.index).is_err())
        });
        if !pending || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Keeps this broker's coordinator serving exactly the offsets partitions it leads: a
/// partition is read back once its leader's high watermark covers an entry of the leader's
/// own term (so every earlier commit is readable) and dropped as soon as leadership moves
/// or the term changes.
pub async fn follow_leaders(broker: Weak<Broker>) {
    let mut served: HashMap<i32, u64> = HashMap::new();
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            tokio::time::sleep(FOLLOW_INTERVAL).await;
        }
        let Some(b) = broker.upgrade() else { return };
        let mut leading: HashMap<i32, u64> = HashMap::new();
        if let Some(topic) = b.catalog.topic(OFFSETS_TOPIC) {
            for part in &topic.partitions {
                if let Some(term) = part.current_leader_term() {
                    leading.insert(part.index, term);
                }
            }
        }
        served.retain(|p, term| {
            let keep = leading.get(p) == Some(term);
            if !keep {
                b.group_coordinator.unload_partition(*p);
                info!(partition = *p, "stopped coordinating the groups of {OFFSETS_TOPIC}-{p}");
            }
            keep
        });
        for (p, term) in leading {
            if served.contains_key(&p) {
                continue;
            }
            let reader = b.clone();
            match tokio::task::spawn_blocking(move || reader.group_coordinator.load_partition(p)).await {
                Ok(Ok(records)) => {
                    info!(partition = p, term, records, "coordinating the groups of {OFFSETS_TOPIC}-{p}");
                    served.insert(p, term);
                }
                Ok(Err(e)) => warn!(partition = p, error = %e, "reading {OFFSETS_TOPIC}-{p} back failed; retrying"),
                Err(e) => warn!(partition = p, error = %e, "reading {OFFSETS_TOPIC}-{p} back panicked"),
            }
        }
    }
}
