//! The transaction coordinator against an in-memory log and host: a transaction commits
//! with its markers written, a second instance fences the first and aborts its open
//! transaction, a timed-out transaction is aborted, and a coordinator that loads the log
//! after a failover finishes an ending that was under way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;
use runnel_coordinator::{GroupLog, LogFuture, Replay};
use runnel_txn::{BoxFuture, MarkerWrite, State, TxnConfig, TxnCoordinator, TxnHost};
use runnel_wire::TxnEnd;

type Records = Vec<(Bytes, Option<Bytes>)>;

#[derive(Default)]
struct MemLog {
    records: Mutex<HashMap<i32, Records>>,
}

impl GroupLog for MemLog {
    fn partitions(&self) -> i32 {
        4
    }
    fn append(&self, partition: i32, records: Records) -> LogFuture {
        self.records.lock().unwrap().entry(partition).or_default().extend(records);
        Box::pin(async { Ok(()) })
    }
    fn append_txn(&self, _partition: i32, _producer_id: i64, _epoch: i16, _records: Records) -> LogFuture {
        Box::pin(async { Err("the transaction log takes no transactional records".to_string()) })
    }
    fn read_all(&self, partition: i32) -> Result<Replay, String> {
        let records = self.records.lock().unwrap().get(&partition).cloned().unwrap_or_default();
        Ok(Replay { records, open: Vec::new() })
    }
    fn leads(&self, _partition: i32) -> bool {
        true
    }
}

#[derive(Default)]
struct Host {
    markers: Mutex<Vec<MarkerWrite>>,
    /// Partitions whose markers fail this many more times.
    failing: Mutex<HashMap<(String, i32), usize>>,
    next_id: Mutex<i64>,
}

impl TxnHost for Host {
    fn write_markers(&self, w: MarkerWrite) -> BoxFuture<Vec<((String, i32), String)>> {
        let mut failed = Vec::new();
        let mut failing = self.failing.lock().unwrap();
        for tp in &w.partitions {
            if let Some(n) = failing.get_mut(tp).filter(|n| **n > 0) {
                *n -= 1;
                failed.push((tp.clone(), "not the leader".to_string()));
            }
        }
        self.markers.lock().unwrap().push(w);
        Box::pin(async move { failed })
    }
    fn allocate_producer_id(&self) -> BoxFuture<Result<i64, String>> {
        let mut next = self.next_id.lock().unwrap();
        *next += 1;
        let id = 1000 + *next;
        Box::pin(async move { Ok(id) })
    }
    fn coordinator_epoch(&self, _partition: i32) -> Option<i32> {
        Some(5)
    }
}

fn coordinator(log: &Arc<MemLog>, host: &Arc<Host>, config: TxnConfig) -> Arc<TxnCoordinator> {
    let c = Arc::new(TxnCoordinator::new(log.clone(), host.clone(), config));
    for p in 0..4 {
        c.load_partition(p).expect("load");
        c.resume(p);
    }
    c
}

async fn until_state(c: &TxnCoordinator, id: &str, state: State) {
    for _ in 0..200 {
        if c.describe(id).expect("owner").is_some_and(|m| m.state == state) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never reached {state:?}: {:?}", c.describe(id));
}

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_string(), p)
}

#[tokio::test]
async fn commit_writes_markers_then_completes() {
    let (log, host) = (Arc::new(MemLog::default()), Arc::new(Host::default()));
    let c = coordinator(&log, &host, TxnConfig::default());
    let (pid, epoch) = c.init_producer_id("app", 60_000, None).await.expect("init");
    assert_eq!((pid, epoch), (1001, 0));
    assert_eq!(c.add_partitions("app", pid, epoch, &[tp("a", 0), tp("b", 1)], false).await, Ok(()));
    assert_eq!(c.verify("app", pid, epoch, &tp("a", 0)), Ok(()));
    assert_eq!(c.verify("app", pid, epoch, &tp("c", 0)), Err(E::InvalidTxnState));
    // One partition's leader refuses twice: the marker is retried until it lands.
    host.failing.lock().unwrap().insert(tp("b", 1), 2);
    assert_eq!(c.end_txn("app", pid, epoch, TxnEnd::Commit, false).await, Ok((pid, epoch)));
    until_state(&c, "app", State::CompleteCommit).await;
    let markers = host.markers.lock().unwrap().clone();
    assert!(markers.iter().all(|m| m.end == TxnEnd::Commit && m.producer_id == pid && m.coordinator_epoch == 5));
    assert_eq!(markers.len(), 3, "{markers:?}");
    assert_eq!(markers[2].partitions, vec![tp("b", 1)]);
    assert_eq!(c.end_txn("app", pid, epoch, TxnEnd::Commit, false).await, Ok((pid, epoch)), "a retried commit");
    assert_eq!(c.list(&[], &[]).len(), 1);
    assert_eq!(c.list(&["Ongoing".into()], &[]).len(), 0);
}

