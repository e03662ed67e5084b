//! This broker's replicas: the Raft driver that runs every group hosted here, and the
//! [`Host`] through which the controller's committed changes open, relist and close them
//! (off the async workers, in metadata-log order). Also what brokers tell each other
//! about partitions directly: who leads a group the receiver does not host, and requests
//! to hand a group to its preferred leader (ElectLeaders).

use runnel_sync::LockExt;
use runnel_sync::RwLockExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kafka_protocol::error::ResponseError;
use runnel_controller::{
    broker_of, raft_group, raft_id, Controller, Effect, Host, Limits, RaftGroupId, TopicConfigChange,
    CONTROLLER_CHANNEL, INBOX_MAX, META_GROUP,
};
use runnel_raft::driver::lock;
use runnel_raft::{Driver, Hooks, PeerTls, Persistence, Replica, ReplicaConfig, SharedReplica, SyncPolicy};
use runnel_security::{ClientTls, ServerTls};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify};
use tracing::{info, warn};
use uuid::Uuid;

use crate::catalog::{partition_dir, Catalog, Topic};
use crate::config::{BrokerConfig, SecurityProtocol};
use crate::partition::Partition;
use crate::topic_config;

/// First byte of what brokers send each other about partitions over the Raft transport.
const REPLICAS_CHANNEL: u8 = b'R';
/// Such messages queued before new ones are dropped (both kinds are repeated).
const PEER_INBOX_MAX: usize = 1024;
/// Entries a preferred leader may lack and still be handed leadership (a busy partition's
/// followers are always a few appends behind).
const ELECT_LAG_MAX: u64 = 16;
/// How often a broker announces the groups it leads to brokers that do not host them.
const ANNOUNCE_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "type")]
enum PeerMessage {
    /// ElectLeaders: hand these groups (group, preferred broker) to their preferred leaders,
    /// where the receiver leads them and the preferred replica has caught up.
    Elect { groups: Vec<(RaftGroupId, i32)> },
    /// The sender leads these Raft groups (group, term), which the receiver does not host;
    /// and of the groups it leads, those whose in-sync replicas changed (all of them now and
    /// then): (group, term, in-sync brokers).
    Leaders {
        leads: Vec<(RaftGroupId, u64)>,
        #[serde(default)]
        isr: Vec<(RaftGroupId, u64, Vec<i32>)>,
    },
}

/// Every this many announcements, a leader sends every group's in-sync replicas, changed or
/// not (a broker that restarted learns them within this many half seconds).
const ISR_REFRESH_ROUNDS: u32 = 20;

/// What [`ReplicaManager::hand_to_any`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handing {
    /// A leadership transfer started.
    Started,
    /// No candidate has every entry yet, but one answers.
    CatchingUp,
    /// No candidate answers.
    Nobody,
    /// This broker does not lead the group (any more).
    NotLeader,
}

pub struct ReplicaManager {
    node_id: i32,
    data_dir: PathBuf,
    catalog: Arc<Catalog>,
    driver: Arc<Driver>,
    /// What leaders elsewhere announce of their groups (the leaders of partitions this
    /// broker does not host, and in-sync replicas).
    hints: RwLock<HashMap<RaftGroupId, Hint>>,
    /// The directories in the data directory when the broker started, which one `syncfs`
    /// then made durable ([`sync_data_dir`]); each leaves as its replica first opens.
    synced_at_start: Mutex<HashSet<PathBuf>>,
}

/// A group's leader as it announced itself, its term, and its in-sync replicas when it
/// announced them in that term.
struct Hint {
    leader: i32,
    term: u64,
    isr: Option<Vec<i32>>,
}

impl Hint {
    /// Takes in an announcement: a later term replaces what is known, the same term adds
    /// to it, an earlier one is stale.
    fn note(hints: &mut HashMap<RaftGroupId, Hint>, group: RaftGroupId, leader: i32, term: u64, isr: Option<Vec<i32>>) {
        let h = hints.entry(group).or_insert(Hint { leader, term, isr: None });
        if term > h.term {
            *h = Hint { leader, term, isr };
        } else if term == h.term {
            h.leader = leader;
            if isr.is_some() {
                h.isr = isr;
            }
        }
    }
}

/// What the driver's hooks hand on: the controller's inbox and the metadata group's
/// readiness, for [`Controller::start`]; the transaction messages' inbox, for `txn`.
pub struct ControllerLinks {
    pub inbox: mpsc::Receiver<(u64, Vec<u8>)>,
    pub meta_ready: Arc<Notify>,
    pub txn_inbox: mpsc::Receiver<(u64, Vec<u8>)>,
    /// Where peers reach this broker's Raft listener (empty for a cluster of one).
    pub raft_address: String,
}

