//! Cluster mode (`controller.quorum.voters` set): the metadata Raft group and this
//! broker's view of it.
//!
//! The metadata log (`__cluster_metadata-0`, Raft group 0 over the voters) holds JSON
//! records: broker registrations and topics with their replica assignments. Every broker
//! replays it and keeps the result in memory; applying a topic opens this broker's
//! replicas of its partitions (one Raft group each) and puts the topic in the catalog.
//! Only the metadata leader (the controller) proposes. Other brokers forward their
//! registration, CreateTopics and topic auto-creation to it (KIP-590); the controller
//! answers a forwarded creation with its outcome, so a broker whose copy of the metadata
//! lags never decides on its own.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::error::ResponseError;
use runnel_raft::driver::lock;
use runnel_raft::{Driver, Durability, Hooks, ProposeError, Replica, ReplicaConfig, SharedReplica, SyncPolicy};
use runnel_wire::Batches;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use uuid::Uuid;

use crate::broker::Broker;
use crate::catalog::{partition_dir, Topic};
use crate::partition::{broker_of, Partition};
use crate::topic_config;

pub const META_GROUP: u64 = 0;
const META_DIR: &str = "__cluster_metadata-0";
/// How long a metadata change may take to commit and apply before the request fails.
const APPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Applied config change ids remembered, for the brokers waiting on them.
const CONFIG_CHANGES_KEPT: usize = 1024;

/// A broker as registered in the metadata log.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: u16,
    /// Failure-domain labels, outermost first, e.g. [("region","us-east1"),("zone","b")].
    pub location: Vec<(String, String)>,
    /// New at every start, so that each start registers again and the broker can tell
    /// when it has replayed the metadata log that far (`until_registered`).
    #[serde(default)]
    pub incarnation: u64,
}

impl BrokerInfo {
    /// The Metadata `rack` clients match `client.rack` against: the zone when the location
    /// names one, else its innermost label.
    pub fn rack(&self) -> Option<String> {
        let zone = self.location.iter().find(|(k, _)| k == "zone");
        zone.or(self.location.last()).map(|(_, v)| v.clone())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(tag = "type")]
enum Record {
    RegisterBroker(BrokerInfo),
    CreateTopic {
        name: String,
        id: Uuid,
        seq: u64,
        replicas: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
        id: Uuid,
    },
    /// CreatePartitions: the replica lists of the topic's new partitions `first..`. Applied
    /// only while the topic has `first` partitions, so two racing requests add once.
    AddPartitions {
        name: String,
        id: Uuid,
        first: usize,
        replicas: Vec<Vec<i32>>,
    },
    /// AlterPartitionReassignments: the partition moves to `target` (its original replicas
    /// when a move is cancelled). The partition's leader carries the move out.
    Reassign {
        name: String,
        id: Uuid,
        partition: i32,
        target: Vec<i32>,
    },
    /// The partition's Raft group now has exactly these voters: the move is over.
    Reassigned {
        name: String,
        id: Uuid,
        partition: i32,
        replicas: Vec<i32>,
    },
    /// A topic's config overrides, whole (AlterConfigs, IncrementalAlterConfigs), and the
    /// id of the change that produced them.
    TopicConfigs {
        name: String,
        id: Uuid,
        configs: BTreeMap<String, String>,
        #[serde(default)]
        change_id: Uuid,
    },
    /// The controller has not heard from the broker within `broker.session.timeout.ms`
    /// (fenced), or hears from it again (not fenced).
    FenceBroker {
        id: i32,
        fenced: bool,
    },
    /// DeleteRecords: every replica of the partition moves its log start to `offset` (at
    /// most the high watermark when it was asked). Kept out of the partition's own log,
    /// where an entry would take an offset that Kafka's DeleteRecords does not.
    DeleteRecords {
        name: String,
        id: Uuid,
        partition: i32,
        offset: i64,
    },
}

/// What brokers send each other over the Raft transport besides Raft messages: requests
/// forwarded to the controller, its replies, and leadership announcements.
#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "type")]
enum Forward {
    Register(BrokerInfo),
    /// Every `broker.heartbeat.interval.ms`, to the controller: this broker is alive.
    Heartbeat {
        id: i32,
    },
    /// A change the controller decides on and answers with a `Reply`.
    Call {
        req: u64,
        call: Call,
    },
    /// The controller's answer to a call: its error code and message, or none when it
    /// succeeded.
    Reply {
        req: u64,
        error: Option<(i16, String)>,
    },
    /// ElectLeaders: hand these groups (group, preferred broker) to their preferred leaders,
    /// where the receiver leads them and the preferred replica has caught up.
    Elect {
        groups: Vec<(u64, i32)>,
    },
    /// The sender leads these Raft groups (group, term), which the receiver does not host.
    Leaders {
        leads: Vec<(u64, u64)>,
    },
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "call")]
enum Call {
    CreateTopic {
        name: String,
        partitions: i32,
        replication_factor: i16,
        /// Manual replica lists by partition; placed over failure domains when absent.
        assignment: Option<Vec<Vec<i32>>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    DeleteTopic {
        name: String,
    },
    /// Moves a partition to `target` replicas, or cancels its move (None).
    Reassign {
        name: String,
        partition: i32,
        target: Option<Vec<i32>>,
        /// False: refuse a target whose size differs from the current replica count.
        #[serde(default = "yes")]
        allow_rf_change: bool,
    },
    /// From the partition's leader: its group's voters are the move's target.
    FinishReassign {
        name: String,
        partition: i32,
        replicas: Vec<i32>,
    },
    /// A topic config change, applied by the controller to its copy of the overrides;
    /// `change_id` tells the requesting broker when its change is applied.
    AlterTopicConfigs {
        name: String,
        change: crate::handlers::alter_configs::TopicChange,
        change_id: Uuid,
    },
    CreatePartitions {
        name: String,
        /// The new partition count.
        count: i32,
        /// Manual replica lists of the new partitions.
        assignment: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    },
    /// DeleteRecords, from the partition's leader, which checked the offset.
    DeleteRecords {
        name: String,
        partition: i32,
        offset: i64,
    },
}

type Outcome = Result<(), (ResponseError, String)>;

struct TopicMeta {
    id: Uuid,
    /// Sequence number, which names the partitions' Raft groups.
    seq: u64,
    partitions: usize,
    /// Replicas per partition.
    rf: usize,
    /// Each partition's replicas when it was created: its Raft group's first voters, which a
    /// replica added later starts from before it replays the group's changes.
    initial: Vec<Vec<i32>>,
}

/// A partition moving to new replicas (AlterPartitionReassignments).
#[derive(Clone, Debug)]
pub struct Moving {
    /// The replicas before the move (what a cancellation returns to).
    pub original: Vec<i32>,
    pub target: Vec<i32>,
}

impl Moving {
    /// What Metadata lists while the move runs: the target, then the replicas leaving.
    pub fn listed(&self) -> Vec<i32> {
        let mut all = self.target.clone();
        all.extend(self.original.iter().filter(|b| !self.target.contains(b)));
        all
    }
}

#[derive(Default)]
struct State {
    brokers: BTreeMap<i32, BrokerInfo>,
    /// Registered brokers the controller has fenced: not offered to clients, not given new
    /// replicas.
    fenced: BTreeSet<i32>,
    /// Partitions moving to new replicas, by (topic, partition).
    moving: BTreeMap<(String, i32), Moving>,
    /// The latest config changes applied (ids, oldest first; bounded).
    config_changes: VecDeque<Uuid>,
    /// Log starts DeleteRecords set, by (topic, partition).
    log_starts: BTreeMap<(String, i32), i64>,
    topics: BTreeMap<String, TopicMeta>,
    next_seq: u64,
}

fn yes() -> bool {
    true
}

impl State {
    /// The registered brokers that are not fenced.
    fn live(&self) -> Vec<BrokerInfo> {
        self.brokers.values().filter(|b| !self.fenced.contains(&b.id)).cloned().collect()
    }
}

/// Parses `controller.quorum.voters`: `id@host:port,...`.
pub fn parse_voters(s: &str) -> Result<Vec<(i32, String)>> {
    let mut out = Vec::new();
    for v in s.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let (id, addr) = v.split_once('@').with_context(|| format!("voter {v}: expected id@host:port"))?;
        let id: i32 = id.parse().with_context(|| format!("voter {v}: bad id"))?;
        if id < 0 {
            bail!("voter {v}: ids are 0 or more");
        }
        out.push((id, addr.to_string()));
    }
    Ok(out)
}

