//! Shared broker state: everything a handler may need, behind one `Arc`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;

use runnel_controller::{parse_location, parse_voters, BrokerInfo, Controller, ControllerConfig, Endpoint};
use runnel_coordinator::{Coordinator, CoordinatorConfig};

use crate::catalog::Catalog;
use crate::config::BrokerConfig;
use crate::fetch_session::FetchSessions;
use crate::offsets_log::{InternalLog, OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC};
use crate::partition::Partition;
use crate::replica_manager::ReplicaManager;
use runnel_txn::{LateHost, TxnConfig, TxnCoordinator};

pub struct Broker {
    pub config: BrokerConfig,
    pub catalog: Arc<Catalog>,
    /// Long-polling fetches wait here for the high watermarks of their partitions.
    pub arrivals: Arc<crate::arrivals::Arrivals>,
    pub fetch_sessions: FetchSessions,
    /// Consumer groups and committed offsets, kept in `__consumer_offsets`.
    pub group_coordinator: Coordinator,
    pub shutting_down: AtomicBool,
    /// Serving clients: started (metadata replayed to its registration, its groups loaded)
    /// and not shutting down.
    pub serving: AtomicBool,
    /// The metadata quorum as this broker follows it (and leads it, when it is the
    /// controller); a broker without `controller.quorum.voters` is a cluster of one.
    pub controller: Arc<Controller>,
    /// The Raft driver and this broker's replicas.
    pub replicas: Arc<ReplicaManager>,
    /// A creation of the offsets topic is under way (see `coordinators::locate`).
    pub offsets_creating: Arc<AtomicBool>,
    /// Transactional ids, kept in `__transaction_state`.
    pub txn_coordinator: Arc<TxnCoordinator>,
    /// A creation of `__transaction_state` is under way.
    pub txn_state_creating: Arc<AtomicBool>,
    /// The coordinator's host: this broker, attached once it exists (`txn::attach`).
    pub txn_host: Arc<LateHost>,
    /// Transaction requests to other brokers waiting for their answers.
    pub txn_peers: crate::txn_peers::TxnPeers,
    /// What peers send about transactions, until `txn::attach` takes it.
    pub txn_inbox: std::sync::Mutex<Option<crate::txn_peers::Inbox>>,
    /// Share-partitions' state, kept in `__share_group_state` (the share coordinator).
    pub share_state: Arc<runnel_share::StateStore>,
    /// A creation of `__share_group_state` is under way.
    pub share_state_creating: Arc<AtomicBool>,
    /// The share-partitions this broker leads and the share sessions of their members.
    pub shares: crate::share_session::Shares,
    /// The requests in flight on every connection, for the watchdog's report.
    pub requests: crate::inflight::Requests,
    /// `super.users` and the other authorizer settings; None without `authorizer.class.name`.
    pub authorizer: Option<Arc<runnel_security::acl::Policy>>,
    /// The rates of clients with a quota, measured on this broker.
    pub quotas: crate::quota::Quotas,
    /// Each TLS listener's configuration, by listener name (set once the listeners are up),
    /// for the dynamic `listener.name.<l>.ssl.*` settings.
    pub listener_tls: std::sync::OnceLock<Vec<(String, Arc<runnel_security::ServerTls>)>>,
    /// Fetch reads that might wait for the disk run here, `num.io.threads` at a time.
    pub disk_reads: crate::disk_reads::DiskReads,
}

