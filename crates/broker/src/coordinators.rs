//! Coordinators in a cluster: the group coordinator keeps groups in the replicated
//! `__consumer_offsets` topic, the transaction coordinator keeps transactional ids in
//! `__transaction_state`, the share coordinator keeps share-partitions' state in
//! `__share_group_state`. A key's coordinator is the leader of the partition it hashes to
//! (as in Kafka). That broker reads the partition back when it starts leading it and drops
//! its state when it stops, so a coordinator that dies or is cut off is replaced by the new
//! partition leader, with every acknowledged change (a Raft-committed write) in place.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::offsets_log::{topic_configs, OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC};
use runnel_controller::BrokerInfo;

/// How often a broker compares the partitions it leads with those it serves.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);

/// Which coordinator, and so which internal topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Groups,
    Transactions,
    ShareState,
}

impl Kind {
    pub fn topic(self) -> &'static str {
        match self {
            Kind::Groups => OFFSETS_TOPIC,
            Kind::Transactions => TXN_TOPIC,
            Kind::ShareState => SHARE_STATE_TOPIC,
        }
    }

    /// The broker settings for (partitions, replication factor, segment bytes).
    fn settings(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Groups => {
                ("offsets.topic.num.partitions", "offsets.topic.replication.factor", "offsets.topic.segment.bytes")
            }
            Kind::Transactions => (
                "transaction.state.log.num.partitions",
                "transaction.state.log.replication.factor",
                "transaction.state.log.segment.bytes",
            ),
            Kind::ShareState => (
                "share.coordinator.state.topic.num.partitions",
                "share.coordinator.state.topic.replication.factor",
                "share.coordinator.state.topic.segment.bytes",
            ),
        }
    }

    fn creating(self, b: &Broker) -> &Arc<AtomicBool> {
        match self {
            Kind::Groups => &b.offsets_creating,
            Kind::Transactions => &b.txn_state_creating,
            Kind::ShareState => &b.share_state_creating,
        }
    }

    fn partition_for(self, b: &Broker, key: &str) -> i32 {
        match self {
            Kind::Groups => b.group_coordinator.partition_for(key),
            Kind::Transactions => b.txn_coordinator.partition_for(key),
            Kind::ShareState => b.share_state.partition_for(key),
        }
    }

    fn loaded_partitions(self, b: &Broker) -> Vec<i32> {
        match self {
            Kind::Groups => b.group_coordinator.loaded_partitions(),
            Kind::Transactions => b.txn_coordinator.loaded_partitions(),
            Kind::ShareState => b.share_state.loaded_partitions(),
        }
    }

    /// Reads partition `p` back (blocking: call off the async workers).
    fn load(self, b: &Broker, p: i32) -> Result<usize, String> {
        match self {
            Kind::Groups => b.group_coordinator.load_partition(p),
            Kind::Transactions => b.txn_coordinator.load_partition(p),
            Kind::ShareState => b.share_state.load_partition(p),
        }
    }

    /// Picks up the work a loaded partition had under way.
    fn resume(self, b: &Broker, p: i32) {
        if self == Kind::Transactions {
            b.txn_coordinator.resume(p);
        }
    }

    fn unload(self, b: &Broker, p: i32) {
        match self {
            Kind::Groups => b.group_coordinator.unload_partition(p),
            Kind::Transactions => b.txn_coordinator.unload_partition(p),
            Kind::ShareState => b.share_state.unload_partition(p),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Groups => "groups",
            Kind::Transactions => "transactions",
            Kind::ShareState => "share-group state",
        }
    }
}