#[tokio::test]
async fn a_new_instance_fences_the_old_one_and_aborts_its_transaction() {
    let (log, host) = (Arc::new(MemLog::default()), Arc::new(Host::default()));
    let c = coordinator(&log, &host, TxnConfig::default());
    let (pid, epoch) = c.init_producer_id("app", 60_000, None).await.expect("init");
    c.add_partitions("app", pid, epoch, &[tp("a", 0)], false).await.expect("add");
    assert_eq!(c.init_producer_id("app", 60_000, None).await, Err(E::ConcurrentTransactions));
    until_state(&c, "app", State::CompleteAbort).await;
    let (pid2, epoch2) = c.init_producer_id("app", 60_000, None).await.expect("init again");
    assert_eq!((pid2, epoch2), (pid, 2));
    let aborts = host.markers.lock().unwrap().clone();
    assert_eq!((aborts[0].end, aborts[0].producer_epoch), (TxnEnd::Abort, 1));
    assert_eq!(c.add_partitions("app", pid, epoch, &[tp("a", 0)], false).await, Err(E::ProducerFenced));
    assert_eq!(c.end_txn("app", pid, epoch, TxnEnd::Commit, false).await, Err(E::ProducerFenced));
    assert_eq!(c.init_producer_id("", 60_000, None).await, Err(E::InvalidRequest));
    assert_eq!(c.init_producer_id("x", 900_001, None).await, Err(E::InvalidTransactionTimeout));
}

#[tokio::test]
async fn timeouts_abort_and_a_new_coordinator_resumes_an_ending() {
    let (log, host) = (Arc::new(MemLog::default()), Arc::new(Host::default()));
    let c = coordinator(&log, &host, TxnConfig::default());
    let (pid, epoch) = c.init_producer_id("slow", 1, None).await.expect("init");
    c.add_partitions("slow", pid, epoch, &[tp("a", 0)], false).await.expect("add");
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(c.expire(true).await, 1);
    until_state(&c, "slow", State::CompleteAbort).await;
    assert_eq!(c.add_partitions("slow", pid, epoch, &[tp("a", 0)], false).await, Err(E::ProducerFenced));

    // A commit whose markers cannot land yet: the coordinator "fails over" (a new one
    // loads the same log) and the new one writes them.
    let (pid, epoch) = c.init_producer_id("app", 60_000, None).await.expect("init");
    c.add_partitions("app", pid, epoch, &[tp("z", 3)], false).await.expect("add");
    host.failing.lock().unwrap().insert(tp("z", 3), usize::MAX);
    c.end_txn("app", pid, epoch, TxnEnd::Commit, false).await.expect("end");
    for p in 0..4 {
        c.unload_partition(p);
    }
    assert_eq!(c.describe("app"), Err(E::CoordinatorLoadInProgress));
    host.failing.lock().unwrap().clear();
    let next = coordinator(&log, &host, TxnConfig::default());
    until_state(&next, "app", State::CompleteCommit).await;
    // Ids idle past their expiration are forgotten.
    let forgetful = coordinator(&log, &host, TxnConfig { id_expiration_ms: 0, ..TxnConfig::default() });
    forgetful.expire(true).await;
    assert_eq!(forgetful.describe("app"), Ok(None));
}

#[tokio::test]
async fn version_2_ends_with_the_next_epoch_and_a_new_id_when_it_runs_out() {
    let (log, host) = (Arc::new(MemLog::default()), Arc::new(Host::default()));
    let c = coordinator(&log, &host, TxnConfig::default());
    let (pid, epoch) = c.init_producer_id("v2", 60_000, None).await.expect("init");
    // The partition leader adds what the producer wrote (Produce v12+).
    c.add_partitions("v2", pid, epoch, &[tp("a", 0)], true).await.expect("add");
    assert_eq!(c.end_txn("v2", pid, epoch, TxnEnd::Commit, true).await, Ok((pid, epoch + 1)));
    until_state(&c, "v2", State::CompleteCommit).await;
    let markers = host.markers.lock().unwrap().clone();
    assert_eq!((markers[0].producer_id, markers[0].producer_epoch), (pid, epoch + 1), "markers fence the old epoch");
    assert_eq!(c.end_txn("v2", pid, epoch, TxnEnd::Commit, true).await, Ok((pid, epoch + 1)), "a retried commit");
    assert_eq!(c.add_partitions("v2", pid, epoch, &[tp("a", 0)], true).await, Err(E::ProducerFenced));

    // The epoch runs out: the ending hands out a new producer id, and a coordinator that
    // loads the log afterwards knows it.
    let mut meta = c.describe("v2").expect("owner").expect("known");
    meta.producer_epoch = i16::MAX - 1;
    log.append(
        c.partition_for("v2"),
        vec![(runnel_txn::records::encode_key("v2"), Some(runnel_txn::records::encode_value(&meta)))],
    )
    .await
    .expect("append");
    let c = coordinator(&log, &host, TxnConfig::default());
    c.add_partitions("v2", pid, i16::MAX - 1, &[tp("a", 0)], true).await.expect("add");
    let (new_pid, new_epoch) = c.end_txn("v2", pid, i16::MAX - 1, TxnEnd::Abort, true).await.expect("end");
    assert_ne!(new_pid, pid);
    assert_eq!(new_epoch, 0);
    until_state(&c, "v2", State::CompleteAbort).await;
    let reloaded = coordinator(&log, &host, TxnConfig::default());
    let meta = reloaded.describe("v2").expect("owner").expect("known");
    assert_eq!((meta.producer_id, meta.producer_epoch, meta.prev_producer_id), (new_pid, 0, Some(pid)));
    assert_eq!(reloaded.end_txn("v2", pid, i16::MAX - 1, TxnEnd::Abort, true).await, Ok((new_pid, 0)));
}
