//! The transaction coordinator: every transactional id of the `__transaction_state`
//! partitions this broker leads, behind one lock. A change is written to the log (through
//! [`GroupLog`], so it is replicated like any partition) before it takes effect; while it
//! is in flight the id is marked pending and other requests for it get
//! CONCURRENT_TRANSACTIONS, so writes for one id never overtake each other. Ending a
//! transaction runs in a task of its own: markers to every partition (retried until each
//! is written), then the completed state. A coordinator that takes over a partition reads
//! it back and resumes the endings that were under way.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use kafka_protocol::error::ResponseError as E;
use runnel_coordinator::records::partition_for;
use runnel_coordinator::GroupLog;
use runnel_sync::LockExt;
use runnel_wire::TxnEnd;
use tracing::{info, warn};

use crate::records::{decode_key, decode_value, encode_key, encode_value};
use crate::state::{Ending, Init, State, Tp, TxnMeta};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Markers for one producer's transaction on some partitions.
#[derive(Debug, Clone)]
pub struct MarkerWrite {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub end: TxnEnd,
    pub partitions: Vec<Tp>,
}

/// What the coordinator needs from the broker around it.
pub trait TxnHost: Send + Sync + 'static {
    /// Writes the markers on the partitions' leaders and waits for them to commit.
    /// Resolves with the partitions not written (to retry), each with why. A partition
    /// that no longer exists counts as written.
    fn write_markers(&self, w: MarkerWrite) -> BoxFuture<Vec<(Tp, String)>>;
    /// A producer id no other producer of the cluster has.
    fn allocate_producer_id(&self) -> BoxFuture<Result<i64, String>>;
    /// The leader epoch of this broker's replica of a `__transaction_state` partition it
    /// leads (the coordinator epoch markers carry), or None.
    fn coordinator_epoch(&self, partition: i32) -> Option<i32>;
}

/// A host attached after the coordinator is built (the broker that implements
/// [`TxnHost`] holds the coordinator, so it comes second). Until then markers fail (and are
/// retried) and no producer id is given out.
#[derive(Default)]
pub struct LateHost(OnceLock<Arc<dyn TxnHost>>);

impl LateHost {
    /// Attaches the host; a second call changes nothing.
    pub fn attach(&self, host: Arc<dyn TxnHost>) {
        let _ = self.0.set(host);
    }
}

impl TxnHost for LateHost {
    fn write_markers(&self, w: MarkerWrite) -> BoxFuture<Vec<(Tp, String)>> {
        match self.0.get() {
            Some(h) => h.write_markers(w),
            None => {
                Box::pin(async move { w.partitions.into_iter().map(|tp| (tp, "not started".to_string())).collect() })
            }
        }
    }

    fn allocate_producer_id(&self) -> BoxFuture<Result<i64, String>> {
        match self.0.get() {
            Some(h) => h.allocate_producer_id(),
            None => Box::pin(async { Err("not started".to_string()) }),
        }
    }

    fn coordinator_epoch(&self, partition: i32) -> Option<i32> {
        self.0.get()?.coordinator_epoch(partition)
    }
}

#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer may ask.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an id idle this long (no transaction open) is
    /// forgotten.
    pub id_expiration_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig { max_timeout_ms: 900_000, id_expiration_ms: 7 * 24 * 3600 * 1000 }
    }
}

struct Entry {
    meta: TxnMeta,
    /// A new state is being written.
    pending: bool,
}

/// The partitions of the log this coordinator serves, with the coordinator epoch each
/// was loaded in.
#[derive(Default)]
struct Owned {
    loaded: HashMap<i32, i32>,
    loading: HashSet<i32>,
}

/// What InitProducerId does next.
enum Step {
    /// Get a producer id first.
    Allocate,
    /// Write this state (and, when fencing, abort the open transaction).
    Write(TxnMeta, bool),
}

/// One row of ListTransactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnListing {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: State,
    /// When the current transaction started, -1 when none is.
    pub start_ms: i64,
}