/// Parses `broker.location`: `region=us-east1,zone=us-east1-b,rack=r7`.
pub fn parse_location(s: &str) -> Result<Vec<(String, String)>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').with_context(|| format!("location part {p}: expected key=value"))?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Raft group of partition `p` of the topic with sequence number `seq`.
pub fn group_id(seq: u64, p: i32) -> u64 {
    (seq << 24) | p as u64
}

/// The failure domain of each broker at the outermost level where registered brokers
/// differ (each broker is its own domain when all locations agree): (level name, broker id
/// -> domain path such as "us-east1/us-east1-b").
fn spanning_domains(brokers: &[BrokerInfo]) -> (String, HashMap<i32, String>) {
    let depth = brokers.iter().map(|b| b.location.len()).max().unwrap_or(0);
    for level in 0..depth {
        let path =
            |b: &BrokerInfo| b.location.iter().take(level + 1).map(|(_, v)| v.as_str()).collect::<Vec<_>>().join("/");
        let domains: HashMap<i32, String> = brokers.iter().map(|b| (b.id, path(b))).collect();
        if domains.values().collect::<std::collections::HashSet<_>>().len() > 1 {
            let name = brokers.iter().find_map(|b| b.location.get(level).map(|(k, _)| k.clone())).unwrap_or_default();
            return (name, domains);
        }
    }
    ("broker".into(), brokers.iter().map(|b| (b.id, b.id.to_string())).collect())
}

/// Why an assignment would not survive losing one failure domain (at the outermost level
/// the brokers span), if it would not: a partition of RF 3 or more with so many replicas in
/// one domain that the others are not a majority. RF 1 and 2 never survive a loss and are
/// taken as chosen.
pub fn placement_risk(brokers: &[BrokerInfo], replicas: &[Vec<i32>]) -> Option<String> {
    let (level, domain) = spanning_domains(brokers);
    let spanned = domain.values().collect::<std::collections::HashSet<_>>().len();
    for (p, reps) in replicas.iter().enumerate() {
        let rf = reps.len();
        if rf < 3 {
            continue;
        }
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for r in reps {
            *count.entry(domain.get(r).map_or("?", String::as_str)).or_default() += 1;
        }
        let Some((d, n)) = count.into_iter().max_by_key(|(_, n)| *n) else { continue };
        if rf - n < rf / 2 + 1 {
            return Some(format!(
                "partition {p} would have {n} of its {rf} replicas in {level} {d}, and losing that {level} would lose \
                 the partition's quorum ({spanned} {level}s are registered): add {level}s, lower the replication \
                 factor, or create the topic with placement.unsafe.allow=true"
            ));
        }
    }
    None
}

/// Replica assignment over failure domains: brokers are ordered so that neighbours differ
/// at the outermost level first (one per region, then one per zone inside each, ...).
/// Partition `p` starts at position `p`, so leaders (first replicas) rotate over all
/// brokers, and takes each next replica from the least used domain of the outermost level
/// the brokers span (the next broker in order among those), so replicas spread evenly over
/// regions even when regions have different numbers of brokers.
pub fn place(brokers: &[BrokerInfo], partitions: i32, rf: usize) -> Vec<Vec<i32>> {
    fn interleave(mut brokers: Vec<&BrokerInfo>, level: usize) -> Vec<&BrokerInfo> {
        if brokers.len() <= 1 || brokers.iter().all(|b| b.location.len() <= level) {
            brokers.sort_by_key(|b| b.id);
            return brokers;
        }
        let mut domains: BTreeMap<String, Vec<&BrokerInfo>> = BTreeMap::new();
        for b in brokers {
            let key = b.location.get(level).map(|(_, v)| v.clone()).unwrap_or_default();
            domains.entry(key).or_default().push(b);
        }
        let mut lists: Vec<Vec<&BrokerInfo>> = domains.into_values().map(|d| interleave(d, level + 1)).collect();
        let mut out = Vec::new();
        let mut i = 0;
        while lists.iter().any(|l| i < l.len()) {
            for l in &mut lists {
                if let Some(b) = l.get(i) {
                    out.push(*b);
                }
            }
            i += 1;
        }
        out
    }
    let order = interleave(brokers.iter().collect(), 0);
    let (_, domain) = spanning_domains(brokers);
    let n = order.len();
    (0..partitions as usize)
        .map(|p| {
            let mut chosen: Vec<i32> = Vec::with_capacity(rf);
            let mut used: HashMap<&str, usize> = HashMap::new();
            while chosen.len() < rf.min(n) {
                let next = (0..n)
                    .map(|i| order[(p + i) % n].id)
                    .filter(|id| !chosen.contains(id))
                    .min_by_key(|id| domain.get(id).map_or(0, |d| used.get(d.as_str()).copied().unwrap_or(0)));
                let Some(id) = next else { break };
                if let Some(d) = domain.get(&id) {
                    *used.entry(d.as_str()).or_default() += 1;
                }
                chosen.push(id);
            }
            chosen
        })
        .collect()
}

/// Marks a partition directory as holding the replica of topic `id` (the file `topic.id`),
/// or tells whether it does. Directories are named by topic name, so after a topic was
/// deleted and created again, replaying the metadata log would otherwise open (and then
/// delete) the new topic's data as the old one's.
fn claim_dir(dir: &std::path::Path, id: Uuid) -> Result<bool> {
    let marker = dir.join("topic.id");
    match std::fs::read_to_string(&marker) {
        Ok(owner) => Ok(owner.trim() == id.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            let mut f = std::fs::File::create(&marker)?;
            std::io::Write::write_all(&mut f, id.to_string().as_bytes())?;
            f.sync_all()?;
            Ok(true)
        }
        Err(e) => Err(e.into()),
    }
}

fn over_capacity(max: usize, what: String) -> (ResponseError, String) {
    (ResponseError::InvalidPartitions, format!("{what}: more than max.broker.partitions={max} on a broker"))
}

/// A manual assignment: every partition's replicas distinct, registered, and as many as
/// every other partition's.
fn check_assignment(a: &[Vec<i32>], brokers: &[BrokerInfo]) -> Result<(), (ResponseError, String)> {
    let bad = |msg: String| Err((ResponseError::InvalidReplicaAssignment, msg));
    let rf = a.first().map_or(0, |r| r.len());
    for (p, replicas) in a.iter().enumerate() {
        if replicas.is_empty() || replicas.len() != rf {
            return bad("All partitions should have the same number of replicas".into());
        }
        if let Some(id) = replicas.iter().find(|id| !brokers.iter().any(|b| b.id == **id)) {
            return bad(format!("Partition {p} names broker {id}, which is not registered"));
        }
        if (1..replicas.len()).any(|i| replicas[..i].contains(&replicas[i])) {
            return bad(format!("Partition {p} names a broker twice"));
        }
    }
    Ok(())
}

pub struct Cluster {
    pub node_id: i32,
    /// A cluster of one: no `controller.quorum.voters`, this broker is the only voter.
    pub single: bool,
    pub me: BrokerInfo,
    pub cluster_id: String,
    meta: SharedReplica,
    driver: OnceLock<Arc<Driver>>,
    state: RwLock<State>,
    broker: Weak<Broker>,
    data_dir: PathBuf,
    /// Serializes the controller's topic creation (checks, then proposes).
    creating: Mutex<()>,
    /// Serializes the controller's topic config changes (computed, proposed and applied).
    configuring: tokio::sync::Mutex<()>,
    /// A creation of the offsets topic is under way (see `coordinators::locate`).
    pub offsets_creating: AtomicBool,
    /// Last topic sequence number handed out by this controller (proposed, maybe not yet
    /// applied), so two creations in flight never share Raft group ids.
    last_seq: AtomicU64,
    /// Woken after every applied metadata record.
    applied: tokio::sync::Notify,
    /// Requests forwarded to the controller, waiting for its reply.
    forwarded: Mutex<HashMap<u64, tokio::sync::oneshot::Sender<Outcome>>>,
    next_req: AtomicU64,
    /// Index of the last metadata entry applied to `state`.
    meta_applied: AtomicU64,
    /// Leaders of partitions this broker does not host, as their leaders announce them:
    /// group -> (broker, term).
    hints: RwLock<HashMap<u64, (i32, u64)>>,
    /// Controller only: when each broker was last heard from (heartbeat or registration).
    heard: Mutex<HashMap<i32, Instant>>,
}