/// The driver's hooks: they only route (no locks beyond the replica the driver holds).
struct RaftHooks {
    meta_ready: Arc<Notify>,
    arrivals: Arc<crate::arrivals::Arrivals>,
    controller: mpsc::Sender<(u64, Vec<u8>)>,
    peers: mpsc::Sender<(u64, Vec<u8>)>,
    txn: mpsc::Sender<(u64, Vec<u8>)>,
}

impl Hooks for RaftHooks {
    fn after_ready(&self, group: u64, _replica: &mut Replica, moved: bool) {
        if group == META_GROUP {
            self.meta_ready.notify_one();
        } else if moved {
            self.arrivals.moved(group);
        }
    }

    fn on_forward(&self, from: u64, data: &[u8]) {
        let queue = match data.first() {
            Some(&CONTROLLER_CHANNEL) => &self.controller,
            Some(&REPLICAS_CHANNEL) => &self.peers,
            Some(&crate::txn_peers::TXN_CHANNEL) => &self.txn,
            _ => return warn!(from, "forwarded message on an unknown channel"),
        };
        if queue.try_send((from, data[1..].to_vec())).is_err() {
            warn!(from, "inbox full; dropping a forwarded message (the sender repeats it)");
        }
    }
}

/// Left in the data directory by a clean shutdown, once every log is closed (synced and
/// checkpointed); a start that finds it skips [`sync_data_dir`]'s sync. Never needed for
/// safety: without the sync every replica syncs its own log if it must.
const CLEAN_SHUTDOWN: &str = ".clean-shutdown";

/// Marks the end of a clean shutdown (see [`CLEAN_SHUTDOWN`]); not synced: lost, it costs
/// the next start one `syncfs`.
pub fn mark_clean_shutdown(data_dir: &Path) {
    if let Err(e) = std::fs::write(data_dir.join(CLEAN_SHUTDOWN), b"") {
        warn!(error = %e, "could not mark the clean shutdown; the next start syncs the data directory");
    }
}

/// Makes everything in the data directory durable with one `syncfs` and lists the
/// directories it covered (those on the data directory's own filesystem, symbolic links
/// aside). After a crash the logs' unsynced tails may be in the page cache only; a replica
/// would otherwise sync its own as it opens, a device flush each (10,000 of them for as many
/// partitions). After a clean shutdown ([`CLEAN_SHUTDOWN`]), or when the sync fails, it
/// syncs and lists nothing, and each replica syncs its own log if it must.
async fn sync_data_dir(data_dir: PathBuf) -> HashSet<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let shown = data_dir.clone();
    let synced = tokio::task::spawn_blocking(move || -> std::io::Result<HashSet<PathBuf>> {
        if std::fs::remove_file(data_dir.join(CLEAN_SHUTDOWN)).is_ok() {
            return Ok(HashSet::new());
        }
        let root = match std::fs::File::open(&data_dir) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashSet::new()),
            Err(e) => return Err(e),
        };
        let dev = root.metadata()?.dev();
        // Listed before the sync, so that the sync covers whatever each one holds.
        let mut dirs = HashSet::new();
        for entry in std::fs::read_dir(&data_dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() && meta.dev() == dev {
                dirs.insert(entry.path());
            }
        }
        runnel_storage::sync_filesystem(&root)?;
        Ok(dirs)
    })
    .await;
    match synced {
        Ok(Ok(dirs)) => dirs,
        Ok(Err(e)) => {
            warn!(data_dir = %shown.display(), error = %e, "could not sync the data directory; each replica syncs its own log as it opens");
            HashSet::new()
        }
        Err(_) => HashSet::new(),
    }
}

fn persistence(config: &BrokerConfig) -> Persistence {
    let sync = match (config.settings.get("log.fsync.policy"), config.settings.get("log.fsync.scope")) {
        ("never", _) => SyncPolicy::Never,
        (_, "file") => SyncPolicy::File,
        _ => SyncPolicy::Filesystem,
    };
    Persistence {
        sync,
        cache_tail_bytes: config.settings.i64("log.cache.tail.bytes").max(0) as u64,
        round_bytes_max: runnel_raft::driver::ROUND_BYTES_MAX,
    }
}