pub struct TxnCoordinator {
    /// Never held together with `owned`.
    txns: Mutex<HashMap<String, Entry>>,
    owned: Mutex<Owned>,
    log: Arc<dyn GroupLog>,
    host: Arc<dyn TxnHost>,
    config: TxnConfig,
}

fn now_ms() -> i64 {
    runnel_sync::clock::wall_ms()
}

/// Between two rounds of markers that did not all land.
const MARKER_RETRY_MIN: Duration = Duration::from_millis(50);
const MARKER_RETRY_MAX: Duration = Duration::from_secs(1);

impl TxnCoordinator {
    pub fn new(log: Arc<dyn GroupLog>, host: Arc<dyn TxnHost>, config: TxnConfig) -> TxnCoordinator {
        TxnCoordinator { txns: Mutex::new(HashMap::new()), owned: Mutex::new(Owned::default()), log, host, config }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.txns.lock_or_stop()
    }

    fn lock_owned(&self) -> MutexGuard<'_, Owned> {
        self.owned.lock_or_stop()
    }

    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.log.partitions())
    }

    /// Why this coordinator cannot serve the id now, if it cannot (NOT_COORDINATOR: the
    /// client looks the coordinator up again; COORDINATOR_LOAD_IN_PROGRESS: it retries).
    pub fn owner_error(&self, transactional_id: &str) -> Option<E> {
        let p = self.partition_for(transactional_id);
        let loading = {
            let owned = self.lock_owned();
            if owned.loaded.contains_key(&p) {
                return None;
            }
            owned.loading.contains(&p)
        };
        if loading || self.log.leads(p) {
            Some(E::CoordinatorLoadInProgress)
        } else {
            Some(E::NotCoordinator)
        }
    }

    fn serves(&self, partition: i32, coordinator_epoch: i32) -> bool {
        self.lock_owned().loaded.get(&partition) == Some(&coordinator_epoch)
    }

    /// Writes `next` as the id's state (the caller marked the entry pending); it takes
    /// effect once durable.
    async fn persist(&self, id: &str, next: &TxnMeta) -> Result<(), E> {
        let p = self.partition_for(id);
        let written = self.log.append(p, vec![(encode_key(id), Some(encode_value(next)))]).await;
        let mut txns = self.lock();
        let Some(entry) = txns.get_mut(id) else {
            // The partition was unloaded meanwhile.
            return Err(E::NotCoordinator);
        };
        entry.pending = false;
        match written {
            Ok(()) => {
                entry.meta = next.clone();
                Ok(())
            }
            Err(e) => {
                drop(txns);
                warn!(transactional_id = id, error = %e, "transaction state not durable");
                Err(self.owner_error(id).unwrap_or(E::CoordinatorNotAvailable))
            }
        }
    }

    /// InitProducerId with a transactional id: the producer id and the epoch, bumped so
    /// that any older instance is fenced. An open transaction is aborted first (answered
    /// CONCURRENT_TRANSACTIONS; the producer retries).
    pub async fn init_producer_id(
        self: &Arc<Self>,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), E> {
        if id.is_empty() {
            return Err(E::InvalidRequest);
        }
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(E::InvalidTransactionTimeout);
        }
        if let Some(e) = self.owner_error(id) {
            return Err(e);
        }
        let mut new_id: Option<i64> = None;
        loop {
            let now = now_ms();
            let step = {
                let mut txns = self.lock();
                if let (false, Some(pid)) = (txns.contains_key(id), new_id.take()) {
                    txns.insert(id.to_string(), Entry { meta: TxnMeta::new(pid, timeout_ms, now), pending: false });
                }
                match txns.get_mut(id) {
                    None => Step::Allocate,
                    Some(entry) if entry.pending => return Err(E::ConcurrentTransactions),
                    Some(entry) => {
                        let step = match entry.meta.init(timeout_ms, expected, now)? {
                            Init::Current => return Ok((entry.meta.producer_id, entry.meta.producer_epoch)),
                            Init::NewId => match new_id.take() {
                                Some(pid) => Step::Write(entry.meta.renewed(pid, timeout_ms, now), false),
                                None => Step::Allocate,
                            },
                            Init::Bump(next) => Step::Write(next, false),
                            Init::Fence(next) => Step::Write(next, true),
                        };
                        entry.pending = matches!(step, Step::Write(..));
                        step
                    }
                }
            };
            match step {
                // A producer id is needed first (a new id, or the epoch ran out).
                Step::Allocate => {
                    let pid = self.host.allocate_producer_id().await.map_err(|e| {
                        warn!(transactional_id = id, error = %e, "allocating a producer id");
                        E::CoordinatorNotAvailable
                    })?;
                    new_id = Some(pid);
                }
                Step::Write(next, fence) => {
                    self.persist(id, &next).await?;
                    if fence {
                        info!(
                            transactional_id = id,
                            producer_epoch = next.producer_epoch,
                            "fenced a producer; aborting its open transaction"
                        );
                        self.clone().spawn_completion(id.to_string());
                        return Err(E::ConcurrentTransactions);
                    }
                    return Ok((next.producer_id, next.producer_epoch));
                }
            }
        }
    }

    /// The change `decide` makes to a served, known id's state, with the id marked pending
    /// (None: nothing to write). One write per id at a time: CONCURRENT_TRANSACTIONS while
    /// another is in flight.
    fn begin_write(
        &self,
        id: &str,
        decide: impl FnOnce(&TxnMeta) -> Result<Option<TxnMeta>, E>,
    ) -> Result<Option<TxnMeta>, E> {
        if let Some(e) = self.owner_error(id) {
            return Err(e);
        }
        let mut txns = self.lock();
        let entry = txns.get_mut(id).ok_or(E::InvalidProducerIdMapping)?;
        if entry.pending {
            return Err(E::ConcurrentTransactions);
        }
        let next = decide(&entry.meta)?;
        entry.pending = next.is_some();
        Ok(next)
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn, or (`tv2`, transactions version 2) a
    /// partition leader or group coordinator adding what the producer wrote there: the
    /// partitions join the open transaction (which starts with the first of them).
    pub async fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        parts: &[Tp],
        tv2: bool,
    ) -> Result<(), E> {
        match self.begin_write(id, |m| m.add(producer_id, epoch, parts, tv2, now_ms()))? {
            Some(next) => self.persist(id, &next).await,
            None => Ok(()),
        }
    }

    /// EndTxn (`tv2`: v5+, which bumps the epoch): answered once the prepared state is
    /// durable, with the producer id and epoch the producer goes on with; the markers
    /// follow.
    pub async fn end_txn(
        self: &Arc<Self>,
        id: &str,
        producer_id: i64,
        epoch: i16,
        end: TxnEnd,
        tv2: bool,
    ) -> Result<(i64, i16), E> {
        let mut next_id = None;
        loop {
            let mut answer = None;
            let decided =
                self.begin_write(id, |m| match m.end(producer_id, epoch, end, tv2, next_id, now_ms())? {
                    Ending::Prepare(next) => Ok(Some(next)),
                    Ending::Retried => {
                        answer = Some(m.continues_as());
                        Ok(None)
                    }
                    Ending::NeedProducerId => Ok(None),
                })?;
            if let Some(next) = decided {
                self.persist(id, &next).await?;
                self.clone().spawn_completion(id.to_string());
                return Ok(next.continues_as());
            }
            if let Some(answer) = answer {
                return Ok(answer);
            }
            // The epoch ran out (version 2): the producer continues with a new id.
            next_id = Some(self.host.allocate_producer_id().await.map_err(|e| {
                warn!(transactional_id = id, error = %e, "allocating a producer id");
                E::CoordinatorNotAvailable
            })?);
        }
    }

    /// Is `tp` in the open transaction of this producer? (A partition leader asks before
    /// it takes a transactional batch, KIP-890; a late write cannot open a transaction the
    /// coordinator does not know of.)
    pub fn verify(&self, id: &str, producer_id: i64, epoch: i16, tp: &Tp) -> Result<(), E> {
        if let Some(e) = self.owner_error(id) {
            return Err(e);
        }
        let txns = self.lock();
        let entry = txns.get(id).ok_or(E::InvalidProducerIdMapping)?;
        entry.meta.check_producer(producer_id, epoch)?;
        if entry.meta.state == State::Ongoing && entry.meta.partitions.contains(tp) {
            Ok(())
        } else {
            Err(E::InvalidTxnState)
        }
    }

    fn spawn_completion(self: Arc<Self>, id: String) {
        tokio::spawn(async move { self.complete(&id).await });
    }

    /// Writes the markers of a prepared transaction, then its completed state. Stops if
    /// this coordinator stops serving the partition (the next one resumes).
    async fn complete(&self, id: &str) {
        let p = self.partition_for(id);
        let Some(coordinator_epoch) = self.lock_owned().loaded.get(&p).copied() else { return };
        let Some(meta) = self.lock().get(id).map(|e| e.meta.clone()) else { return };
        let Some(end) = meta.state.ending() else { return };
        let mut remaining: Vec<Tp> = meta.partitions.iter().cloned().collect();
        let mut backoff = MARKER_RETRY_MIN;
        let started = std::time::Instant::now();
        let mut rounds = 0u32;
        while !remaining.is_empty() {
            rounds += 1;
            if !self.serves(p, coordinator_epoch) {
                return;
            }
            let write = MarkerWrite {
                producer_id: meta.producer_id,
                producer_epoch: meta.producer_epoch,
                coordinator_epoch,
                end,
                partitions: std::mem::take(&mut remaining),
            };
            let failed = self.host.write_markers(write).await;
            if let Some((tp, why)) = failed.first() {
                warn!(transactional_id = id, topic = %tp.0, partition = tp.1, %why, left = failed.len(), "transaction marker not written yet; retrying");
                remaining = failed.into_iter().map(|(tp, _)| tp).collect();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MARKER_RETRY_MAX);
            }
        }
        if rounds > 1 {
            let ms = started.elapsed().as_millis() as u64;
            info!(transactional_id = id, rounds, ms, partitions = meta.partitions.len(), "transaction markers written");
        }
        loop {
            if !self.serves(p, coordinator_epoch) {
                return;
            }
            let next = {
                let mut txns = self.lock();
                let Some(entry) = txns.get_mut(id) else { return };
                if entry.pending {
                    None
                } else {
                    let next = entry.meta.completed(now_ms());
                    entry.pending = next.is_some();
                    match next {
                        Some(next) => Some(next),
                        None => return,
                    }
                }
            };
            if let Some(next) = next {
                if self.persist(id, &next).await.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(MARKER_RETRY_MAX).await;
        }
    }

    /// Aborts every open transaction past its timeout (fencing its producer) and, with
    /// `forget`, forgets ids idle past `transactional.id.expiration.ms`. Run periodically;
    /// returns how many transactions it aborted.
    pub async fn expire(self: &Arc<Self>, forget: bool) -> usize {
        let now = now_ms();
        let (aborts, expired) = {
            let mut txns = self.lock();
            let mut aborts = Vec::new();
            let mut expired = Vec::new();
            for (id, entry) in txns.iter_mut().filter(|(_, e)| !e.pending) {
                if let Some(next) = entry.meta.timed_out(now) {
                    entry.pending = true;
                    aborts.push((id.clone(), next));
                } else if forget
                    && matches!(entry.meta.state, State::Empty | State::CompleteCommit | State::CompleteAbort)
                    && entry.meta.update_ms.saturating_add(self.config.id_expiration_ms) <= now
                {
                    entry.pending = true;
                    expired.push(id.clone());
                }
            }
            (aborts, expired)
        };
        let aborted = aborts.len();
        for (id, next) in aborts {
            info!(transactional_id = %id, timeout_ms = next.timeout_ms, "aborting a transaction past its timeout");
            if self.persist(&id, &next).await.is_ok() {
                self.clone().spawn_completion(id);
            }
        }
        for id in expired {
            let written = self.log.append(self.partition_for(&id), vec![(encode_key(&id), None)]).await;
            let mut txns = self.lock();
            match written {
                Ok(()) => {
                    txns.remove(&id);
                    info!(transactional_id = %id, "transactional id expired");
                }
                Err(_) => {
                    if let Some(e) = txns.get_mut(&id) {
                        e.pending = false;
                    }
                }
            }
        }
        aborted
    }

    /// Reads one partition of the log back (the latest state of each id) and starts
    /// serving it; [`TxnCoordinator::resume`] then finishes the endings under way.
    /// Returns how many records it read. Reads the log: call off the async workers.
    pub fn load_partition(&self, p: i32) -> Result<usize, String> {
        self.lock_owned().loading.insert(p);
        let epoch = self.host.coordinator_epoch(p);
        let read = self.log.read_all(p);
        let parts = self.log.partitions();
        let (read, epoch) = match (read, epoch) {
            (Ok(r), Some(epoch)) => (r, epoch),
            (Err(e), _) => {
                self.lock_owned().loading.remove(&p);
                return Err(e);
            }
            (Ok(_), None) => {
                self.lock_owned().loading.remove(&p);
                return Err(format!("no longer leading partition {p}"));
            }
        };
        let records = read.records.len();
        let mut loaded: HashMap<String, TxnMeta> = HashMap::new();
        for (key, value) in read.records {
            let id = match decode_key(&key) {
                Ok(id) => id,
                Err(e) => {
                    warn!(partition = p, error = %e, "skipping an unreadable transaction-log key");
                    continue;
                }
            };
            match value.map(|v| decode_value(&v)) {
                None => {
                    loaded.remove(&id);
                }
                Some(Ok(meta)) => {
                    loaded.insert(id, meta);
                }
                Some(Err(e)) => {
                    warn!(partition = p, transactional_id = %id, error = %e, "skipping an unreadable transaction state")
                }
            }
        }
        {
            let mut txns = self.lock();
            txns.retain(|id, _| partition_for(id, parts) != p);
            txns.extend(loaded.into_iter().map(|(id, meta)| (id, Entry { meta, pending: false })));
        }
        let mut owned = self.lock_owned();
        owned.loading.remove(&p);
        owned.loaded.insert(p, epoch);
        Ok(records)
    }

    /// Finishes the endings of transactions under way in partition `p` (after a load).
    pub fn resume(self: &Arc<Self>, p: i32) {
        let parts = self.log.partitions();
        let prepared: Vec<String> = self
            .lock()
            .iter()
            .filter(|(id, e)| e.meta.state.is_prepared() && partition_for(id, parts) == p)
            .map(|(id, _)| id.clone())
            .collect();
        for id in prepared {
            info!(transactional_id = %id, "resuming the end of a transaction");
            self.clone().spawn_completion(id);
        }
    }

    /// Stops serving partition `p` (leadership moved): its ids leave memory.
    pub fn unload_partition(&self, p: i32) {
        let parts = self.log.partitions();
        {
            let mut owned = self.lock_owned();
            owned.loaded.remove(&p);
            owned.loading.remove(&p);
        }
        self.lock().retain(|id, _| partition_for(id, parts) != p);
    }

    pub fn loaded_partitions(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.lock_owned().loaded.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// DescribeTransactions: the id's state, if this coordinator has it.
    pub fn describe(&self, id: &str) -> Result<Option<TxnMeta>, E> {
        if let Some(e) = self.owner_error(id) {
            return Err(e);
        }
        Ok(self.lock().get(id).map(|e| e.meta.clone()))
    }

    /// ListTransactions over the ids this coordinator serves (filters empty: all).
    pub fn list(&self, states: &[String], producer_ids: &[i64]) -> Vec<TxnListing> {
        let mut out: Vec<TxnListing> = self
            .lock()
            .iter()
            .filter(|(_, e)| states.is_empty() || states.iter().any(|s| s == e.meta.state.kafka_name()))
            .filter(|(_, e)| producer_ids.is_empty() || producer_ids.contains(&e.meta.producer_id))
            .map(|(id, e)| TxnListing {
                transactional_id: id.clone(),
                producer_id: e.meta.producer_id,
                state: e.meta.state,
                start_ms: e.meta.start_ms,
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }
}