impl Cluster {
    /// Opens the metadata replica, starts the Raft driver and this broker's registration.
    /// Without `controller.quorum.voters` the broker is a cluster of one: the only voter of
    /// the metadata group and of every partition's group, with no Raft listener.
    pub async fn start(broker: &Arc<Broker>) -> Result<Arc<Cluster>> {
        let c = &broker.config;
        let node_id = broker.node_id();
        let configured = c.settings.get("controller.quorum.voters");
        let single = configured.is_empty();
        let voters = if single { vec![(node_id, String::new())] } else { parse_voters(configured)? };
        let Some((_, listen)) = voters.iter().find(|(id, _)| *id == node_id) else {
            bail!("node.id {node_id} is not among controller.quorum.voters");
        };
        let me = BrokerInfo {
            id: node_id,
            host: c.advertised_host.clone(),
            port: c.advertised_port,
            location: parse_location(c.settings.get("broker.location"))?,
            incarnation: Uuid::new_v4().as_u64_pair().0,
        };
        let raft_ids: Vec<u64> = voters.iter().map(|(id, _)| *id as u64 + 1).collect();
        let mut cfg = ReplicaConfig::new(node_id as u64 + 1, raft_ids);
        cfg.deliver_committed = true;
        let dir = c.data_dir.join(META_DIR);
        let mut meta = Replica::open(&dir, Default::default(), &cfg, crate::now_ms())
            .with_context(|| format!("opening {}", dir.display()))?;
        if single {
            // The only voter stands at once instead of after an election timeout.
            let _ = meta.campaign();
        }
        let meta = Arc::new(Mutex::new(meta));
        let cluster_id = if single {
            broker.catalog.cluster_id.clone()
        } else {
            // Same voters, same cluster id on every broker.
            let digest = voters.iter().fold(0xcbf29ce484222325u64, |h, (id, a)| {
                format!("{id}@{a}").bytes().fold(h, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
            });
            Uuid::from_u64_pair(digest, digest.rotate_left(17)).simple().to_string()[..22].to_string()
        };
        let cluster = Arc::new(Cluster {
            node_id,
            single,
            me,
            cluster_id,
            meta: meta.clone(),
            driver: OnceLock::new(),
            state: RwLock::new(State::default()),
            broker: Arc::downgrade(broker),
            data_dir: c.data_dir.clone(),
            creating: Mutex::new(()),
            configuring: tokio::sync::Mutex::new(()),
            offsets_creating: AtomicBool::new(false),
            last_seq: AtomicU64::new(0),
            applied: tokio::sync::Notify::new(),
            forwarded: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(0),
            meta_applied: AtomicU64::new(0),
            hints: RwLock::new(HashMap::new()),
            heard: Mutex::new(HashMap::new()),
        });
        let mut peers: HashMap<u64, String> =
            voters.iter().filter(|(id, _)| *id != node_id).map(|(id, a)| (*id as u64 + 1, a.clone())).collect();
        // Fault injection: reach some peers through another address (a delaying proxy).
        for (id, addr) in parse_voters(c.settings.get("fault.raft.dial"))? {
            if let Some(a) = peers.get_mut(&(id as u64 + 1)) {
                *a = addr;
            }
        }
        let sync = match (c.settings.get("log.fsync.policy"), c.settings.get("log.fsync.scope")) {
            ("never", _) => SyncPolicy::Never,
            (_, "file") => SyncPolicy::File,
            _ => SyncPolicy::Filesystem,
        };
        let listen = Some(listen.as_str()).filter(|_| !single);
        let driver = Driver::start(node_id as u64 + 1, listen, peers, cluster.clone(), sync, crate::now_ms)
            .await
            .with_context(|| format!("listening for peers on {}", listen.unwrap_or_default()))?;
        let _ = cluster.driver.set(driver.clone());
        driver.add_group(META_GROUP, meta);
        tokio::spawn(register_loop(cluster.clone()));
        tokio::spawn(heartbeat_loop(cluster.clone()));
        tokio::spawn(fence_loop(cluster.clone()));
        tokio::spawn(announce_leaders(cluster.clone()));
        tokio::spawn(crate::coordinators::follow_leaders(cluster.clone()));
        tokio::spawn(crate::rebalance::preferred_leaders(cluster.clone()));
        tokio::spawn(crate::reassign::carry_out(cluster.clone()));
        info!(node_id, listen = listen.unwrap_or("none"), voters = voters.len(), "metadata quorum started");
        Ok(cluster)
    }

    /// The Raft group of a partition of the cluster.
    pub fn group_of(&self, topic: &str, partition: i32) -> Option<u64> {
        self.read().topics.get(topic).map(|t| group_id(t.seq, partition))
    }

    /// Asks the broker that leads `group` to hand it to `preferred` (ElectLeaders).
    pub fn ask_to_elect(&self, leader: i32, group: u64, preferred: i32) {
        if leader == self.node_id {
            self.elect_here(group, preferred);
        } else if let Ok(data) = serde_json::to_vec(&Forward::Elect { groups: vec![(group, preferred)] }) {
            self.driver().forward(leader as u64 + 1, data);
        }
    }

    /// Hands a group this broker leads to `preferred` (see `rebalance::hand_over`);
    /// returns whether a transfer started.
    pub fn elect_here(&self, group: u64, preferred: i32) -> bool {
        let started = self.driver().group(group).is_some_and(|r| crate::rebalance::hand_over(&r, preferred));
        if started {
            self.kick(group);
        }
        started
    }

    /// Has the driver handle the group's ready soon (after a proposal).
    pub fn kick(&self, group: u64) {
        self.driver().kick(group);
    }

    pub fn broker(&self) -> Option<Arc<Broker>> {
        self.broker.upgrade()
    }

    fn driver(&self) -> &Arc<Driver> {
        self.driver.get().expect("driver is set in start")
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every registered broker, fenced or not.
    pub fn brokers(&self) -> Vec<BrokerInfo> {
        self.read().brokers.values().cloned().collect()
    }

    /// The registered brokers that are not fenced: what Metadata and DescribeCluster list,
    /// and where new replicas go.
    pub fn live_brokers(&self) -> Vec<BrokerInfo> {
        self.read().live()
    }

    /// (leader, epoch) of a partition this broker does not host, as its leader announced.
    pub fn leader_hint(&self, topic: &str, partition: i32) -> Option<(i32, i32)> {
        let seq = self.read().topics.get(topic)?.seq;
        let hints = self.hints.read().unwrap_or_else(|p| p.into_inner());
        hints.get(&group_id(seq, partition)).map(|(b, term)| (*b, *term as i32))
    }

    /// The controller (metadata leader) as a broker id.
    pub fn controller(&self) -> Option<i32> {
        lock(&self.meta).leader().map(broker_of)
    }

    pub fn is_controller(&self) -> bool {
        lock(&self.meta).is_leader()
    }

    /// Proposes a record (controller only) and waits until this broker has applied it.
    async fn propose(&self, rec: &Record, applied: impl Fn(&State) -> bool) -> Result<(), (ResponseError, String)> {
        let data = serde_json::to_vec(rec).map_err(|e| (ResponseError::UnknownServerError, e.to_string()))?;
        let rx = {
            let mut meta = lock(&self.meta);
            let p = meta.propose_record(&data, crate::now_ms()).map_err(|e| match e {
                ProposeError::NotLeader(_) => {
                    (ResponseError::NotController, "this broker is not the controller".into())
                }
                e => (ResponseError::UnknownServerError, format!("{e:?}")),
            })?;
            meta.wait(p.index, p.term, Durability::Committed)
        };
        self.driver().kick(META_GROUP);
        let deadline = tokio::time::Instant::now() + APPLY_TIMEOUT;
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(true)) => {}
            Ok(_) => {
                return Err((ResponseError::NotController, "controller changed before the change committed".into()))
            }
            Err(_) => return Err((ResponseError::RequestTimedOut, "metadata change did not commit in time".into())),
        }
        self.until_applied(applied, "metadata change not applied in time").await
    }