/// The broker coordinating `key` (a group or a transactional id): the leader of its
/// partition of the internal topic. The first lookup creates the topic through the
/// controller, once enough brokers are registered to place its replicas; until then, and
/// while the partition has no leader, the answer is COORDINATOR_NOT_AVAILABLE and clients
/// retry.
pub fn locate(b: &Broker, kind: Kind, key: &str) -> Result<BrokerInfo, (ResponseError, String)> {
    let unavailable = |msg: String| (ResponseError::CoordinatorNotAvailable, msg);
    let controller = &b.controller;
    let brokers = controller.live_brokers();
    let name = kind.topic();
    let Some(topic) = b.catalog.topic(name) else {
        let (partitions_key, rf_key, segment_key) = kind.settings();
        let (rf, partitions, configs) = {
            let s = b.catalog.settings();
            // Coordinators must work whatever the topology; an unsafe placement is logged.
            let mut configs = topic_configs(&s, segment_key);
            configs.insert("placement.unsafe.allow".into(), "true".into());
            // A cluster of one has one replica to give, as Kafka's single-node config sets.
            let rf = if controller.single { 1 } else { s.i64(rf_key) };
            (rf, s.i64(partitions_key), configs)
        };
        if (brokers.len() as i64) < rf {
            return Err(unavailable(format!(
                "{name} needs {rf} brokers ({rf_key}), {} are registered and not fenced",
                brokers.len()
            )));
        }
        let creating = kind.creating(b);
        if !creating.swap(true, Ordering::AcqRel) {
            let (controller, creating) = (controller.clone(), creating.clone());
            tokio::spawn(async move {
                let created = controller.create_topic(name, partitions as i32, rf as i16, None, configs, false);
                if let Err((code, msg)) = created.await {
                    if code != ResponseError::TopicAlreadyExists {
                        warn!(?code, %msg, "creating {name} failed");
                    }
                }
                creating.store(false, Ordering::Release);
            });
        }
        return Err(unavailable(format!("{name} is being created")));
    };
    let p = kind.partition_for(b, key);
    let part = topic
        .partitions
        .get(p as usize)
        .ok_or_else(|| unavailable(format!("{name} has {} partitions, the key needs {p}", topic.partitions.len())))?;
    let (leader, _) = b.partition_leader(part);
    brokers
        .into_iter()
        .find(|info| info.id == leader)
        .ok_or_else(|| unavailable(format!("{name}-{p} has no leader right now")))
}

/// Waits (at most `limit`) until the coordinator serves every partition of its topic this
/// broker leads, so that a broker that leads them at start (a cluster of one always does)
/// answers its first requests with the state read back, not NOT_COORDINATOR.
pub async fn until_led_partitions_loaded(b: &Broker, kind: Kind, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let loaded = kind.loaded_partitions(b);
        let pending = b.catalog.topic(kind.topic()).is_some_and(|topic| {
            topic.partitions.iter().any(|p| p.leader_error().is_none() && loaded.binary_search(&p.index).is_err())
        });
        if !pending || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Keeps this broker's coordinator serving exactly the partitions of its topic it leads: a
/// partition is read back once its leader's high watermark covers an entry of the leader's
/// own term (so every earlier write is readable) and dropped as soon as leadership moves or
/// the term changes.
pub async fn follow_leaders(broker: Weak<Broker>, kind: Kind) {
    let mut served: HashMap<i32, u64> = HashMap::new();
    let mut first = true;
    let name = kind.topic();
    loop {
        if !std::mem::take(&mut first) {
            tokio::time::sleep(FOLLOW_INTERVAL).await;
        }
        let Some(b) = broker.upgrade() else { return };
        let mut leading: HashMap<i32, u64> = HashMap::new();
        if let Some(topic) = b.catalog.topic(name) {
            for part in &topic.partitions {
                if let Some(term) = part.current_leader_term() {
                    leading.insert(part.index, term);
                }
            }
        }
        served.retain(|p, term| {
            let keep = leading.get(p) == Some(term);
            if !keep {
                kind.unload(&b, *p);
                info!(partition = *p, "stopped coordinating the {} of {name}-{p}", kind.what());
            }
            keep
        });
        for (p, term) in leading {
            if served.contains_key(&p) {
                continue;
            }
            let reader = b.clone();
            match tokio::task::spawn_blocking(move || kind.load(&reader, p)).await {
                Ok(Ok(records)) => {
                    info!(partition = p, term, records, "coordinating the {} of {name}-{p}", kind.what());
                    served.insert(p, term);
                    kind.resume(&b, p);
                }
                Ok(Err(e)) => warn!(partition = p, error = %e, "reading {name}-{p} back failed; retrying"),
                Err(e) => warn!(partition = p, error = %e, "reading {name}-{p} back panicked"),
            }
        }
    }
}

/// The catalog as the group coordinator's view of topics.
pub struct CatalogTopics<'a>(pub &'a Broker);

impl runnel_coordinator::Topics for CatalogTopics<'_> {
    fn resolve(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        self.0.catalog.topic(name).map(|t| (t.id, t.partitions.len() as i32))
    }

    fn names(&self) -> Vec<String> {
        let topics = self.0.catalog.topics_snapshot();
        topics.iter().filter(|t| !crate::offsets_log::is_internal(&t.name)).map(|t| t.name.to_string()).collect()
    }
}
