//! Shared broker state: everything a handler may need, behind one `Arc`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
use tokio::sync::Notify;

use crate::catalog::{Catalog, Topic};
use crate::config::BrokerConfig;
use crate::fetch_session::FetchSessions;
use crate::flusher::Flusher;

pub struct Broker {
    pub config: BrokerConfig,
    pub catalog: Catalog,
    /// None when `log.fsync.policy=never`: the high watermark follows the log end.
    pub flusher: Option<Flusher>,
    /// Woken whenever a high watermark moves; long-polling fetches wait on it.
    pub data_arrived: Arc<Notify>,
    pub fetch_sessions: FetchSessions,
    pub shutting_down: AtomicBool,
}

impl Broker {
    /// Opens the data directory (recovering every partition) and starts group commit.
    /// Must run inside a Tokio runtime.
    pub fn open(config: BrokerConfig) -> Result<Arc<Broker>> {
        let catalog = Catalog::open(&config.data_dir, config.settings.clone())?;
        let data_arrived = Arc::new(Notify::new());
        let flusher = match config.settings.get("log.fsync.policy") {
            "never" => None,
            _ => Some(Flusher::start(data_arrived.clone())),
        };
        let sessions = FetchSessions::new(config.settings.usize("max.incremental.fetch.session.cache.slots"));
        Ok(Arc::new(Broker {
            config,
            catalog,
            flusher,
            data_arrived,
            fetch_sessions: sessions,
            shutting_down: AtomicBool::new(false),
        }))
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
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
                if let Err(e) = p.log().close() {
                    tracing::warn!(topic = %t.name, partition = p.index, error = %e, "closing log");
                }
            }
        }
    }
}
