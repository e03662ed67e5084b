//! The share coordinator: keeper of `__share_group_state`. A share-partition's state lives
//! in the partition of that topic its key hashes to (as Kafka's share coordinator keys it:
//! `group:topicId:partition`), served by that partition's leader. It keeps the latest
//! snapshot of every key it serves in memory; a write is appended (acks=all) before it is
//! acknowledged; a new leader of a state partition reads it back before it serves it.
//!
//! Record key v0: version i16 = 0, then the key string (UTF-8). Value: [`Snapshot`]; a null
//! value (tombstone) deletes the key.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError as E;
use runnel_coordinator::{records::partition_for, GroupLog, LogFuture};
use runnel_sync::LockExt;
use tracing::warn;
use uuid::Uuid;

use crate::snapshot::Snapshot;

/// The key of a share-partition's state, as Kafka writes it (and FindCoordinator's key for
/// the share coordinator, key type 2).
pub fn state_key(group: &str, topic_id: Uuid, partition: i32) -> String {
    format!("{group}:{topic_id}:{partition}")
}

fn encode_key(key: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(2 + key.len());
    b.put_i16(0);
    b.put_slice(key.as_bytes());
    b.freeze()
}

fn decode_key(raw: &[u8]) -> Option<String> {
    match raw {
        [0, 0, rest @ ..] => std::str::from_utf8(rest).ok().map(str::to_string),
        _ => None,
    }
}

#[derive(Default)]
struct Inner {
    states: HashMap<String, Snapshot>,
    loaded: HashSet<i32>,
    loading: HashSet<i32>,
}

pub struct StateStore {
    log: Arc<dyn GroupLog>,
    inner: Mutex<Inner>,
}