/// Mutual TLS on the internal listener when `controller.listener.names` maps to SSL: its
/// `ssl.*` settings (`listener.name.<name>.ssl.*` first), client certificates required both
/// ways, the stores watched for rotation.
fn peer_tls(config: &BrokerConfig) -> Result<Option<PeerTls>> {
    let internal = &config.internal;
    if internal.protocol != SecurityProtocol::Ssl {
        return Ok(None);
    }
    let getter = |required: bool| {
        let (settings, name) = (config.settings.clone(), internal.name.clone());
        Box::new(move |k: &str| {
            if required && k == "ssl.client.auth" {
                "required".to_string()
            } else {
                settings.for_listener(&name, k).to_string()
            }
        })
    };
    let what = format!("internal listener {}", internal.name);
    let server = Arc::new(ServerTls::server(getter(true)).with_context(|| what.clone())?);
    let client = Arc::new(ClientTls::client(getter(false)).with_context(|| what.clone())?);
    let reload_ms = config.settings.i64("ssl.reload.check.interval.ms");
    if reload_ms > 0 {
        let (name, interval) = (Arc::<str>::from(internal.name.as_str()), Duration::from_millis(reload_ms as u64));
        tokio::spawn(runnel_security::reload_loop(name.clone(), server.clone(), interval));
        tokio::spawn(runnel_security::reload_loop(name, client.clone(), interval));
    }
    Ok(Some(PeerTls { server, client }))
}

impl ReplicaManager {
    /// Starts the Raft driver: listening for peers on this broker's address among
    /// `voters`, or (a broker that is not a voter: a metadata observer) on its internal
    /// listener in `listeners`, and dialling the voters; brokers that register later are
    /// added as they do. A cluster of one (no voters) has no peers.
    pub async fn start(
        config: &BrokerConfig,
        voters: &[(i32, String)],
        catalog: Arc<Catalog>,
        arrivals: Arc<crate::arrivals::Arrivals>,
    ) -> Result<(Arc<ReplicaManager>, ControllerLinks)> {
        let node_id = config.node_id;
        let voter = voters.iter().find(|(id, _)| *id == node_id).map(|(_, a)| a.clone());
        let (listen, raft_address) = match (&config.raft_listener, voter) {
            _ if voters.is_empty() => (None, String::new()),
            (Some(own), Some(voter)) => (Some(own.listen.clone()), voter),
            (None, Some(voter)) => (Some(voter.clone()), voter),
            (Some(own), None) => (Some(own.listen.clone()), own.advertised.clone()),
            (None, None) => bail!(
                "node.id {node_id} is not among controller.quorum.voters, and listeners has no {} listener: \
                 a broker that is not a voter (a metadata observer) needs one for Raft traffic",
                config.internal.name
            ),
        };
        let listen = listen.as_deref();
        let peers: HashMap<u64, String> =
            voters.iter().filter(|(id, _)| *id != node_id).map(|(id, a)| (raft_id(*id), a.clone())).collect();
        let (controller_tx, controller_rx) = mpsc::channel(INBOX_MAX);
        let (peers_tx, peers_rx) = mpsc::channel(PEER_INBOX_MAX);
        let (txn_tx, txn_rx) = mpsc::channel(PEER_INBOX_MAX);
        let meta_ready = Arc::new(Notify::new());
        let hooks = RaftHooks {
            meta_ready: meta_ready.clone(),
            arrivals,
            controller: controller_tx,
            peers: peers_tx,
            txn: txn_tx,
        };
        let synced_at_start = Mutex::new(sync_data_dir(config.data_dir.clone()).await);
        let tls = if listen.is_some() { peer_tls(config)? } else { None };
        let links = runnel_raft::PeerLinks { tls, buffers: config.socket_buffers() };
        let driver =
            Driver::start(raft_id(node_id), listen, peers, Arc::new(hooks), persistence(config), crate::now_ms, links)
                .await
                .with_context(|| format!("listening for peers on {}", listen.unwrap_or_default()))?;
        info!(node_id, listen = listen.unwrap_or("none"), voters = voters.len().max(1), "raft driver started");
        let manager = Arc::new(ReplicaManager {
            node_id,
            data_dir: config.data_dir.clone(),
            catalog,
            driver,
            hints: RwLock::new(HashMap::new()),
            synced_at_start,
        });
        tokio::spawn(peer_loop(manager.clone(), peers_rx));
        Ok((manager, ControllerLinks { inbox: controller_rx, meta_ready, txn_inbox: txn_rx, raft_address }))
    }

