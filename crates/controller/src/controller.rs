//! The controller as every broker runs it: the metadata replica, the image rebuilt from
//! it, and the request frontend. Only the metadata leader (the controller) proposes; other
//! brokers forward their calls to it (KIP-590) and wait until the outcome is applied to
//! their own image, so a broker whose copy lags never decides on its own.

use runnel_security::acl::AclBinding;
use runnel_security::quota;
use runnel_security::{ScramCredential, ScramMechanism};
use runnel_sync::{LockExt, RwLockExt};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kafka_protocol::error::ResponseError;
use runnel_raft::driver::lock;
use runnel_raft::{Driver, Durability, ProposeError, Replica, ReplicaConfig, SharedReplica};
use runnel_wire::Batches;
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::{error, info, warn};
use uuid::Uuid;

use crate::host::Host;
use crate::image::Image;
use crate::records::{
    broker_of, raft_group, raft_id, BrokerInfo, Call, Drain, Message, Moving, RaftGroupId, Record, TopicConfigChange,
    META_GROUP,
};

const META_DIR: &str = "__cluster_metadata-0";
/// How long a metadata change may take to commit and apply before the request fails.
const APPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call waits for a controller to be elected before it fails.
const CONTROLLER_WAIT: Duration = Duration::from_secs(5);
/// First byte of what the controller sends over the Raft transport: the broker's hooks
/// hand such messages to [`Controller::inbox`].
pub const CONTROLLER_CHANNEL: u8 = b'C';
/// Messages for the controller queued before new ones are dropped (senders retry).
pub const INBOX_MAX: usize = 4096;

/// A change's outcome: Kafka's error code and message when it failed.
pub type Outcome = Result<(), (ResponseError, String)>;

pub struct ControllerConfig {
    pub node_id: i32,
    /// `controller.quorum.voters`; empty for a cluster of one.
    pub voters: Vec<(i32, String)>,
    /// This broker as it registers.
    pub me: BrokerInfo,
    pub data_dir: PathBuf,
    /// The cluster id of a cluster of one (kept in the broker's own state).
    pub single_cluster_id: String,
    pub now_ms: fn() -> i64,
}

pub struct Controller {
    pub node_id: i32,
    /// A cluster of one: no `controller.quorum.voters`, this broker is the only voter.
    pub single: bool,
    /// The metadata group's voters (`controller.quorum.voters`; this broker alone in a
    /// cluster of one). Every other broker is an observer.
    pub voters: Vec<i32>,
    pub me: BrokerInfo,
    pub cluster_id: String,
    pub(crate) meta: SharedReplica,
    pub(crate) driver: Arc<Driver>,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) image: RwLock<Image>,
    pub(crate) now_ms: fn() -> i64,
    /// Topic names this controller is creating (checked, proposed, not yet applied).
    pub(crate) creating: Mutex<HashSet<String>>,
    /// Serializes the controller's topic config changes (computed, proposed and applied).
    pub(crate) configuring: tokio::sync::Mutex<()>,
    /// Last topic sequence number handed out by this controller (proposed, maybe not yet
    /// applied), so two creations in flight never share Raft group ids.
    pub(crate) last_seq: AtomicU64,
    /// Woken after every applied batch of metadata records.
    applied: Notify,
    /// Index of the last metadata entry applied to the image and the host.
    meta_applied: AtomicU64,
    /// Calls forwarded to the controller, waiting for its reply.
    forwarded: Mutex<HashMap<u64, oneshot::Sender<Outcome>>>,
    /// DescribeQuorum asked of the controller, waiting for its answer.
    pub(crate) quorum_asked: Mutex<HashMap<u64, oneshot::Sender<Option<crate::records::QuorumState>>>>,
    /// Request ids, from a random start: a reply meant for this broker's previous run
    /// matches nothing of this one.
    pub(crate) next_req: AtomicU64,
    /// Controller only: when each broker was last heard from (heartbeat or registration).
    pub(crate) heard: Mutex<HashMap<i32, Instant>>,
}