    /// Creates a topic. The controller places replicas over the failure domains of the
    /// registered brokers and commits the assignment; any other broker forwards the
    /// request to it, as Kafka brokers do (KIP-590). Either way this returns once the
    /// topic is applied here.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        rf: i16,
        assignment: Option<Vec<Vec<i32>>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Uuid, (ResponseError, String)> {
        // Only "exists" can be decided from a copy that may lag; the controller checks the
        // rest against the registered brokers.
        if self.read().topics.contains_key(name) {
            return Err((ResponseError::TopicAlreadyExists, format!("Topic '{name}' already exists.")));
        }
        let name = name.to_string();
        let call = Call::CreateTopic {
            name: name.clone(),
            partitions,
            replication_factor: rf,
            assignment,
            configs,
            validate_only,
        };
        self.run(call).await?;
        if validate_only {
            return Ok(Uuid::nil());
        }
        self.until_applied(|s| s.topics.contains_key(&name), "the created topic was not applied here in time").await?;
        Ok(self.read().topics.get(&name).map(|t| t.id).unwrap_or_default())
    }

    /// Deletes a topic through the controller; returns once it is gone here too.
    pub async fn delete_topic(&self, name: &str) -> Result<(), (ResponseError, String)> {
        let id = self.read().topics.get(name).map(|t| t.id);
        self.run(Call::DeleteTopic { name: name.to_string() }).await?;
        // Gone, or replaced by a newer topic of the same name.
        self.until_applied(|s| s.topics.get(name).map(|t| t.id) != id, "the deletion was not applied here in time")
            .await
    }

    /// Decides a call here when this broker is the controller, else forwards it.
    async fn run(&self, call: Call) -> Result<(), (ResponseError, String)> {
        if self.is_controller() {
            self.decide(call).await
        } else {
            self.forward(call).await
        }
    }