    pub fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }

    /// (leader, epoch) of a group this broker does not host, as its leader announced.
    pub fn leader_hint(&self, group: RaftGroupId) -> Option<(i32, i32)> {
        let hints = self.hints.read_or_stop();
        hints.get(&group).map(|h| (h.leader, h.term as i32))
    }

    /// The in-sync replicas of a group led elsewhere, as its leader announced them in
    /// `term` (the leader epoch the caller knows); None when not announced for that term.
    pub fn isr_hint(&self, group: RaftGroupId, term: i32) -> Option<Vec<i32>> {
        let hints = self.hints.read_or_stop();
        hints.get(&group).filter(|h| h.term as i32 == term).and_then(|h| h.isr.clone())
    }

    /// Asks the broker that leads `group` to hand it to `preferred` (ElectLeaders).
    pub fn ask_to_elect(&self, leader: i32, group: RaftGroupId, preferred: i32) {
        if leader == self.node_id {
            self.elect_here(group, preferred);
        } else {
            self.send(leader, &PeerMessage::Elect { groups: vec![(group, preferred)] });
        }
    }

    /// Hands a group this broker leads to `preferred`, if that replica is alive and lacks at
    /// most `ELECT_LAG_MAX` entries (one round of appends catches it up; further behind, a
    /// transfer would stall writes for an election timeout and fail): a Raft leadership
    /// transfer. Returns whether one started.
    pub fn elect_here(&self, group: RaftGroupId, preferred: i32) -> bool {
        self.hand_to_any(group, &[preferred]) == Handing::Started
    }

    /// Hands a group this broker leads to the first of `candidates` that is alive and lacks
    /// at most `ELECT_LAG_MAX` entries (a Raft leadership transfer); otherwise says whether
    /// one of them answers and so may catch up.
    pub fn hand_to_any(&self, group: RaftGroupId, candidates: &[i32]) -> Handing {
        let Some(replica) = self.driver.group(group) else { return Handing::NotLeader };
        let handing = {
            let mut r = lock(&replica);
            if !r.is_leader() {
                Handing::NotLeader
            } else if let Some(to) =
                candidates.iter().map(|c| raft_id(*c)).find(|to| *to != r.id() && r.has_everything(*to, ELECT_LAG_MAX))
            {
                r.transfer_leader(to);
                Handing::Started
            } else if candidates.iter().any(|c| r.voter_active(raft_id(*c))) {
                Handing::CatchingUp
            } else {
                Handing::Nobody
            }
        };
        if handing == Handing::Started {
            self.driver.kick(group);
        }
        handing
    }

    /// Has the driver handle the group's ready soon (after a proposal).
    pub fn kick(&self, group: RaftGroupId) {
        self.driver.kick(group);
    }

    fn send(&self, to: i32, msg: &PeerMessage) {
        runnel_controller::send_on_channel(&self.driver, to, REPLICAS_CHANNEL, msg);
    }

    fn on_message(&self, from: u64, msg: PeerMessage) {
        match msg {
            PeerMessage::Leaders { leads, isr } => {
                let leader = broker_of(from);
                let mut hints = self.hints.write_or_stop();
                for (group, term) in leads {
                    Hint::note(&mut hints, group, leader, term, None);
                }
                for (group, term, brokers) in isr {
                    Hint::note(&mut hints, group, leader, term, Some(brokers));
                }
            }
            PeerMessage::Elect { groups } => {
                for (group, preferred) in groups {
                    self.elect_here(group, preferred);
                }
            }
        }
    }

    /// This broker's view of partitions `first..` of a topic: a replica (its Raft group
    /// added to the driver) where it holds one, else a remote partition. The directories
    /// are claimed first and their claims made durable together (one `syncfs` for a
    /// topic's partitions where the broker syncs whole filesystems), before any replica in
    /// them takes part in Raft. The groups go to the driver together, so that their first
    /// rounds (a new replica's first state, the preferred leader's election) share syncs.
    fn open_partitions(
        &self,
        topic: &Arc<str>,
        id: Uuid,
        seq: u64,
        first: i32,
        replicas: &[Vec<i32>],
        configs: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Partition>>> {
        let log_config = topic_config::log_config(configs, &self.catalog.settings());
        // The directory of each partition hosted here (None: a remote one).
        let mut dirs = Vec::with_capacity(replicas.len());
        let mut claimed = false;
        for (i, reps) in replicas.iter().enumerate() {
            let p = first + i as i32;
            if !reps.contains(&self.node_id) {
                dirs.push(None);
                continue;
            }
            let dir = partition_dir(&self.data_dir, topic, p);
            match self.claim_dir(&dir, id).with_context(|| format!("claiming {}", dir.display()))? {
                // Replaying the log after a restart: the directory holds a later topic of
                // the same name, and this one is deleted further on. Leave it alone.
                Claim::Other => dirs.push(None),
                claim => {
                    claimed |= claim == Claim::New;
                    dirs.push(Some(dir));
                }
            }
        }
        if claimed {
            self.sync_claims().with_context(|| format!("syncing the claims of {topic}'s partitions"))?;
        }
        let mut parts = Vec::with_capacity(replicas.len());
        let mut groups = Vec::new();
        for ((i, reps), dir) in replicas.iter().enumerate().zip(dirs) {
            let p = first + i as i32;
            let Some(dir) = dir else {
                parts.push(Arc::new(Partition::remote(topic.clone(), p, reps.clone())));
                continue;
            };
            let group = raft_group(seq, p);
            // The preferred leader stands at once instead of after an election timeout.
            let replica = self.open_replica(&dir, log_config, reps, reps.first() == Some(&self.node_id))?;
            groups.push((group, replica.clone()));
            parts.push(Arc::new(Partition::hosted(
                topic.clone(),
                p,
                reps.clone(),
                replica,
                group,
                self.driver.clone(),
            )));
        }
        self.driver.add_groups(groups);
        Ok(parts)
    }

    /// Marks a partition directory as holding the replica of topic `id` (the file
    /// `topic.id`), or tells whether it does. Directories are named by topic name, so after
    /// a topic was deleted and created again, replaying the metadata log would otherwise
    /// open (and then delete) the new topic's data as the old one's. A new marker must be
    /// durable before the replica takes part in Raft. When the broker syncs whole
    /// filesystems, it is left for [`ReplicaManager::sync_claims`] (one `syncfs` for many);
    /// otherwise it is synced here, with its directory and the data directory's entry for
    /// it. A marker lost before its sync is written again by the next start's replay.
    fn claim_dir(&self, dir: &Path, id: Uuid) -> std::io::Result<Claim> {
        let marker = dir.join("topic.id");
        match std::fs::read_to_string(&marker) {
            Ok(owner) if owner.trim() == id.to_string() => Ok(Claim::Held),
            Ok(_) => Ok(Claim::Other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                let mut f = std::fs::File::create(&marker)?;
                std::io::Write::write_all(&mut f, id.to_string().as_bytes())?;
                if self.driver.sync_policy() == SyncPolicy::File {
                    f.sync_all()?;
                    std::fs::File::open(dir)?.sync_all()?;
                    std::fs::File::open(&self.data_dir)?.sync_all()?;
                }
                Ok(Claim::New)
            }
            Err(e) => Err(e),
        }
    }

    /// Makes the claims [`ReplicaManager::claim_dir`] left unsynced durable: one `syncfs`.
    fn sync_claims(&self) -> std::io::Result<()> {
        if self.driver.sync_policy() != SyncPolicy::Filesystem {
            return Ok(());
        }
        runnel_storage::sync_filesystem(&std::fs::File::open(&self.data_dir)?)
    }

    /// Opens this broker's replica of a partition in `dir` (a new one starts with `voters`
    /// as its group's configuration), for the caller to hand its Raft group to the driver.
    fn open_replica(
        &self,
        dir: &Path,
        log_config: runnel_storage::LogConfig,
        voters: &[i32],
        campaign: bool,
    ) -> Result<SharedReplica> {
        let mut cfg = ReplicaConfig::new(raft_id(self.node_id), voters.iter().map(|b| raft_id(*b)).collect());
        // Its files' last writes came before the start's syncfs (this process writes to a
        // replica's directory only once it has opened it).
        cfg.tail_synced = self.synced_at_start.lock_or_stop().remove(dir);
        let mut replica = Replica::open(dir, log_config, &cfg, crate::now_ms())
            .with_context(|| format!("opening {}", dir.display()))?;
        if campaign {
            let _ = replica.campaign();
        } else if replica.term() == 0 {
            // A new group: leave the first election to the replica that campaigns at once.
            replica.hold_elections(2 * cfg.election_tick);
        }
        Ok(Arc::new(Mutex::new(replica)))
    }

    fn create_topic(
        &self,
        name: &str,
        id: Uuid,
        seq: u64,
        replicas: &[Vec<i32>],
        configs: BTreeMap<String, String>,
    ) -> Result<()> {
        let topic: Arc<str> = Arc::from(name);
        let partitions = self.open_partitions(&topic, id, seq, 0, replicas, &configs)?;
        self.catalog.insert_topic(Topic { name: topic, id, partitions, configs });
        info!(topic = name, partitions = replicas.len(), "topic applied from the metadata log");
        Ok(())
    }

    /// Adds partitions after a topic's current ones (CreatePartitions).
    fn add_partitions(&self, name: &str, id: Uuid, seq: u64, first: i32, replicas: &[Vec<i32>]) -> Result<()> {
        let Some(current) = self.catalog.topic(name).filter(|t| t.id == id) else { return Ok(()) };
        let added = self.open_partitions(&current.name, id, seq, first, replicas, &current.configs)?;
        let mut partitions = current.partitions.clone();
        partitions.truncate(first as usize);
        partitions.extend(added);
        let count = partitions.len();
        self.catalog.insert_topic(Topic {
            name: current.name.clone(),
            id,
            partitions,
            configs: current.configs.clone(),
        });
        info!(topic = name, partitions = count, "new partitions applied from the metadata log");
        Ok(())
    }

    /// Rebuilds this broker's view of a partition whose replica list changed: the list
    /// Metadata shows, and whether this broker holds a replica. A replica added here
    /// starts from the group's first voters (it replays the group's changes, or gets a
    /// snapshot) and waits for the leader; a replica removed here leaves the driver and
    /// its directory is deleted.
    #[allow(clippy::too_many_arguments)]
    fn relist(
        &self,
        name: &str,
        id: Uuid,
        p: i32,
        group: RaftGroupId,
        listed: Vec<i32>,
        host: bool,
        initial: &[i32],
    ) -> Result<()> {
        let Some(topic) = self.catalog.topic(name).filter(|t| t.id == id) else { return Ok(()) };
        let Some(current) = topic.partitions.get(p as usize).cloned() else { return Ok(()) };
        let part = match (current.replica(), host) {
            (Some(_), true) => current.relisted(listed),
            (None, false) => Partition::remote(topic.name.clone(), p, listed),
            (None, true) => {
                let dir = partition_dir(&self.data_dir, name, p);
                let log_config = topic_config::log_config(&topic.configs, &self.catalog.settings());
                if self.claim_dir(&dir, id).with_context(|| format!("claiming {}", dir.display()))? == Claim::New {
                    self.sync_claims().with_context(|| format!("syncing the claim of {}", dir.display()))?;
                }
                let replica = self.open_replica(&dir, log_config, initial, false)?;
                self.driver.add_group(group, replica.clone());
                info!(topic = name, partition = p, "replica added here; catching up from the leader");
                Partition::hosted(topic.name.clone(), p, listed, replica, group, self.driver.clone())
            }
            (Some((_, group)), false) => {
                self.driver.remove_group(group);
                if let Err(e) = current.close() {
                    warn!(topic = name, partition = p, error = %e, "closing a removed replica");
                }
                let dir = partition_dir(&self.data_dir, name, p);
                let doomed = dir.with_extension(format!("removed-{}", Uuid::new_v4().simple()));
                if let Err(e) = std::fs::rename(&dir, &doomed).and_then(|_| std::fs::remove_dir_all(&doomed)) {
                    warn!(topic = name, partition = p, error = %e, "deleting a removed replica");
                }
                info!(topic = name, partition = p, "replica removed from this broker");
                Partition::remote(topic.name.clone(), p, listed)
            }
        };
        let mut partitions = topic.partitions.clone();
        partitions[p as usize] = Arc::new(part);
        self.catalog.insert_topic(Topic { name: topic.name.clone(), id, partitions, configs: topic.configs.clone() });
        Ok(())
    }

    /// Stops this broker's replicas of a deleted topic and removes their data.
    fn delete_topic(&self, name: &str, id: Uuid, seq: u64, partitions: usize) {
        {
            let mut hints = self.hints.write_or_stop();
            for p in 0..partitions {
                hints.remove(&raft_group(seq, p as i32));
            }
        }
        for p in 0..partitions {
            self.driver.remove_group(raft_group(seq, p as i32));
        }
        runnel_metrics::get().forget_topic(name);
        let Some(topic) = self.catalog.topic(name).filter(|t| t.id == id) else { return };
        for p in &topic.partitions {
            if let Err(e) = p.close() {
                warn!(topic = name, partition = p.index, error = %e, "closing a deleted partition");
            }
        }
        if let Err(e) = self.catalog.delete_topic(name) {
            warn!(topic = name, error = %e, "removing a deleted topic");
        }
    }
}

