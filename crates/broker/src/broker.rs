//! Shared broker state: everything a handler may need, behind one `Arc`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
use tokio::sync::Notify;

use runnel_coordinator::{Coordinator, CoordinatorConfig};

use crate::catalog::{Catalog, Topic};
use crate::config::BrokerConfig;
use crate::fetch_session::FetchSessions;
use crate::flusher::Flusher;
use crate::offsets_log::OffsetsLog;
use crate::partition::Partition;

pub struct Broker {
    pub config: BrokerConfig,
    pub catalog: Catalog,
    /// None when `log.fsync.policy=never`: the high watermark follows the log end.
    pub flusher: Option<Flusher>,
    /// Woken whenever a high watermark moves; long-polling fetches wait on it.
    pub data_arrived: Arc<Notify>,
    pub fetch_sessions: FetchSessions,
    /// Consumer groups and committed offsets, kept in `__consumer_offsets`.
    pub groups: Coordinator,
    pub shutting_down: AtomicBool,
    /// Cluster mode (`controller.quorum.voters` set): metadata quorum and Raft driver.
    pub cluster: std::sync::OnceLock<Arc<crate::cluster::Cluster>>,
}

impl Broker {
    /// Opens the data directory (recovering every partition) and starts group commit.
    /// Must run inside a Tokio runtime.
    pub fn open(config: BrokerConfig) -> Result<Arc<Broker>> {
        let catalog = Catalog::open(&config.data_dir, config.settings.clone())?;
        let data_arrived = Arc::new(Notify::new());
        let flusher = match config.settings.get("log.fsync.policy") {
            "never" => None,
            _ => Some(Flusher::start(data_arrived.clone(), config.settings.get("log.fsync.scope") == "filesystem")),
        };
        let sessions = FetchSessions::new(config.settings.usize("max.incremental.fetch.session.cache.slots"));
        let s = &config.settings;
        let group_config = CoordinatorConfig {
            session_timeout_ms_min: s.i64("group.min.session.timeout.ms") as i32,
            session_timeout_ms_max: s.i64("group.max.session.timeout.ms") as i32,
            initial_rebalance_delay_ms: s.i64("group.initial.rebalance.delay.ms").max(0) as u64,
            offset_metadata_bytes_max: s.usize("offset.metadata.max.bytes"),
            consumer_session_timeout_ms: s.i64("group.consumer.session.timeout.ms") as i32,
            consumer_heartbeat_interval_ms: s.i64("group.consumer.heartbeat.interval.ms") as i32,
            consumer_default_assignor: s
                .get("group.consumer.assignors")
                .split(',')
                .next()
                .unwrap_or("uniform")
                .trim()
                .to_string(),
            offsets_retention_ms: s.i64("offsets.retention.minutes").max(1).saturating_mul(60_000),
        };
        let offsets_partitions = s.i64("offsets.topic.num.partitions").max(1) as i32;
        let broker = Arc::new_cyclic(|weak| Broker {
            groups: Coordinator::new(
                Arc::new(OffsetsLog { broker: weak.clone(), partitions: offsets_partitions }),
                group_config,
            ),
            config,
            catalog,
            flusher,
            data_arrived,
            fetch_sessions: sessions,
            shutting_down: AtomicBool::new(false),
            cluster: std::sync::OnceLock::new(),
        });
        // In a cluster, each partition of the offsets log is read back by the broker that
        // leads it, when it starts leading (`cluster::coordinate`).
        if broker.config.settings.get("controller.quorum.voters").is_empty() {
            let records = broker.groups.load().map_err(|e| anyhow::anyhow!("loading consumer groups: {e}"))?;
            if records > 0 {
                tracing::info!(records, groups = broker.groups.list().len(), "consumer groups loaded");
            }
        }
        Ok(broker)
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// (leader, epoch) of a partition as this broker knows them: from its own replica, or,
    /// in a cluster when it holds none, from the leader's announcement; (-1, -1) if unknown.
    pub fn partition_leader(&self, p: &Partition) -> (i32, i32) {
        match self.cluster.get() {
            Some(c) if p.is_remote() => c.leader_hint(&p.topic, p.index).unwrap_or((-1, -1)),
            _ => p.leader(self.node_id()),
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Creates a topic the way Kafka's auto-creation does: broker defaults for partitions.
    pub fn auto_create(&self, name: &str) -> Option<Arc<Topic>> {
        let (enabled, partitions) = {
            let s = self.catalog.settings();
            (s.bool("auto.create.topics.enable"), s.i64("num.partitions") as i32)
        };
        if !enabled {
            return None;
        }
        if let Some(cluster) = self.cluster.get() {
            // The controller creates it; the caller answers "not yet" and the client retries.
            let (cluster, name) = (cluster.clone(), name.to_string());
            let rf = self.catalog.settings().i64("default.replication.factor") as i16;
            tokio::spawn(async move { cluster.auto_create(&name, partitions, rf).await });
            return None;
        }
        match self.catalog.create_topic(name, partitions, Default::default()) {
            Ok(t) => Some(t),
            // Another request created it first.
            Err(crate::catalog::CatalogError::TopicExists(_)) => self.catalog.topic(name),
            Err(_) => None,
        }
    }

    /// Closes every log cleanly: fsync and checkpoint, so the next start skips recovery.
    pub fn close(&self) {
        for t in self.catalog.topics_snapshot() {
            for p in &t.partitions {
                if let Err(e) = p.close() {
                    tracing::warn!(topic = %t.name, partition = p.index, error = %e, "closing log");
                }
            }
        }
    }
}