    /// Controller: checks a call against the current metadata and commits its record.
    async fn decide(&self, call: Call) -> Result<(), (ResponseError, String)> {
        self.until_caught_up().await?;
        match call {
            Call::CreateTopic { name, partitions, replication_factor: rf, assignment, configs, validate_only } => {
                let brokers = self.check_new_topic(&name, rf)?;
                if let Some(a) = &assignment {
                    check_assignment(a, &brokers)?;
                }
                self.check_replica_count(partitions.max(0) as usize * rf.max(0) as usize)?;
                let placed = assignment.clone().unwrap_or_else(|| place(&brokers, partitions, rf as usize));
                self.check_broker_load(&placed)?;
                self.check_placement(&name, &brokers, &placed, &configs)?;
                if validate_only {
                    return Ok(());
                }
                let rec = {
                    let _g = self.creating.lock().unwrap_or_else(|p| p.into_inner());
                    let state = self.read();
                    if state.topics.contains_key(&name) {
                        return Err((ResponseError::TopicAlreadyExists, format!("Topic '{name}' already exists.")));
                    }
                    let seq = state.next_seq.max(self.last_seq.load(Ordering::Acquire) + 1).max(1);
                    self.last_seq.store(seq, Ordering::Release);
                    Record::CreateTopic { name: name.clone(), id: Uuid::new_v4(), seq, replicas: placed, configs }
                };
                self.propose(&rec, |s| s.topics.contains_key(&name)).await
            }
            Call::DeleteTopic { name } => {
                let Some(id) = self.read().topics.get(&name).map(|t| t.id) else {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic.".into(),
                    ));
                };
                let rec = Record::DeleteTopic { name: name.clone(), id };
                self.propose(&rec, |s| s.topics.get(&name).map(|t| t.id) != Some(id)).await
            }
            Call::Reassign { name, partition, target, allow_rf_change } => {
                let (id, partitions) =
                    self.read().topics.get(&name).map(|t| (t.id, t.partitions)).ok_or_else(|| {
                        (ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))
                    })?;
                if partition < 0 || partition as usize >= partitions {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        format!("Partition {partition} of '{name}' does not exist."),
                    ));
                }
                let moving = self.read().moving.get(&(name.clone(), partition)).cloned();
                let target = match (target, &moving) {
                    (None, None) => {
                        return Err((ResponseError::NoReassignmentInProgress, "No reassignment is in progress.".into()))
                    }
                    (None, Some(m)) => m.original.clone(),
                    (Some(t), _) => {
                        check_assignment(std::slice::from_ref(&t), &self.brokers())?;
                        t
                    }
                };
                let current = self
                    .broker
                    .upgrade()
                    .and_then(|b| b.catalog.topic(&name))
                    .and_then(|t| t.partitions.get(partition as usize).map(|p| p.replicas.clone()))
                    .unwrap_or_default();
                let now = moving.as_ref().map_or(current.len(), |m| m.original.len());
                if !allow_rf_change && target.len() != now {
                    return Err((
                        ResponseError::InvalidReplicationFactor,
                        format!("The target has {} replicas where the partition has {now}, and the request does not allow a change.", target.len()),
                    ));
                }
                if moving.is_none() && current == target {
                    return Ok(());
                }
                let rec = Record::Reassign { name: name.clone(), id, partition, target: target.clone() };
                self.propose(&rec, |s| s.moving.get(&(name.clone(), partition)).is_some_and(|m| m.target == target))
                    .await
            }
            Call::FinishReassign { name, partition, replicas } => {
                let key = (name.clone(), partition);
                let Some(id) = self
                    .read()
                    .topics
                    .get(&name)
                    .map(|t| t.id)
                    .filter(|_| self.read().moving.get(&key).is_some_and(|m| m.target == replicas))
                else {
                    return Ok(());
                };
                let rec = Record::Reassigned { name: name.clone(), id, partition, replicas };
                self.propose(&rec, |s| !s.moving.contains_key(&key)).await
            }
            Call::AlterTopicConfigs { name, change, change_id } => {
                // One change at a time, each applied to the overrides the last one left.
                let _one = self.configuring.lock().await;
                let current = self.broker.upgrade().and_then(|b| b.catalog.topic(&name));
                let (Some(id), Some(current)) = (self.read().topics.get(&name).map(|t| t.id), current) else {
                    return Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")));
                };
                let configs = change.applied_to(&current.configs)?;
                let rec = Record::TopicConfigs { name: name.clone(), id, configs, change_id };
                self.propose(&rec, |s| s.config_changes.contains(&change_id)).await
            }
            Call::DeleteRecords { name, partition, offset } => {
                let key = (name.clone(), partition);
                let Some(id) = self.read().topics.get(&name).map(|t| t.id) else {
                    return Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")));
                };
                if self.read().log_starts.get(&key).is_some_and(|s| *s >= offset) {
                    return Ok(());
                }
                let rec = Record::DeleteRecords { name: name.clone(), id, partition, offset };
                self.propose(&rec, |s| s.log_starts.get(&key).is_some_and(|s| *s >= offset)).await
            }
            Call::CreatePartitions { name, count, assignment, validate_only } => {
                let (id, current, rf) =
                    self.read().topics.get(&name).map(|t| (t.id, t.partitions, t.rf)).ok_or_else(|| {
                        (ResponseError::UnknownTopicOrPartition, "This server does not host this topic.".to_string())
                    })?;
                let invalid = |msg: String| Err((ResponseError::InvalidPartitions, msg));
                if count as usize == current {
                    return invalid(format!("Topic already has {current} partitions."));
                }
                if count < 1 || (count as usize) < current {
                    return invalid(format!(
                        "Topic currently has {current} partitions, which is higher than the requested {count}."
                    ));
                }
                let brokers = self.live_brokers();
                self.check_replica_count((count as usize - current) * rf)?;
                let placed = match assignment {
                    Some(a) => {
                        if a.len() != count as usize - current {
                            return Err((
                                ResponseError::InvalidReplicaAssignment,
                                format!(
                                    "Increasing the number of partitions by {} but {} assignments provided.",
                                    count as usize - current,
                                    a.len()
                                ),
                            ));
                        }
                        check_assignment(&a, &brokers)?;
                        if a.first().is_some_and(|r| r.len() != rf) {
                            return Err((
                                ResponseError::InvalidReplicaAssignment,
                                format!("The new partitions must have {rf} replicas, as the existing ones do."),
                            ));
                        }
                        a
                    }
                    None if rf > brokers.len() => {
                        return Err((
                            ResponseError::InvalidReplicationFactor,
                            format!("The topic's replication factor of {rf} cannot be reached: only {} broker(s) are registered and not fenced.", brokers.len()),
                        ));
                    }
                    None => place(&brokers, count, rf).split_off(current),
                };
                self.check_broker_load(&placed)?;
                let configs = self.broker.upgrade().and_then(|b| b.catalog.topic(&name)).map(|t| t.configs.clone());
                self.check_placement(&name, &brokers, &placed, &configs.unwrap_or_default())?;
                if validate_only {
                    return Ok(());
                }
                let rec = Record::AddPartitions { name: name.clone(), id, first: current, replicas: placed };
                self.propose(&rec, |s| s.topics.get(&name).is_none_or(|t| t.id != id || t.partitions >= count as usize))
                    .await
            }
        }
    }

    /// `max.broker.partitions`, bounded by the 24 bits Raft group ids leave to a topic's
    /// partitions.
    fn broker_partitions_max(&self) -> usize {
        let max = self.broker.upgrade().map_or(0, |b| b.catalog.settings().i64("max.broker.partitions"));
        max.clamp(0, 1 << 24) as usize
    }

    /// Refuses a request for more new replicas than the live brokers may take in all
    /// (checked before placing, so a huge request is never placed).
    fn check_replica_count(&self, replicas: usize) -> Result<(), (ResponseError, String)> {
        let max = self.broker_partitions_max();
        let brokers = self.read().live().len().max(1);
        if replicas > max.saturating_mul(brokers) {
            return Err(over_capacity(max, format!("{replicas} new partition replicas over {brokers} broker(s)")));
        }
        Ok(())
    }

    /// Refuses a placement that would give a broker more than `max.broker.partitions`.
    fn check_broker_load(&self, placed: &[Vec<i32>]) -> Result<(), (ResponseError, String)> {
        let max = self.broker_partitions_max();
        let mut held: HashMap<i32, usize> = HashMap::new();
        for b in self.read().topics.values().flat_map(|t| t.initial.iter()).flatten() {
            *held.entry(*b).or_default() += 1;
        }
        for b in placed.iter().flatten() {
            let n = held.entry(*b).or_default();
            *n += 1;
            if *n > max {
                return Err(over_capacity(max, format!("broker {b} would hold {n} partition replicas")));
            }
        }
        Ok(())
    }

    /// Refuses a placement that losing one failure domain would break, unless the topic
    /// (or the broker) sets `placement.unsafe.allow`.
    fn check_placement(
        &self,
        name: &str,
        brokers: &[BrokerInfo],
        placed: &[Vec<i32>],
        configs: &BTreeMap<String, String>,
    ) -> Result<(), (ResponseError, String)> {
        let Some(risk) = placement_risk(brokers, placed) else { return Ok(()) };
        let forced = self.broker.upgrade().is_some_and(|b| {
            crate::topic_config::effective("placement.unsafe.allow", configs, &b.catalog.settings())
                .eq_ignore_ascii_case("true")
        });
        if !forced {
            return Err((ResponseError::InvalidReplicationFactor, format!("Topic '{name}': {risk}")));
        }
        warn!(topic = %name, %risk, "placing replicas unsafely (placement.unsafe.allow)");
        Ok(())
    }

    /// AlterPartitionReassignments for one partition: returns once the move (or its
    /// cancellation) is applied here; the partition's leader then carries it out.
    pub async fn reassign(
        &self,
        name: &str,
        partition: i32,
        target: Option<Vec<i32>>,
        allow_rf_change: bool,
    ) -> Result<(), (ResponseError, String)> {
        self.run(Call::Reassign { name: name.to_string(), partition, target: target.clone(), allow_rf_change }).await?;
        let key = (name.to_string(), partition);
        self.until_applied(
            |s| match (&target, s.moving.get(&key)) {
                (Some(t), Some(m)) => m.target == *t,
                (Some(_), None) => true, // already there, or finished meanwhile
                (None, m) => m.is_none_or(|m| m.target == m.original),
            },
            "the reassignment was not applied here in time",
        )
        .await
    }

    /// Partitions moving to new replicas.
    pub fn reassignments(&self) -> BTreeMap<(String, i32), Moving> {
        self.read().moving.clone()
    }

    /// The leader of a moving partition reports that its group's voters are the target.
    pub(crate) fn finish_reassignment(self: &Arc<Self>, name: String, partition: i32, replicas: Vec<i32>) {
        let cluster = self.clone();
        tokio::spawn(async move {
            if let Err((code, msg)) =
                cluster.run(Call::FinishReassign { name: name.clone(), partition, replicas }).await
            {
                warn!(topic = %name, partition, ?code, %msg, "reporting a finished reassignment");
            }
        });
    }

    fn initial_voters(&self, name: &str, id: Uuid, partition: i32) -> Option<Vec<i32>> {
        let state = self.read();
        state.topics.get(name).filter(|t| t.id == id).and_then(|t| t.initial.get(partition as usize).cloned())
    }

    /// Rebuilds this broker's view of a partition: the replica list Metadata shows, and
    /// whether this broker holds a replica. A replica added here starts from the group's
    /// first voters (it replays the group's changes, or gets a snapshot) and waits for the
    /// leader; a replica removed here leaves the driver and its directory is deleted.
    #[allow(clippy::too_many_arguments)]
    fn reshape(&self, broker: &Broker, name: &str, id: Uuid, p: i32, listed: Vec<i32>, host: bool, initial: &[i32]) {
        let Some(topic) = broker.catalog.topic(name).filter(|t| t.id == id) else { return };
        let Some(current) = topic.partitions.get(p as usize).cloned() else { return };
        let seq = self.read().topics.get(name).map(|t| t.seq).unwrap_or_default();
        let group = group_id(seq, p);
        let part = match (current.replica(), host) {
            (Some(_), true) => current.relisted(listed),
            (None, false) => Partition::remote(topic.name.clone(), p, listed),
            (None, true) => {
                let dir = partition_dir(&self.data_dir, name, p);
                let log_config = topic_config::log_config(&topic.configs, &broker.catalog.settings());
                let opened = claim_dir(&dir, id)
                    .with_context(|| format!("claiming {}", dir.display()))
                    .and_then(|_| self.open_replica(&dir, log_config, initial, group, false));
                let replica = match opened {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(topic = name, partition = p, error = %e, "cannot open an added replica; stopping");
                        std::process::exit(70);
                    }
                };
                info!(topic = name, partition = p, "replica added here; catching up from the leader");
                Partition::hosted(topic.name.clone(), p, listed, replica, group, self.driver().clone())
            }
            (Some((_, group)), false) => {
                self.driver().remove_group(group);
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
        broker.catalog.insert_topic(Topic { name: topic.name.clone(), id, partitions, configs: topic.configs.clone() });
    }

    /// A topic's new config overrides, committed by the controller (forwarded when this
    /// broker is not it); returns once they are applied here.
    pub(crate) async fn alter_topic_configs(
        &self,
        name: &str,
        change: crate::handlers::alter_configs::TopicChange,
    ) -> Result<(), (ResponseError, String)> {
        let change_id = Uuid::new_v4();
        self.run(Call::AlterTopicConfigs { name: name.to_string(), change, change_id }).await?;
        self.until_applied(|s| s.config_changes.contains(&change_id), "the new configs were not applied here in time")
            .await
    }

    /// DeleteRecords below `offset` (checked by the partition's leader), committed through
    /// the controller; returns once applied here, where the leader's log start has moved.
    pub async fn delete_records(&self, name: &str, partition: i32, offset: i64) -> Result<(), (ResponseError, String)> {
        let key = (name.to_string(), partition);
        self.run(Call::DeleteRecords { name: name.to_string(), partition, offset }).await?;
        self.until_applied(
            |s| s.log_starts.get(&key).is_some_and(|s| *s >= offset),
            "the deletion was not applied here in time",
        )
        .await
    }

    /// CreatePartitions, decided by the controller (forwarded when this broker is not it);
    /// returns once the new partitions are applied here.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignment: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), (ResponseError, String)> {
        let name = name.to_string();
        self.run(Call::CreatePartitions { name: name.clone(), count, assignment, validate_only }).await?;
        if validate_only {
            return Ok(());
        }
        self.until_applied(
            |s| s.topics.get(&name).is_none_or(|t| t.partitions >= count as usize),
            "the new partitions were not applied here in time",
        )
        .await
    }

    /// The controller's checks of a new topic; returns the registered brokers.
    fn check_new_topic(&self, name: &str, rf: i16) -> Result<Vec<BrokerInfo>, (ResponseError, String)> {
        let state = self.read();
        if state.topics.contains_key(name) {
            return Err((ResponseError::TopicAlreadyExists, format!("Topic '{name}' already exists.")));
        }
        let brokers = state.live();
        if rf < 1 || rf as usize > brokers.len() {
            return Err((
                ResponseError::InvalidReplicationFactor,
                format!("Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered and not fenced.", brokers.len()),
            ));
        }
        Ok(brokers)
    }

    /// Sends a call to the controller and waits (bounded) for its answer.
    async fn forward(&self, call: Call) -> Result<(), (ResponseError, String)> {
        let Some(controller) = self.controller() else {
            return Err((ResponseError::NotController, "no controller is elected yet".into()));
        };
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let data = serde_json::to_vec(&Forward::Call { req, call })
            .map_err(|e| (ResponseError::UnknownServerError, e.to_string()))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.forwarded.lock().unwrap_or_else(|p| p.into_inner()).insert(req, tx);
        self.driver().forward(controller as u64 + 1, data);
        let answer = tokio::time::timeout(APPLY_TIMEOUT, rx).await;
        self.forwarded.lock().unwrap_or_else(|p| p.into_inner()).remove(&req);
        match answer {
            Ok(Ok(outcome)) => outcome,
            _ => Err((ResponseError::RequestTimedOut, "the controller did not answer in time".into())),
        }
    }

    /// A newly elected controller first applies what earlier controllers committed, so that
    /// it never decides from a stale copy (e.g. with registrations missing).
    async fn until_caught_up(&self) -> Result<(), (ResponseError, String)> {
        self.until(
            || {
                let applied = self.meta_applied.load(Ordering::Acquire);
                let meta = lock(&self.meta);
                match (meta.leader_caught_up(applied), meta.is_leader()) {
                    (true, _) => Some(Ok(())),
                    (false, false) => {
                        Some(Err((ResponseError::NotController, "this broker is no longer the controller".into())))
                    }
                    (false, true) => None,
                }
            },
            "the new controller did not catch up in time",
        )
        .await
    }

    /// Waits until this start's registration is applied here, so every metadata change
    /// before it is too.
    pub async fn until_registered(&self) {
        let registered = |s: &State| s.brokers.get(&self.node_id) == Some(&self.me);
        while let Err((_, msg)) = self.until_applied(registered, "not registered yet").await {
            warn!(%msg, "waiting to replay the metadata log up to this broker's registration (is a majority of the controller quorum up?)");
        }
    }

    /// Waits (bounded) until this broker's metadata satisfies `applied`.
    async fn until_applied(&self, applied: impl Fn(&State) -> bool, late: &str) -> Result<(), (ResponseError, String)> {
        self.until(|| applied(&self.read()).then_some(Ok(())), late).await
    }

    /// Re-checks `done` after every applied metadata entry (`apply` wakes it) until it
    /// gives an outcome, or fails with `late` after APPLY_TIMEOUT.
    async fn until(&self, done: impl Fn() -> Option<Outcome>, late: &str) -> Outcome {
        let deadline = tokio::time::Instant::now() + APPLY_TIMEOUT;
        loop {
            let changed = self.applied.notified();
            tokio::pin!(changed);
            // Registered before the check, so an apply between the two still wakes us.
            changed.as_mut().enable();
            if let Some(outcome) = done() {
                return outcome;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err((ResponseError::RequestTimedOut, late.to_string()));
            }
        }
    }

    /// Auto-creation (Metadata or Produce naming an unknown topic).
    pub async fn auto_create(&self, name: &str, partitions: i32, rf: i16) {
        if let Err((code, msg)) = self.create_topic(name, partitions, rf, None, BTreeMap::new(), false).await {
            if code != ResponseError::TopicAlreadyExists {
                warn!(topic = name, ?code, %msg, "auto-creating a topic failed");
            }
        }
    }

    fn apply(&self, rec: Record) {
        match rec {
            Record::RegisterBroker(info) => {
                let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
                // A broker registers at every start: it is alive.
                state.fenced.remove(&info.id);
                if state.brokers.get(&info.id) != Some(&info) {
                    info!(broker = info.id, host = %info.host, port = info.port, "broker registered");
                    state.brokers.insert(info.id, info);
                }
            }
            Record::AddPartitions { name, id, first, replicas } => {
                let found =
                    self.read().topics.get(&name).filter(|t| t.id == id && t.partitions == first).map(|t| t.seq);
                let Some(seq) = found else { return };
                if let Err(e) = self.open_new_partitions(&name, id, seq, &replicas) {
                    tracing::error!(topic = %name, error = %e, "cannot open replicas of new partitions; stopping");
                    std::process::exit(70);
                }
                if let Some(t) = self.state.write().unwrap_or_else(|p| p.into_inner()).topics.get_mut(&name) {
                    t.partitions += replicas.len();
                    t.initial.extend(replicas);
                }
            }
            Record::Reassign { name, id, partition, target } => {
                let Some(initial) = self.initial_voters(&name, id, partition) else { return };
                let Some(broker) = self.broker.upgrade() else { return };
                let Some(current) =
                    broker.catalog.topic(&name).and_then(|t| t.partitions.get(partition as usize).cloned())
                else {
                    return;
                };
                let key = (name.clone(), partition);
                let moving = {
                    let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
                    let original =
                        state.moving.get(&key).map_or_else(|| current.replicas.clone(), |m| m.original.clone());
                    let m = Moving { original, target };
                    state.moving.insert(key, m.clone());
                    m
                };
                let host = moving.target.contains(&self.node_id) || moving.original.contains(&self.node_id);
                info!(topic = %name, partition, target = ?moving.target, "partition reassignment started");
                self.reshape(&broker, &name, id, partition, moving.listed(), host, &initial);
            }
            Record::Reassigned { name, id, partition, replicas } => {
                let Some(initial) = self.initial_voters(&name, id, partition) else { return };
                let Some(broker) = self.broker.upgrade() else { return };
                self.state.write().unwrap_or_else(|p| p.into_inner()).moving.remove(&(name.clone(), partition));
                info!(topic = %name, partition, ?replicas, "partition reassignment finished");
                let host = replicas.contains(&self.node_id);
                self.reshape(&broker, &name, id, partition, replicas, host, &initial);
            }
            Record::TopicConfigs { name, id, configs, change_id } => {
                let Some(broker) = self.broker.upgrade() else { return };
                if broker.catalog.topic(&name).is_some_and(|t| t.id == id) {
                    if let Err(e) = broker.catalog.apply_topic_configs(&name, configs) {
                        warn!(topic = %name, error = %e, "applying topic configs");
                    }
                    info!(topic = %name, "topic configs applied from the metadata log");
                }
                let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
                if state.config_changes.len() == CONFIG_CHANGES_KEPT {
                    state.config_changes.pop_front();
                }
                state.config_changes.push_back(change_id);
            }
            Record::DeleteRecords { name, id, partition, offset } => {
                let Some(broker) = self.broker.upgrade() else { return };
                let Some(topic) = broker.catalog.topic(&name).filter(|t| t.id == id) else { return };
                if let Some(p) = topic.partitions.get(partition as usize).cloned() {
                    // Trimming deletes segments: off the driver task, which applies this.
                    tokio::task::spawn_blocking(move || p.raise_log_start(offset));
                }
                let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
                let start = state.log_starts.entry((name, partition)).or_default();
                *start = (*start).max(offset);
            }
            Record::FenceBroker { id, fenced } => {
                let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
                let changed = if fenced { state.fenced.insert(id) } else { state.fenced.remove(&id) };
                if changed && fenced {
                    warn!(
                        broker = id,
                        "broker fenced: the controller has not heard from it within broker.session.timeout.ms"
                    );
                } else if changed {
                    info!(broker = id, "broker unfenced: heard from again");
                }
            }
            Record::CreateTopic { name, id, seq, replicas, configs } => {
                if self.read().topics.contains_key(&name) {
                    return;
                }
                if let Err(e) = self.open_topic(&name, id, seq, &replicas, configs) {
                    // The metadata log is the truth; a broker that cannot open its replica
                    // must not go on pretending it has it.
                    tracing::error!(topic = %name, error = %e, "cannot open replicas; stopping");
                    std::process::exit(70);
                }
                let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
                let rf = replicas.first().map_or(0, |r| r.len());
                state.topics.insert(name, TopicMeta { id, seq, partitions: replicas.len(), rf, initial: replicas });
                state.next_seq = state.next_seq.max(seq + 1);
            }
            Record::DeleteTopic { name, id } => {
                let Some((seq, partitions)) =
                    self.read().topics.get(&name).filter(|t| t.id == id).map(|t| (t.seq, t.partitions))
                else {
                    return;
                };
                self.close_topic(&name, seq, partitions);
                let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
                state.topics.remove(&name);
                state.moving.retain(|(topic, _), _| *topic != name);
                state.log_starts.retain(|(topic, _), _| *topic != name);
            }
        }
    }

    /// Stops this broker's replicas of a deleted topic and removes their data.
    fn close_topic(&self, name: &str, seq: u64, partitions: usize) {
        let mut hints = self.hints.write().unwrap_or_else(|p| p.into_inner());
        for p in 0..partitions {
            self.driver().remove_group(group_id(seq, p as i32));
            hints.remove(&group_id(seq, p as i32));
        }
        drop(hints);
        let Some(broker) = self.broker.upgrade() else { return };
        if let Some(topic) = broker.catalog.topic(name) {
            for p in &topic.partitions {
                if let Err(e) = p.close() {
                    warn!(topic = name, partition = p.index, error = %e, "closing a deleted partition");
                }
            }
        }
        if let Err(e) = broker.catalog.delete_topic(name) {
            warn!(topic = name, error = %e, "removing a deleted topic");
        }
    }

    fn open_topic(
        &self,
        name: &str,
        id: Uuid,
        seq: u64,
        replicas: &[Vec<i32>],
        configs: BTreeMap<String, String>,
    ) -> Result<()> {
        let Some(broker) = self.broker.upgrade() else { return Ok(()) };
        let topic: Arc<str> = Arc::from(name);
        let parts = self.open_partitions(&broker, &topic, id, seq, 0, replicas, &configs)?;
        broker.catalog.insert_topic(Topic { name: topic, id, partitions: parts, configs });
        info!(topic = name, partitions = replicas.len(), "topic applied from the metadata log");
        Ok(())
    }

    /// Adds partitions after a topic's current ones (CreatePartitions).
    fn open_new_partitions(&self, name: &str, id: Uuid, seq: u64, replicas: &[Vec<i32>]) -> Result<()> {
        let Some(broker) = self.broker.upgrade() else { return Ok(()) };
        let Some(current) = broker.catalog.topic(name).filter(|t| t.id == id) else { return Ok(()) };
        let first = current.partitions.len() as i32;
        let added = self.open_partitions(&broker, &current.name, id, seq, first, replicas, &current.configs)?;
        let mut partitions = current.partitions.clone();
        partitions.extend(added);
        let count = partitions.len();
        broker.catalog.insert_topic(Topic {
            name: current.name.clone(),
            id,
            partitions,
            configs: current.configs.clone(),
        });
        info!(topic = name, partitions = count, "new partitions applied from the metadata log");
        Ok(())
    }

    /// This broker's view of partitions `first..` of a topic: a replica (its Raft group
    /// added to the driver) where it holds one, else a remote partition.
    #[allow(clippy::too_many_arguments)]
    fn open_partitions(
        &self,
        broker: &Broker,
        topic: &Arc<str>,
        id: Uuid,
        seq: u64,
        first: i32,
        replicas: &[Vec<i32>],
        configs: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Partition>>> {
        let log_config = topic_config::log_config(configs, &broker.catalog.settings());
        let mut parts = Vec::with_capacity(replicas.len());
        for (i, reps) in replicas.iter().enumerate() {
            let p = first + i as i32;
            if !reps.contains(&self.node_id) {
                parts.push(Arc::new(Partition::remote(topic.clone(), p, reps.clone())));
                continue;
            }
            let dir = partition_dir(&self.data_dir, topic, p);
            if !claim_dir(&dir, id).with_context(|| format!("claiming {}", dir.display()))? {
                // Replaying the log after a restart: the directory holds a later topic of
                // the same name, and this one is deleted further on. Leave it alone.
                parts.push(Arc::new(Partition::remote(topic.clone(), p, reps.clone())));
                continue;
            }
            let group = group_id(seq, p);
            // The preferred leader stands at once instead of after an election timeout.
            let replica = self.open_replica(&dir, log_config, reps, group, reps.first() == Some(&self.node_id))?;
            parts.push(Arc::new(Partition::hosted(
                topic.clone(),
                p,
                reps.clone(),
                replica,
                group,
                self.driver().clone(),
            )));
        }
        Ok(parts)
    }

    /// Opens this broker's replica of a partition in `dir` (a new one starts with `voters`
    /// as its group's configuration) and hands its Raft group to the driver.
    fn open_replica(
        &self,
        dir: &std::path::Path,
        log_config: runnel_storage::LogConfig,
        voters: &[i32],
        group: u64,
        campaign: bool,
    ) -> Result<SharedReplica> {
        let cfg = ReplicaConfig::new(self.node_id as u64 + 1, voters.iter().map(|b| *b as u64 + 1).collect());
        let mut replica = Replica::open(dir, log_config, &cfg, crate::now_ms())
            .with_context(|| format!("opening {}", dir.display()))?;
        if campaign {
            let _ = replica.campaign();
        }
        let replica = Arc::new(Mutex::new(replica));
        self.driver().add_group(group, replica.clone());
        Ok(replica)
    }

    /// Controller: proposes a broker's registration unless it is already applied.
    fn register(&self, info: BrokerInfo) {
        if self.read().brokers.get(&info.id) == Some(&info) {
            return;
        }
        if let Ok(data) = serde_json::to_vec(&Record::RegisterBroker(info)) {
            let mut meta = lock(&self.meta);
            let _ = meta.propose_record(&data, crate::now_ms());
        }
        self.driver().kick(META_GROUP);
    }

    fn heard(&self, id: i32) {
        self.heard.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Instant::now());
    }

    /// Controller: fences registered brokers not heard from within `session`, and unfences
    /// fenced ones heard from since. `since` is when this broker became the controller: it
    /// gives every broker a full session before fencing it.
    fn check_sessions(&self, since: Instant, session: Duration) {
        let now = Instant::now();
        let heard = self.heard.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let changes: Vec<Record> = {
            let state = self.read();
            state
                .brokers
                .keys()
                .filter(|id| **id != self.node_id)
                .filter_map(|id| {
                    let last = heard.get(id).copied().unwrap_or(since).max(since);
                    let alive = now.duration_since(last) < session;
                    (alive == state.fenced.contains(id)).then_some(Record::FenceBroker { id: *id, fenced: !alive })
                })
                .collect()
        };
        if changes.is_empty() {
            return;
        }
        let mut meta = lock(&self.meta);
        for rec in changes {
            if let Ok(data) = serde_json::to_vec(&rec) {
                let _ = meta.propose_record(&data, crate::now_ms());
            }
        }
        drop(meta);
        self.driver().kick(META_GROUP);
    }

    /// Answers a forwarded request to the broker (Raft id) that sent it.
    fn reply(&self, to: u64, req: u64, outcome: Outcome) {
        let error = outcome.err().map(|(code, msg)| (code.code(), msg));
        if let Ok(data) = serde_json::to_vec(&Forward::Reply { req, error }) {
            self.driver().forward(to, data);
        }
    }
}