impl StateStore {
    pub fn new(log: Arc<dyn GroupLog>) -> StateStore {
        StateStore { log, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock_or_stop()
    }

    pub fn partition_for(&self, key: &str) -> i32 {
        partition_for(key, self.log.partitions())
    }

    /// Why this broker cannot serve `key` now: another broker leads its state partition
    /// (NOT_COORDINATOR), or it is being read back (COORDINATOR_LOAD_IN_PROGRESS).
    pub fn owner_error(&self, key: &str) -> Option<E> {
        let p = self.partition_for(key);
        let inner = self.lock();
        if inner.loaded.contains(&p) {
            None
        } else if inner.loading.contains(&p) || self.log.leads(p) {
            Some(E::CoordinatorLoadInProgress)
        } else {
            Some(E::NotCoordinator)
        }
    }

    /// The state kept for `key`, if any.
    pub fn read(&self, key: &str) -> Result<Option<Snapshot>, E> {
        if let Some(e) = self.owner_error(key) {
            return Err(e);
        }
        Ok(self.lock().states.get(key).cloned())
    }

    /// Replaces the state of `key`; durable when the future resolves. A write from an older
    /// state epoch than the one kept is refused (FENCED_STATE_EPOCH): a stale leader of the
    /// share-partition cannot overwrite its successor's state.
    pub fn write(&self, key: &str, snapshot: Snapshot) -> Result<LogFuture, E> {
        if let Some(e) = self.owner_error(key) {
            return Err(e);
        }
        let p = self.partition_for(key);
        let mut inner = self.lock();
        if inner.states.get(key).is_some_and(|s| s.state_epoch > snapshot.state_epoch) {
            return Err(E::FencedStateEpoch);
        }
        let value = snapshot.encode();
        inner.states.insert(key.to_string(), snapshot);
        // Appended under the lock, so the log holds writes in the order they were made.
        Ok(self.log.append(p, vec![(encode_key(key), Some(value))]))
    }

    /// Deletes the state of `key` (its group's offsets were deleted, or the group); durable
    /// when the future resolves.
    pub fn delete(&self, key: &str) -> Result<LogFuture, E> {
        if let Some(e) = self.owner_error(key) {
            return Err(e);
        }
        let p = self.partition_for(key);
        let mut inner = self.lock();
        inner.states.remove(key);
        Ok(self.log.append(p, vec![(encode_key(key), None)]))
    }

    /// The partitions of the state topic this coordinator serves.
    pub fn loaded_partitions(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.lock().loaded.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// Reads partition `p` back (last write wins) and serves it. Blocking: call it off the
    /// async workers. Returns how many records it read.
    pub fn load_partition(&self, p: i32) -> Result<usize, String> {
        self.lock().loading.insert(p);
        let read = self.log.read_all(p);
        let parts = self.log.partitions();
        let mut inner = self.lock();
        inner.loading.remove(&p);
        inner.states.retain(|k, _| partition_for(k, parts) != p);
        let replay = read?;
        let n = replay.records.len();
        for (k, v) in replay.records {
            let Some(key) = decode_key(&k) else {
                warn!(partition = p, "skipping a share-state record with an unknown key");
                continue;
            };
            match v.map(|v| Snapshot::decode(&v)) {
                None => {
                    inner.states.remove(&key);
                }
                Some(Ok(s)) => {
                    inner.states.insert(key, s);
                }
                Some(Err(e)) => warn!(partition = p, %key, error = %e, "skipping a share-state record"),
            }
        }
        inner.loaded.insert(p);
        Ok(n)
    }

    /// Stops serving partition `p` (its leadership moved).
    pub fn unload_partition(&self, p: i32) {
        let parts = self.log.partitions();
        let mut inner = self.lock();
        inner.loaded.remove(&p);
        inner.states.retain(|k, _| partition_for(k, parts) != p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::StateBatch;
    use crate::RecordState;
    use runnel_coordinator::{Records, Replay};

    /// An in-memory log.
    #[derive(Default)]
    struct MemLog(Mutex<HashMap<i32, Records>>);

    impl GroupLog for MemLog {
        fn partitions(&self) -> i32 {
            3
        }
        fn append(&self, partition: i32, records: Records) -> LogFuture {
            self.0.lock().unwrap().entry(partition).or_default().extend(records);
            Box::pin(async { Ok(()) })
        }
        fn append_txn(&self, _: i32, _: i64, _: i16, _: Records) -> LogFuture {
            Box::pin(async { Err("no transactions here".to_string()) })
        }
        fn read_all(&self, partition: i32) -> Result<Replay, String> {
            let records = self.0.lock().unwrap().get(&partition).cloned().unwrap_or_default();
            Ok(Replay { records, open: vec![] })
        }
        fn leads(&self, _: i32) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn writes_survive_a_reload_and_stale_epochs_are_fenced() {
        let log = Arc::new(MemLog::default());
        let store = StateStore::new(log.clone());
        let topic = Uuid::new_v4();
        let key = state_key("g:1", topic, 4);
        let p = store.partition_for(&key);
        assert_eq!(store.read(&key), Err(E::CoordinatorLoadInProgress));
        store.load_partition(p).unwrap();
        assert_eq!(store.read(&key), Ok(None));
        let batch = StateBatch { first: 3, last: 5, delivery_count: 2, state: RecordState::Available };
        let snap = Snapshot { state_epoch: 1, start: 3, batches: vec![batch] };
        store.write(&key, snap.clone()).unwrap().await.unwrap();
        assert!(matches!(store.write(&key, Snapshot { state_epoch: 0, ..snap.clone() }), Err(E::FencedStateEpoch)));

        let again = StateStore::new(log);
        again.load_partition(p).unwrap();
        assert_eq!(again.read(&key), Ok(Some(snap)));
        again.delete(&key).unwrap().await.unwrap();
        assert_eq!(again.read(&key), Ok(None));
        again.unload_partition(p);
        assert_eq!(again.read(&key), Err(E::CoordinatorLoadInProgress));
    }
}