impl Host for ReplicaManager {
    fn apply(&self, effect: Effect) -> Result<()> {
        match effect {
            Effect::CreateTopic { name, id, seq, replicas, configs } => {
                self.create_topic(&name, id, seq, &replicas, configs)
            }
            Effect::AddPartitions { name, id, seq, first, replicas } => {
                self.add_partitions(&name, id, seq, first, &replicas)
            }
            Effect::Relist { name, id, partition, group, listed, host, initial } => {
                self.relist(&name, id, partition, group, listed, host, &initial)
            }
            Effect::TopicConfigs { name, id, configs } => {
                if self.catalog.topic(&name).is_some_and(|t| t.id == id) {
                    if let Err(e) = self.catalog.apply_topic_configs(&name, configs) {
                        warn!(topic = %name, error = %e, "applying topic configs");
                    }
                    info!(topic = %name, "topic configs applied from the metadata log");
                }
                Ok(())
            }
            Effect::BrokerDefaults { configs } => {
                info!(configs = configs.len(), "cluster-wide broker configs applied from the metadata log");
                self.catalog.set_cluster_defaults(configs);
                Ok(())
            }
            Effect::DeleteRecords { name, id, partition, offset } => {
                let topic = self.catalog.topic(&name).filter(|t| t.id == id);
                if let Some(p) = topic.and_then(|t| t.partitions.get(partition as usize).cloned()) {
                    p.raise_log_start(offset);
                }
                Ok(())
            }
            Effect::DeleteTopic { name, id, seq, partitions } => {
                self.delete_topic(&name, id, seq, partitions);
                Ok(())
            }
        }
    }

