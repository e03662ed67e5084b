//! Shared broker state: everything a handler may need, behind one `Arc`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
use tokio::sync::Notify;

use runnel_coordinator::{Coordinator, CoordinatorConfig};

use crate::catalog::Catalog;
use crate::cluster::Cluster;
use crate::config::BrokerConfig;
use crate::fetch_session::FetchSessions;
use crate::offsets_log::OffsetsLog;
use crate::partition::Partition;

pub struct Broker {
    pub config: BrokerConfig,
    pub catalog: Catalog,
    /// Woken whenever a high watermark moves; long-polling fetches wait on it.
    pub data_arrived: Arc<Notify>,
    pub fetch_sessions: FetchSessions,
    /// Consumer groups and committed offsets, kept in `__consumer_offsets`.
    pub groups: Coordinator,
    pub shutting_down: AtomicBool,
    /// The metadata quorum and the Raft driver (set by [`Broker::start`]); a broker without
    /// `controller.quorum.voters` is a cluster of one.
    cluster: std::sync::OnceLock<Arc<Cluster>>,
}

impl Broker {
    /// Opens the data directory and joins the metadata quorum (the one-voter quorum of a
    /// cluster of one when `controller.quorum.voters` is empty), which replays the metadata
    /// log and opens this broker's replicas. Must run inside a Tokio runtime.
    pub async fn start(config: BrokerConfig) -> Result<Arc<Broker>> {
        let catalog = Catalog::open(&config.data_dir, config.settings.clone())?;
        let data_arrived = Arc::new(Notify::new());
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
            data_arrived,
            fetch_sessions: sessions,
            shutting_down: AtomicBool::new(false),
            cluster: std::sync::OnceLock::new(),
        });
        // Each partition of the offsets log is read back by the broker that leads it, when
        // it starts leading (`coordinators::follow_leaders`).
        let cluster = Cluster::start(&broker).await?;
        let _ = broker.cluster.set(cluster);
        Ok(broker)
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        self.cluster.get().expect("Broker::start sets the cluster before the broker is shared")
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// (leader, epoch) of a partition as this broker knows them: from its own replica, or,
    /// when it holds none, from the leader's announcement; (-1, -1) if unknown.
    pub fn partition_leader(&self, p: &Partition) -> (i32, i32) {
        if p.is_remote() {
            return self.cluster().leader_hint(&p.topic, p.index).unwrap_or((-1, -1));
        }
        p.leader()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Starts creating a topic the way Kafka's auto-creation does (broker defaults for
    /// partitions and replication), through the controller; the caller answers "not yet"
    /// and the client retries. False when auto-creation is off.
    pub fn auto_create(&self, name: &str) -> bool {
        let (enabled, partitions, rf) = {
            let s = self.catalog.settings();
            (
                s.bool("auto.create.topics.enable"),
                s.i64("num.partitions") as i32,
                s.i64("default.replication.factor") as i16,
            )
        };
        if enabled {
            let (cluster, name) = (self.cluster().clone(), name.to_string());
            tokio::spawn(async move { cluster.auto_create(&name, partitions, rf).await });
        }
        enabled
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