impl Broker {
    /// Opens the data directory and joins the metadata quorum (the one-voter quorum of a
    /// cluster of one when `controller.quorum.voters` is empty), which replays the metadata
    /// log and opens this broker's replicas. Must run inside a Tokio runtime.
    pub async fn start(config: BrokerConfig) -> Result<Arc<Broker>> {
        crate::topic_config::check_broker_settings(&config.settings).map_err(anyhow::Error::msg)?;
        let catalog = Arc::new(Catalog::open(&config.data_dir, config.settings.clone())?);
        let arrivals = Arc::new(crate::arrivals::Arrivals::default());
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
            group_max_size: s.usize("group.max.size").max(1),
            consumer_group_max_size: s.usize("group.consumer.max.size").max(1),
            share_session_timeout_ms: s.i64("group.share.session.timeout.ms") as i32,
            share_group_max_size: s.usize("group.share.max.size").max(1),
        };
        let authorizer = crate::authz::policy(s)?;
        let quotas = crate::quota::Quotas::new(s);
        let offsets_partitions = s.i64("offsets.topic.num.partitions").max(1) as i32;
        let txn_partitions = s.i64("transaction.state.log.num.partitions").max(1) as i32;
        let share_partitions = s.i64("share.coordinator.state.topic.num.partitions").max(1) as i32;
        let txn_config = TxnConfig {
            max_timeout_ms: s.i64("transaction.max.timeout.ms").clamp(1, i32::MAX as i64) as i32,
            id_expiration_ms: s.i64("transactional.id.expiration.ms").max(1),
        };
        let voters = parse_voters(s.get("controller.quorum.voters"))?;
        let (replicas, links) = ReplicaManager::start(&config, &voters, catalog.clone(), arrivals.clone()).await?;
        let first = &config.listeners[0];
        let me = BrokerInfo {
            id: config.node_id,
            host: first.advertised_host.clone(),
            port: first.advertised_port,
            location: parse_location(s.get("broker.location"))?,
            incarnation: uuid::Uuid::new_v4().as_u64_pair().0,
            endpoints: config
                .listeners
                .iter()
                .map(|l| Endpoint { name: l.name.clone(), host: l.advertised_host.clone(), port: l.advertised_port })
                .collect(),
            raft: links.raft_address.clone(),
            admin: admin_url(s.get("admin.listeners"), &first.advertised_host),
        };
        let controller = Controller::start(
            ControllerConfig {
                node_id: config.node_id,
                voters,
                me,
                data_dir: config.data_dir.clone(),
                single_cluster_id: catalog.cluster_id.clone(),
                now_ms: crate::now_ms,
            },
            replicas.driver().clone(),
            replicas.clone(),
            links.inbox,
            links.meta_ready,
        )?;
        let txn_host = Arc::new(LateHost::default());
        let txn_log = InternalLog { catalog: catalog.clone(), topic: TXN_TOPIC, partitions: txn_partitions };
        let io_threads = config.settings.i64("num.io.threads").clamp(1, 1024) as usize;
        let broker = Arc::new(Broker {
            group_coordinator: Coordinator::new(
                Arc::new(InternalLog {
                    catalog: catalog.clone(),
                    topic: OFFSETS_TOPIC,
                    partitions: offsets_partitions,
                }),
                group_config,
            ),
            txn_coordinator: Arc::new(TxnCoordinator::new(Arc::new(txn_log), txn_host.clone(), txn_config)),
            txn_state_creating: Arc::new(AtomicBool::new(false)),
            share_state: Arc::new(runnel_share::StateStore::new(Arc::new(InternalLog {
                catalog: catalog.clone(),
                topic: SHARE_STATE_TOPIC,
                partitions: share_partitions,
            }))),
            share_state_creating: Arc::new(AtomicBool::new(false)),
            shares: Default::default(),
            txn_host,
            txn_peers: Default::default(),
            txn_inbox: std::sync::Mutex::new(Some(links.txn_inbox)),
            config,
            catalog,
            arrivals,
            fetch_sessions: sessions,
            shutting_down: AtomicBool::new(false),
            serving: AtomicBool::new(false),
            controller: controller.clone(),
            replicas: replicas.clone(),
            offsets_creating: Arc::new(AtomicBool::new(false)),
            requests: Default::default(),
            authorizer,
            quotas,
            listener_tls: std::sync::OnceLock::new(),
            disk_reads: crate::disk_reads::DiskReads::new(io_threads),
        });
        tokio::spawn(crate::replica_manager::announce_leaders(replicas, controller));
        Ok(broker)
    }

    /// The rights of a request from `principal` at `peer`.
    pub fn access(&self, principal: &Arc<str>, peer: std::net::SocketAddr) -> crate::authz::Access {
        match &self.authorizer {
            None => crate::authz::Access::open(),
            policy => crate::authz::Access::new(
                policy.clone(),
                self.controller.acls(),
                principal.clone(),
                peer.ip().to_string(),
            ),
        }
    }

    pub fn controller(&self) -> &Arc<Controller> {
        &self.controller
    }

    /// A producer id no other producer of the cluster has: each broker allocates from its
    /// own range (node id + 1 in the high bits), so ids never collide across brokers.
    pub async fn allocate_producer_id(&self) -> Result<i64> {
        let id = self.catalog.allocate_producer_id().await?;
        Ok(id | ((self.node_id() as i64 + 1) << 40))
    }

    /// Whether `name` names this broker in a config resource ("" is the cluster-wide
    /// default entity).
    pub fn is_named(&self, name: &str) -> bool {
        name.is_empty() || name.parse::<i32>().ok() == Some(self.node_id())
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// The `transaction.version` feature level this broker finalizes (0 to 2).
    pub fn transaction_version(&self) -> i16 {
        self.config.settings.i64("transaction.version").clamp(0, 2) as i16
    }

    /// (leader, epoch) of a partition as this broker knows them: from its own replica, or,
    /// when it holds none, from the leader's announcement; (-1, -1) if unknown.
    pub fn partition_leader(&self, p: &Partition) -> (i32, i32) {
        if p.is_remote() {
            let group = self.controller.group_of(&p.topic, p.index);
            return group.and_then(|g| self.replicas.leader_hint(g)).unwrap_or((-1, -1));
        }
        p.leader()
    }

    /// The partition's in-sync replicas (Kafka's ISR): its replicas heard from recently
    /// and caught up within `replica.lag.time.max.ms`, as its leader sees them (here, or
    /// as the leader last announced for its current epoch). Its replicas when neither is
    /// known (a broker that just started). `lag_ticks`: [`crate::replica_manager::isr_lag_ticks`].
    pub fn partition_isr(&self, p: &Partition, lag_ticks: u64) -> Vec<i32> {
        if let Some(isr) = p.in_sync(lag_ticks) {
            return isr;
        }
        let (_, epoch) = self.partition_leader(p);
        let group = self.controller.group_of(&p.topic, p.index);
        group.and_then(|g| self.replicas.isr_hint(g, epoch)).unwrap_or_else(|| p.replicas.clone())
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
            let (controller, name) = (self.controller.clone(), name.to_string());
            tokio::spawn(async move { controller.auto_create(&name, partitions, rf).await });
        }
        enabled
    }

    /// Closes every log cleanly: fsync and checkpoint, so the next start skips recovery.
    pub fn close(&self) {
        let syncfs = self.config.settings.get("log.fsync.scope") != "file";
        let partitions: Vec<(Arc<str>, Arc<Partition>)> = self
            .catalog
            .topics_snapshot()
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), p.clone())))
            .collect();
        // Two syncs per chunk instead of five per partition. With an fdatasync each, a
        // staged partition holds its files open until its chunk is synced; one syncfs
        // needs one of them, so its chunks are larger.
        let started = std::time::Instant::now();
        let (mut all_closed, mut written) = (true, 0);
        let chunk = if syncfs { CLOSE_CHUNK_SYNCFS } else { CLOSE_CHUNK };
        for chunk in partitions.chunks(chunk) {
            match close_together(chunk, syncfs) {
                Ok(n) => written += n,
                Err(e) => {
                    tracing::warn!(error = %e, "closing logs together; closing them one by one");
                    for (topic, p) in chunk {
                        if let Err(e) = p.close() {
                            all_closed = false;
                            tracing::warn!(%topic, partition = p.index, error = %e, "closing log");
                        }
                    }
                    written += chunk.len();
                }
            }
        }
        tracing::info!(
            partitions = partitions.len(),
            written,
            ms = started.elapsed().as_millis() as u64,
            "logs closed"
        );
        if all_closed {
            crate::replica_manager::mark_clean_shutdown(&self.config.data_dir);
        }
    }
}