    fn limits(&self) -> Limits {
        let s = self.catalog.settings();
        Limits {
            broker_partitions_max: s.i64("max.broker.partitions").max(0) as usize,
            heartbeat_interval: Duration::from_millis(s.i64("broker.heartbeat.interval.ms").max(1) as u64),
            session_timeout: Duration::from_millis(s.i64("broker.session.timeout.ms").max(1) as u64),
        }
    }

    fn placement_unsafe_allowed(&self, topic_configs: &BTreeMap<String, String>) -> bool {
        topic_config::effective("placement.unsafe.allow", topic_configs, &self.catalog.settings())
            .eq_ignore_ascii_case("true")
    }

    fn configs_after(
        &self,
        current: &BTreeMap<String, String>,
        change: &TopicConfigChange,
    ) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
        crate::config_change::topic_configs_after(current, change)
    }
}

/// Whose replica a partition directory holds ([`ReplicaManager::claim_dir`]).
#[derive(PartialEq)]
enum Claim {
    /// The topic's, from before.
    Held,
    /// The topic's, claimed just now.
    New,
    /// Another topic's of the same name.
    Other,
}

/// Handles what peers send about partitions, one message at a time.
async fn peer_loop(manager: Arc<ReplicaManager>, mut inbox: mpsc::Receiver<(u64, Vec<u8>)>) {
    while let Some((from, data)) = inbox.recv().await {
        match serde_json::from_slice::<PeerMessage>(&data) {
            Ok(msg) => manager.on_message(from, msg),
            Err(e) => warn!(from, error = %e, "unreadable message from a peer"),
        }
    }
}