impl Hooks for Cluster {
    fn after_ready(&self, group: u64, replica: &mut Replica, moved: bool) {
        if group == META_GROUP {
            for e in replica.take_applied() {
                for item in Batches::new(&e.data) {
                    let Ok((h, range)) = item else { break };
                    let records = match runnel_storage::records_of(&h, &e.data[range]) {
                        Ok(r) => r,
                        Err(err) => {
                            warn!(error = %err, "unreadable metadata batch");
                            continue;
                        }
                    };
                    for r in records.iter() {
                        match r.value.map(serde_json::from_slice::<Record>) {
                            Some(Ok(rec)) => self.apply(rec),
                            other => warn!(?other, "unreadable metadata record"),
                        }
                    }
                }
            }
            self.meta_applied.store(replica.applied_index(), Ordering::Release);
            self.applied.notify_waiters();
        } else if moved {
            if let Some(b) = self.broker.upgrade() {
                b.data_arrived.notify_waiters();
            }
        }
    }

    fn on_forward(&self, from: u64, data: &[u8]) {
        match serde_json::from_slice::<Forward>(data) {
            Ok(Forward::Leaders { leads }) => {
                let mut hints = self.hints.write().unwrap_or_else(|p| p.into_inner());
                for (group, term) in leads {
                    let h = hints.entry(group).or_insert((broker_of(from), term));
                    if term >= h.1 {
                        *h = (broker_of(from), term);
                    }
                }
            }
            Ok(Forward::Reply { req, error }) => {
                if let Some(tx) = self.forwarded.lock().unwrap_or_else(|p| p.into_inner()).remove(&req) {
                    let outcome = match error {
                        None => Ok(()),
                        Some((code, msg)) => {
                            Err((ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError), msg))
                        }
                    };
                    let _ = tx.send(outcome);
                }
            }
            Ok(Forward::Call { req, call }) => {
                let Some(cluster) = self.broker.upgrade().map(|b| b.cluster().clone()) else { return };
                if !cluster.is_controller() {
                    let msg = "this broker is not the controller".to_string();
                    return self.reply(from, req, Err((ResponseError::NotController, msg)));
                }
                tokio::spawn(async move {
                    let outcome = cluster.decide(call).await;
                    cluster.reply(from, req, outcome);
                });
            }
            Ok(Forward::Register(info)) if self.is_controller() => {
                self.heard(info.id);
                self.register(info)
            }
            Ok(Forward::Register(_)) => {}
            Ok(Forward::Heartbeat { id }) => self.heard(id),
            Ok(Forward::Elect { groups }) => {
                for (group, preferred) in groups {
                    self.elect_here(group, preferred);
                }
            }
            Err(e) => warn!(error = %e, "unreadable forwarded request"),
        }
    }
}