/// Partitions closed together at shutdown ([`Broker::close`]), each holding its staged
/// files open until they are synced one by one (`log.fsync.scope=file`).
const CLOSE_CHUNK: usize = 256;
/// The same with one `syncfs` per step, which holds two files open per chunk. Each step of
/// a chunk costs a sync of the whole file system (10 ms here), so 256 at a time was
/// 80 of them and half of a 10,000-partition broker's stop.
const CLOSE_CHUNK_SYNCFS: usize = 4096;

/// Closes partitions in two steps around shared syncs: every checkpoint and state staged,
/// one sync (or an fdatasync per file), everything put in place, one sync of the
/// directories. Partitions whose files already say what the close would write (idle since
/// the start or the last write of them) stage nothing. Returns how many put a file in place.
fn close_together(partitions: &[(Arc<str>, Arc<Partition>)], syncfs: bool) -> std::io::Result<usize> {
    // A syncfs covers every file of the file system: two of them, kept open, name it (with
    // one file, `sync_files` syncs just that file), the others close at once.
    let keep = |held: &mut Vec<Arc<std::fs::File>>, f| {
        if !syncfs || held.len() < 2 {
            held.push(f);
        }
    };
    let mut files = Vec::new();
    for (_, p) in partitions {
        for f in p.close_stage()? {
            keep(&mut files, f);
        }
    }
    runnel_storage::sync_files(&files, syncfs)?;
    drop(files);
    let (mut dirs, mut written) = (Vec::new(), 0);
    for (_, p) in partitions {
        if let Some(dir) = p.close_commit()? {
            keep(&mut dirs, Arc::new(std::fs::File::open(dir)?));
            written += 1;
        }
    }
    runnel_storage::sync_files(&dirs, syncfs)?;
    Ok(written)
}

/// The first admin listener as peers reach it: `http://host:port`, the listener's host, or
/// the advertised host when it listens on every address; empty without one.
fn admin_url(listeners: &str, advertised_host: &str) -> String {
    let Some(first) = listeners.split(',').map(str::trim).find(|l| !l.is_empty()) else {
        return String::new();
    };
    let address = first.trim_start_matches("http://").trim_end_matches('/');
    match address.rsplit_once(':') {
        Some(("0.0.0.0" | "[::]" | "", port)) => format!("http://{advertised_host}:{port}"),
        _ => format!("http://{address}"),
    }
}

#[cfg(test)]
mod admin_url_tests {
    #[test]
    fn peers_reach_the_first_admin_listener() {
        assert_eq!(super::admin_url("", "h"), "");
        assert_eq!(super::admin_url("http://127.0.0.1:9644,http://10.0.0.1:9", "h"), "http://127.0.0.1:9644");
        assert_eq!(super::admin_url("http://0.0.0.0:9644/", "broker-1.svc"), "http://broker-1.svc:9644");
        assert_eq!(super::admin_url("http://[::]:9644", "b"), "http://b:9644");
    }
}