/// Every half second, tells each broker which partitions it does not host this broker
/// leads, so that its Metadata answers name their leaders (with RF below the number of
/// brokers), and every broker the in-sync replicas of the partitions it leads where they
/// changed (every `ISR_REFRESH_ROUNDS`, all of them). Terms order announcements from
/// successive leaders.
///
/// A round in which nothing can have changed is skipped: no partition group woke since the
/// last round (the driver's `activity`; a quiet group's leader, term and in-sync replicas
/// stand still), the brokers are the same ones (a restarted broker has a new incarnation
/// and learns everything at once), and so is `replica.lag.time.max.ms`. Otherwise each
/// round locks every replica of the broker, which was most of an idle broker's CPU (0.9% of
/// a core at 10,000 partitions). Every `ISR_REFRESH_ROUNDS` a round runs anyway.
pub async fn announce_leaders(manager: Arc<ReplicaManager>, controller: Arc<Controller>) {
    // What was last announced per group led here, and how many rounds since all were.
    let mut announced: HashMap<RaftGroupId, (u64, Vec<i32>)> = HashMap::new();
    let mut round: u32 = 0;
    let mut seen: Option<Seen> = None;
    loop {
        tokio::time::sleep(ANNOUNCE_INTERVAL).await;
        round = round.wrapping_add(1);
        let refresh = round.is_multiple_of(ISR_REFRESH_ROUNDS);
        let lag_ticks = isr_lag_ticks(&manager.catalog.settings());
        // Read before the groups are: a change made while they are read moves it again.
        let activity = manager.driver.activity();
        let brokers = controller.brokers().into_iter().map(|b| (b.id, b.incarnation)).collect();
        let now = Seen { activity, brokers, lag_ticks };
        if !refresh && seen.as_ref() == Some(&now) {
            continue;
        }
        let peers: Vec<i32> = now.brokers.iter().map(|(id, _)| *id).filter(|id| *id != manager.node_id).collect();
        seen = Some(now);
        let mut leads: HashMap<i32, Vec<(RaftGroupId, u64)>> = HashMap::new();
        let mut isr: Vec<(RaftGroupId, u64, Vec<i32>)> = Vec::new();
        let mut led = std::collections::HashSet::new();
        for t in manager.catalog.topics_snapshot() {
            for p in &t.partitions {
                let Some((replica, group)) = p.replica() else { continue };
                let (term, in_sync) = {
                    let r = lock(replica);
                    if !r.is_leader() {
                        continue;
                    }
                    (r.term(), r.in_sync(lag_ticks))
                };
                led.insert(group);
                let in_sync: Vec<i32> = in_sync.into_iter().map(broker_of).collect();
                if refresh || announced.get(&group).is_none_or(|(t, s)| *t != term || *s != in_sync) {
                    announced.insert(group, (term, in_sync.clone()));
                    isr.push((group, term, in_sync));
                }
                for peer in peers.iter().filter(|id| !p.replicas.contains(id)) {
                    leads.entry(*peer).or_default().push((group, term));
                }
            }
        }
        announced.retain(|group, _| led.contains(group));
        for peer in peers {
            let leads = leads.remove(&peer).unwrap_or_default();
            if !leads.is_empty() || !isr.is_empty() {
                manager.send(peer, &PeerMessage::Leaders { leads, isr: isr.clone() });
            }
        }
    }
}