/// Registers this broker in the metadata log (directly on the controller, else through
/// it), retrying until the registration is applied.
async fn register_loop(cluster: Arc<Cluster>) {
    loop {
        if cluster.read().brokers.get(&cluster.node_id) == Some(&cluster.me) {
            return;
        }
        if cluster.is_controller() {
            cluster.register(cluster.me.clone());
        } else if let Some(c) = cluster.controller() {
            if let Ok(data) = serde_json::to_vec(&Forward::Register(cluster.me.clone())) {
                cluster.driver().forward(c as u64 + 1, data);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Tells the controller every `broker.heartbeat.interval.ms` that this broker is alive.
async fn heartbeat_loop(cluster: Arc<Cluster>) {
    loop {
        let Some(broker) = cluster.broker.upgrade() else { return };
        let interval = broker.catalog.settings().i64("broker.heartbeat.interval.ms").max(10) as u64;
        drop(broker);
        if let Some(c) = cluster.controller().filter(|c| *c != cluster.node_id) {
            if let Ok(data) = serde_json::to_vec(&Forward::Heartbeat { id: cluster.node_id }) {
                cluster.driver().forward(c as u64 + 1, data);
            }
        }
        tokio::time::sleep(Duration::from_millis(interval)).await;
    }
}

/// On the controller: fences brokers that stopped heartbeating and unfences those that
/// came back (`Cluster::check_sessions`).
async fn fence_loop(cluster: Arc<Cluster>) {
    let mut since: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Some(broker) = cluster.broker.upgrade() else { return };
        let session = Duration::from_millis(broker.catalog.settings().i64("broker.session.timeout.ms").max(1) as u64);
        drop(broker);
        if !cluster.is_controller() {
            since = None;
            continue;
        }
        let since = *since.get_or_insert_with(Instant::now);
        cluster.check_sessions(since, session);
    }
}

/// Every half second, tells each broker which partitions it does not host this broker
/// leads, so that its Metadata answers name their leaders (with RF below the number of
/// brokers). Terms order announcements from successive leaders.
async fn announce_leaders(cluster: Arc<Cluster>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(broker) = cluster.broker.upgrade() else { return };
        let peers: Vec<i32> = cluster.brokers().into_iter().map(|b| b.id).filter(|id| *id != cluster.node_id).collect();
        let mut out: HashMap<i32, Vec<(u64, u64)>> = HashMap::new();
        for t in broker.catalog.topics_snapshot() {
            for p in &t.partitions {
                let Some((replica, group)) = p.replica() else { continue };
                let term = {
                    let r = lock(replica);
                    if !r.is_leader() {
                        continue;
                    }
                    r.term()
                };
                for peer in peers.iter().filter(|id| !p.replicas.contains(id)) {
                    out.entry(*peer).or_default().push((group, term));
                }
            }
        }
        drop(broker);
        for (peer, leads) in out {
            if let Ok(data) = serde_json::to_vec(&Forward::Leaders { leads }) {
                cluster.driver().forward(peer as u64 + 1, data);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: i32, loc: &str) -> BrokerInfo {
        BrokerInfo { id, host: "h".into(), port: 1, location: parse_location(loc).expect("location"), incarnation: 0 }
    }

    #[test]
    fn placement_balances_uneven_regions_and_refuses_what_a_region_loss_would_break() {
        let uneven = vec![
            b(0, "region=a,zone=a1"),
            b(1, "region=a,zone=a2"),
            b(2, "region=a,zone=a3"),
            b(3, "region=a,zone=a4"),
            b(4, "region=b,zone=b1"),
            b(5, "region=c,zone=c1"),
        ];
        let assignment = place(&uneven, 12, 3);
        for reps in &assignment {
            let mut regions: Vec<&str> = reps.iter().map(|r| uneven[*r as usize].location[0].1.as_str()).collect();
            regions.sort();
            assert_eq!(regions, ["a", "b", "c"], "one replica per region: {reps:?}");
        }
        assert_eq!(placement_risk(&uneven, &assignment), None);

        let two_regions = vec![b(0, "region=a,zone=a1"), b(1, "region=a,zone=a2"), b(2, "region=b,zone=b1")];
        let risk = placement_risk(&two_regions, &place(&two_regions, 3, 3)).expect("two regions cannot hold RF 3");
        assert!(risk.contains("2 of its 3 replicas in region a"), "{risk}");
        assert_eq!(placement_risk(&two_regions, &place(&two_regions, 3, 2)), None, "RF 2 is taken as chosen");
        // RF 5 over three regions: 2+2+1, any region lost leaves a majority of 3.
        let five: Vec<BrokerInfo> = (0..6).map(|i| b(i, &format!("region=r{},zone=z{i}", i % 3))).collect();
        assert_eq!(placement_risk(&five, &place(&five, 6, 5)), None);
        // One region, three zones: the zones are the domains.
        let zones = vec![b(0, "region=a,zone=a1"), b(1, "region=a,zone=a2"), b(2, "region=a,zone=a3")];
        assert_eq!(placement_risk(&zones, &place(&zones, 3, 3)), None);
        // No locations at all: brokers are the domains.
        let bare = vec![b(0, ""), b(1, ""), b(2, "")];
        assert_eq!(placement_risk(&bare, &place(&bare, 3, 3)), None);
    }

    #[test]
    fn placement_spreads_over_the_outermost_domain_first() {
        let brokers = vec![
            b(0, "region=a,zone=a1"),
            b(1, "region=a,zone=a2"),
            b(2, "region=b,zone=b1"),
            b(3, "region=b,zone=b2"),
            b(4, "region=c,zone=c1"),
            b(5, "region=c,zone=c2"),
        ];
        let region = |id: i32| brokers[id as usize].location[0].1.clone();
        let assignment = place(&brokers, 12, 3);
        for reps in &assignment {
            let mut regions: Vec<String> = reps.iter().map(|r| region(*r)).collect();
            regions.sort();
            regions.dedup();
            assert_eq!(regions.len(), 3, "one replica per region: {reps:?}");
        }
        let mut leaders: Vec<i32> = assignment.iter().map(|r| r[0]).collect();
        leaders.sort();
        leaders.dedup();
        assert_eq!(leaders.len(), 6, "leaders rotate over every broker");
    }

    #[test]
    fn voters_and_locations_parse() {
        let v = parse_voters("0@127.0.0.1:19093, 1@127.0.0.1:19094").expect("voters");
        assert_eq!(v, vec![(0, "127.0.0.1:19093".to_string()), (1, "127.0.0.1:19094".to_string())]);
        assert!(parse_voters("x@y").is_err());
        assert_eq!(b(1, "region=r,zone=z,rack=k").rack().as_deref(), Some("z"));
        assert_eq!(b(1, "rack=k").rack().as_deref(), Some("k"));
        assert_eq!(b(1, "").rack(), None);
    }
}