/// The cluster id every broker of the same voters computes.
fn cluster_id_of(voters: &[(i32, String)]) -> String {
    let digest = voters.iter().fold(0xcbf29ce484222325u64, |h, (id, a)| {
        format!("{id}@{a}").bytes().fold(h, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
    });
    Uuid::from_u64_pair(digest, digest.rotate_left(17)).simple().to_string()[..22].to_string()
}

impl Controller {
    /// Opens the metadata replica, hands its Raft group to `driver` and starts applying it
    /// and this broker's registration. `meta_ready` is woken (by the broker's Raft hooks)
    /// after each ready of the metadata group; `inbox` carries what peers sent on
    /// [`CONTROLLER_CHANNEL`] (the channel byte removed), with the sender's Raft id.
    pub fn start(
        cfg: ControllerConfig,
        driver: Arc<Driver>,
        host: Arc<dyn Host>,
        inbox: mpsc::Receiver<(u64, Vec<u8>)>,
        meta_ready: Arc<Notify>,
    ) -> Result<Arc<Controller>> {
        let single = cfg.voters.is_empty();
        let voters: Vec<u64> =
            if single { vec![raft_id(cfg.node_id)] } else { cfg.voters.iter().map(|(id, _)| raft_id(*id)).collect() };
        let mut rc = ReplicaConfig::new(raft_id(cfg.node_id), voters);
        rc.deliver_committed = true;
        rc.quiesce = false;
        let dir = cfg.data_dir.join(META_DIR);
        let mut meta = Replica::open(&dir, Default::default(), &rc, (cfg.now_ms)())
            .with_context(|| format!("opening {}", dir.display()))?;
        if single {
            // The only voter stands at once instead of after an election timeout.
            let _ = meta.campaign();
        }
        let meta = Arc::new(Mutex::new(meta));
        let cluster_id = if single { cfg.single_cluster_id.clone() } else { cluster_id_of(&cfg.voters) };
        let c = Arc::new(Controller {
            node_id: cfg.node_id,
            single,
            voters: if single { vec![cfg.node_id] } else { cfg.voters.iter().map(|(id, _)| *id).collect() },
            me: cfg.me,
            cluster_id,
            meta: meta.clone(),
            driver: driver.clone(),
            host,
            image: RwLock::new(Image::default()),
            now_ms: cfg.now_ms,
            creating: Mutex::new(HashSet::new()),
            configuring: tokio::sync::Mutex::new(()),
            last_seq: AtomicU64::new(0),
            applied: Notify::new(),
            meta_applied: AtomicU64::new(0),
            forwarded: Mutex::new(HashMap::new()),
            quorum_asked: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(crate::records::first_request_id()),
            heard: Mutex::new(HashMap::new()),
        });
        tokio::spawn(apply_loop(c.clone(), meta_ready));
        tokio::spawn(inbox_loop(c.clone(), inbox));
        driver.add_group(META_GROUP, meta);
        c.start_sessions();
        Ok(c)
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Image> {
        self.image.read_or_stop()
    }

    /// The Raft group of a partition.
    pub fn group_of(&self, topic: &str, partition: i32) -> Option<RaftGroupId> {
        self.read().topics.get(topic).map(|t| raft_group(t.seq, partition))
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

    /// The controller (metadata leader) as a broker id.
    pub fn controller(&self) -> Option<i32> {
        lock(&self.meta).leader().map(broker_of)
    }

    pub fn is_controller(&self) -> bool {
        lock(&self.meta).is_leader()
    }

    /// Partitions moving to new replicas.
    pub fn reassignments(&self) -> BTreeMap<(String, i32), Moving> {
        self.read().moving.clone()
    }

    /// Sends `msg` to broker `to` on the controller's channel.
    pub(crate) fn send(&self, to: i32, msg: &Message) {
        crate::records::send_on_channel(&self.driver, to, CONTROLLER_CHANNEL, msg);
    }

    /// Proposes records on the metadata log without waiting (controller only; a record
    /// lost to a leader change is proposed again by the loop that wanted it).
    pub(crate) fn propose_now(&self, records: &[Record]) {
        let mut meta = lock(&self.meta);
        for rec in records {
            if let Ok(data) = serde_json::to_vec(rec) {
                let _ = meta.propose_record(&data, (self.now_ms)());
            }
        }
        drop(meta);
        self.driver.kick(META_GROUP);
    }

    /// Proposes a record (controller only) and waits until this broker has applied it.
    pub(crate) async fn propose(&self, rec: &Record, applied: impl Fn(&Image) -> bool) -> Outcome {
        let data = serde_json::to_vec(rec).map_err(|e| (ResponseError::UnknownServerError, e.to_string()))?;
        let rx = {
            let mut meta = lock(&self.meta);
            let p = meta.propose_record(&data, (self.now_ms)()).map_err(|e| match e {
                ProposeError::NotLeader(_) => {
                    (ResponseError::NotController, "this broker is not the controller".into())
                }
                e => (ResponseError::UnknownServerError, format!("{e:?}")),
            })?;
            meta.wait(p.index, p.term, Durability::Committed)
        };
        self.driver.kick(META_GROUP);
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

    /// Decides a call here when this broker is the controller, else forwards it. While no
    /// controller is known (an election under way), waits up to `CONTROLLER_WAIT` for one,
    /// as Kafka's brokers hold forwarded requests, rather than fail at once.
    pub(crate) async fn run(&self, call: Call) -> Outcome {
        let deadline = tokio::time::Instant::now() + CONTROLLER_WAIT;
        loop {
            if self.is_controller() {
                return self.decide(call).await;
            }
            if let Some(controller) = self.controller() {
                return self.forward(controller, call).await;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err((ResponseError::NotController, "no controller is elected yet".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends a call to the controller and waits (bounded) for its answer. If another broker
    /// becomes the controller meanwhile (the one asked was cut off, say), the call goes to
    /// it too (or is decided here, when this broker is the one), as Kafka's brokers resend
    /// forwarded requests, and the first answer counts.
    async fn forward(&self, controller: i32, call: Call) -> Outcome {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = oneshot::channel();
        self.forwarded.lock_or_stop().insert(req, tx);
        self.send(controller, &Message::Call { req, call: call.clone() });
        let deadline = tokio::time::sleep(APPLY_TIMEOUT);
        tokio::pin!(deadline);
        let mut asked = controller;
        let mut check = tokio::time::interval(Duration::from_millis(100));
        let answer = loop {
            tokio::select! {
                answer = &mut rx => break answer.ok(),
                _ = &mut deadline => break None,
                _ = check.tick() => match self.controller() {
                    Some(now) if now == self.node_id => {
                        self.forwarded.lock_or_stop().remove(&req);
                        return self.decide(call).await;
                    }
                    Some(now) if now != asked => {
                        asked = now;
                        self.send(now, &Message::Call { req, call: call.clone() });
                    }
                    _ => {}
                },
            }
        };
        self.forwarded.lock_or_stop().remove(&req);
        answer.unwrap_or_else(|| Err((ResponseError::RequestTimedOut, "the controller did not answer in time".into())))
    }

    /// A newly elected controller first applies what earlier controllers committed, so that
    /// it never decides from a stale copy (e.g. with registrations missing).
    pub(crate) async fn until_caught_up(&self) -> Outcome {
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
        let registered = |s: &Image| s.brokers.get(&self.node_id) == Some(&self.me);
        while let Err((_, msg)) = self.until_applied(registered, "not registered yet").await {
            warn!(%msg, "waiting to replay the metadata log up to this broker's registration (is a majority of the controller quorum up?)");
        }
    }

    /// Waits (bounded) until this broker's image satisfies `applied`.
    pub(crate) async fn until_applied(&self, applied: impl Fn(&Image) -> bool, late: &str) -> Outcome {
        self.until(|| applied(&self.read()).then_some(Ok(())), late).await
    }

    /// Re-checks `done` after every applied metadata batch until it gives an outcome, or
    /// fails with `late` after APPLY_TIMEOUT.
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

    /// Auto-creation (Metadata or Produce naming an unknown topic).
    pub async fn auto_create(&self, name: &str, partitions: i32, rf: i16) {
        if let Err((code, msg)) = self.create_topic(name, partitions, rf, None, BTreeMap::new(), false).await {
            if code != ResponseError::TopicAlreadyExists {
                warn!(topic = name, ?code, %msg, "auto-creating a topic failed");
            }
        }
    }

    /// Deletes a topic through the controller; returns once it is gone here too.
    pub async fn delete_topic(&self, name: &str) -> Outcome {
        let id = self.read().topics.get(name).map(|t| t.id);
        self.run(Call::DeleteTopic { name: name.to_string() }).await?;
        // Gone, or replaced by a newer topic of the same name.
        self.until_applied(|s| s.topics.get(name).map(|t| t.id) != id, "the deletion was not applied here in time")
            .await
    }

    /// AlterPartitionReassignments for one partition: returns once the move (or its
    /// cancellation) is applied here; the partition's leader then carries it out.
    pub async fn reassign(
        &self,
        name: &str,
        partition: i32,
        target: Option<Vec<i32>>,
        allow_rf_change: bool,
    ) -> Outcome {
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

    /// The leader of a moving partition reports that its group's voters are the target.
    pub fn finish_reassignment(self: &Arc<Self>, name: String, partition: i32, replicas: Vec<i32>) {
        let c = self.clone();
        tokio::spawn(async move {
            if let Err((code, msg)) = c.run(Call::FinishReassign { name: name.clone(), partition, replicas }).await {
                warn!(topic = %name, partition, ?code, %msg, "reporting a finished reassignment");
            }
        });
    }

    /// A topic's new config overrides, committed by the controller (forwarded when this
    /// broker is not it); returns once they are applied here.
    pub async fn alter_topic_configs(&self, name: &str, change: TopicConfigChange) -> Outcome {
        let change_id = Uuid::new_v4();
        self.run(Call::AlterTopicConfigs { name: name.to_string(), change, change_id }).await?;
        self.until_applied(|s| s.config_changes.contains(&change_id), "the new configs were not applied here in time")
            .await
    }

    /// AlterUserScramCredentials (checked by the caller), committed by the controller;
    /// returns once applied here.
    pub async fn alter_scram(
        &self,
        upserts: Vec<(String, ScramMechanism, ScramCredential)>,
        deletes: Vec<(String, ScramMechanism)>,
    ) -> Outcome {
        let change_id = Uuid::new_v4();
        self.run(Call::AlterScram { upserts, deletes, change_id }).await?;
        self.until_applied(|s| s.config_changes.contains(&change_id), "the credentials were not applied here in time")
            .await
    }

    /// CreateAcls and DeleteAcls (checked by the caller), committed by the controller;
    /// returns once applied here.
    pub async fn alter_acls(&self, creates: Vec<AclBinding>, deletes: Vec<AclBinding>) -> Outcome {
        let change_id = Uuid::new_v4();
        self.run(Call::AlterAcls { creates, deletes, change_id }).await?;
        self.until_applied(|s| s.config_changes.contains(&change_id), "the ACLs were not applied here in time").await
    }

    /// AlterClientQuotas (checked by the caller), committed by the controller; returns once
    /// applied here.
    pub async fn alter_client_quotas(&self, changes: Vec<(quota::Entity, String, Option<f64>)>) -> Outcome {
        let change_id = Uuid::new_v4();
        self.run(Call::AlterClientQuotas { changes, change_id }).await?;
        self.until_applied(|s| s.config_changes.contains(&change_id), "the quotas were not applied here in time").await
    }

    /// Replaces the cluster-wide dynamic broker configs (checked by the caller), committed by
    /// the controller; returns once applied here.
    pub async fn alter_broker_defaults(&self, configs: BTreeMap<String, String>) -> Outcome {
        let change_id = Uuid::new_v4();
        self.run(Call::AlterBrokerDefaults { configs, change_id }).await?;
        self.until_applied(|s| s.config_changes.contains(&change_id), "the configs were not applied here in time").await
    }

    /// Replaces a group's dynamic configs (checked by the caller), committed by the
    /// controller; returns once applied here.
    pub async fn alter_group_configs(&self, group: String, configs: BTreeMap<String, String>) -> Outcome {
        let change_id = Uuid::new_v4();
        self.run(Call::AlterGroupConfigs { group, configs, change_id }).await?;
        self.until_applied(|s| s.config_changes.contains(&change_id), "the configs were not applied here in time").await
    }

    /// A group's dynamic configs, as this broker has applied the metadata log.
    pub fn group_configs(&self, group: &str) -> BTreeMap<String, String> {
        self.read().group_configs.get(group).cloned().unwrap_or_default()
    }

    /// The groups that have dynamic configs.
    pub fn groups_with_configs(&self) -> Vec<String> {
        self.read().group_configs.keys().cloned().collect()
    }

    /// The cluster-wide dynamic broker configs, as this broker has applied the metadata log.
    pub fn broker_defaults(&self) -> BTreeMap<String, String> {
        self.read().broker_defaults.clone()
    }

    /// Starts (`Some`) or ends (`None`) the drain of broker `id`'s leaderships, committed
    /// by the controller; returns once applied here.
    pub async fn set_drain(&self, id: i32, drain: Option<Drain>) -> Outcome {
        self.run(Call::Drain { id, drain }).await?;
        self.until_applied(move |s| s.draining.get(&id).copied() == drain, "the drain was not applied here in time")
            .await
    }

    /// Controller only: hands the metadata quorum's leadership to a voter among `to` that
    /// has every entry (a Raft leadership transfer), so that a
    /// controller about to stop is not waited out for an election timeout. Returns
    /// whether one started.
    pub fn hand_over(&self, to: &BTreeSet<i32>) -> bool {
        let started = {
            let mut meta = lock(&self.meta);
            let target = meta
                .voters()
                .into_iter()
                .filter(|v| *v != meta.id() && to.contains(&broker_of(*v)))
                .find(|v| meta.has_everything(*v, 0));
            if let Some(t) = target {
                meta.transfer_leader(t);
            }
            target.is_some()
        };
        if started {
            self.driver.kick(META_GROUP);
        }
        started
    }

    /// The brokers being drained, as this broker has applied the metadata log.
    pub fn draining(&self) -> BTreeMap<i32, Drain> {
        self.read().draining.clone()
    }

    /// Every client quota, as this broker has applied the metadata log.
    pub fn client_quotas(&self) -> Arc<quota::Table> {
        self.read().quotas.clone()
    }

    /// Every ACL, as this broker has applied the metadata log.
    pub fn acls(&self) -> Arc<Vec<AclBinding>> {
        self.read().acls.clone()
    }

    /// A user's SCRAM credential for one mechanism.
    pub fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.read().scram.get(&(user.to_string(), mechanism)).cloned()
    }

    /// Every user with SCRAM credentials: their mechanisms and iterations.
    pub fn scram_users(&self) -> BTreeMap<String, Vec<(ScramMechanism, i32)>> {
        let mut out: BTreeMap<String, Vec<(ScramMechanism, i32)>> = BTreeMap::new();
        for ((user, m), c) in &self.read().scram {
            out.entry(user.clone()).or_default().push((*m, c.iterations));
        }
        out
    }

    /// DeleteRecords below `offset` (checked by the partition's leader), committed through
    /// the controller; returns once applied here, where this replica's log start has moved.
    pub async fn delete_records(&self, name: &str, partition: i32, offset: i64) -> Outcome {
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
    ) -> Outcome {
        let name = name.to_string();
        self.run(Call::CreatePartitions { name: name.clone(), count, assignment, validate_only }).await?;
        if validate_only {
            return Ok(());
        }
        self.until_applied(
            |s| s.topics.get(&name).is_none_or(|t| t.partitions() >= count as usize),
            "the new partitions were not applied here in time",
        )
        .await
    }

    /// Applies committed metadata records, in log order: each record's effect on this
    /// broker first (through the host, off the async workers), then the image, so that a
    /// waiter that sees the image changed finds the broker changed too.
    fn apply_entries<E: AsRef<[u8]>>(&self, entries: Vec<E>) {
        for data in entries {
            let data = data.as_ref();
            for item in Batches::new(data) {
                let Ok((h, range)) = item else { break };
                let records = match runnel_storage::records_of(&h, &data[range]) {
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
    }

    fn apply(&self, rec: Record) {
        if let Record::RegisterBroker(info) = &rec {
            // Every broker can reach every other one, voter or not, from now on.
            self.driver.add_peer(raft_id(info.id), &info.raft);
        }
        // This task is the image's one writer, so the image cannot change between the two.
        let effect = self.read().effect_of(&rec, self.node_id);
        if let Some(effect) = effect {
            if let Err(e) = self.host.apply(effect) {
                error!(error = %format!("{e:#}"), "cannot carry out a committed metadata change; stopping");
                std::process::exit(70);
            }
        }
        self.image.write_or_stop().apply(rec);
    }

    fn on_message(self: &Arc<Self>, from: u64, msg: Message) {
        match msg {
            Message::Reply { req, error } => {
                if let Some(tx) = self.forwarded.lock_or_stop().remove(&req) {
                    let outcome = match error {
                        None => Ok(()),
                        Some((code, msg)) => {
                            Err((ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError), msg))
                        }
                    };
                    let _ = tx.send(outcome);
                }
            }
            Message::Call { req, call } => {
                let to = broker_of(from);
                if !self.is_controller() {
                    let error = Some((ResponseError::NotController.code(), "this broker is not the controller".into()));
                    return self.send(to, &Message::Reply { req, error });
                }
                let c = self.clone();
                tokio::spawn(async move {
                    let error = c.decide(call).await.err().map(|(code, msg)| (code.code(), msg));
                    c.send(to, &Message::Reply { req, error });
                });
            }
            Message::Register(info) if self.is_controller() => {
                self.heard(info.id);
                self.register(info)
            }
            Message::Register(_) => {}
            Message::Heartbeat { id } => self.heard(id),
            msg @ (Message::DescribeQuorum { .. } | Message::Quorum { .. }) => self.on_quorum_message(from, msg),
        }
    }
}

/// Applies the metadata group's committed entries as they come: woken after each of its
/// readies, takes them from the replica (briefly locked) and applies them on the blocking
/// pool, since effects open and delete files.
async fn apply_loop(c: Arc<Controller>, ready: Arc<Notify>) {
    loop {
        ready.notified().await;
        let (entries, index) = {
            let mut meta = lock(&c.meta);
            let entries: Vec<_> = meta.take_applied().into_iter().map(|e| e.data).collect();
            (entries, meta.applied_index())
        };
        if !entries.is_empty() {
            let applier = c.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || applier.apply_entries(entries)).await {
                error!(error = %e, "applying metadata records panicked; stopping");
                std::process::exit(70);
            }
        }
        c.meta_applied.store(index, Ordering::Release);
        c.applied.notify_waiters();
    }
}

/// Handles what peers send the controller, one message at a time.
async fn inbox_loop(c: Arc<Controller>, mut inbox: mpsc::Receiver<(u64, Vec<u8>)>) {
    while let Some((from, data)) = inbox.recv().await {
        match serde_json::from_slice::<Message>(&data) {
            Ok(msg) => c.on_message(from, msg),
            Err(e) => warn!(from, error = %e, "unreadable controller message"),
        }
    }
    info!("controller inbox closed");
}