/// What a round of [`announce_leaders`] saw: the driver's activity, the brokers (id,
/// incarnation), and `replica.lag.time.max.ms` in ticks.
#[derive(PartialEq)]
struct Seen {
    activity: u64,
    brokers: Vec<(i32, u64)>,
    lag_ticks: u64,
}

/// `replica.lag.time.max.ms` in Raft ticks: a replica not caught up for longer is out of
/// sync.
pub fn isr_lag_ticks(settings: &crate::config::Settings) -> u64 {
    settings.i64("replica.lag.time.max.ms").max(0) as u64 / runnel_raft::driver::TICK.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_start_sync_lists_the_partition_directories_it_covered() {
        let data = tempfile::tempdir().expect("tempdir");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        for d in ["orders-0", "orders-1", "__cluster_metadata-0"] {
            std::fs::create_dir(data.path().join(d)).expect("mkdir");
        }
        std::fs::write(data.path().join("meta.properties"), b"node.id=0\n").expect("write");
        // A link to a directory is not counted: it may lead to another filesystem.
        std::os::unix::fs::symlink(elsewhere.path(), data.path().join("linked-0")).expect("symlink");
        let listed = sync_data_dir(data.path().to_path_buf()).await;
        let mut names: Vec<_> = listed.iter().filter_map(|p| p.file_name()?.to_str().map(str::to_owned)).collect();
        names.sort();
        assert_eq!(names, ["__cluster_metadata-0", "orders-0", "orders-1"]);
        assert_eq!(listed.iter().find(|p| p.ends_with("orders-0")), Some(&partition_dir(data.path(), "orders", 0)));
        // A broker's first start: no data directory yet.
        assert!(sync_data_dir(data.path().join("not-yet")).await.is_empty());
        // After a clean shutdown nothing needs the sync; the mark is used once.
        mark_clean_shutdown(data.path());
        assert!(sync_data_dir(data.path().to_path_buf()).await.is_empty());
        assert!(!data.path().join(CLEAN_SHUTDOWN).exists());
        assert_eq!(sync_data_dir(data.path().to_path_buf()).await.len(), 3);
    }
}
