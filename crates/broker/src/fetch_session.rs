//! Fetch sessions (KIP-227): the broker remembers, per session, which partitions a
//! consumer fetches and what it last told it about each, so incremental fetch requests
//! carry only the partitions that changed and responses only the partitions with news.
//!
//! Request forms (session id, epoch): (0, -1) no session; (0, 0) open a new one; (id, -1)
//! close; (id, 0) close and open anew; (id, n>0) the n-th incremental fetch, which must
//! match the epoch the session expects. The cache is bounded by
//! `max.incremental.fetch.session.cache.slots`; when full, the least recently used session
//! is evicted, and a client whose session is gone gets FETCH_SESSION_ID_NOT_FOUND and
//! starts over with a full fetch.

use runnel_sync::LockExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartKey {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

#[derive(Debug, Clone, Copy)]
pub struct PartState {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    /// What the last response told the client; -1 until the partition was sent once.
    pub sent_high_watermark: i64,
    pub sent_last_stable_offset: i64,
    pub sent_log_start_offset: i64,
}

impl PartState {
    pub fn new(fetch_offset: i64, max_bytes: i32) -> PartState {
        PartState {
            fetch_offset,
            max_bytes,
            sent_high_watermark: -1,
            sent_last_stable_offset: -1,
            sent_log_start_offset: -1,
        }
    }
}

struct Session {
    next_epoch: i32,
    parts: BTreeMap<PartKey, PartState>,
    last_used: Instant,
}

pub struct FetchSessions {
    inner: Mutex<Inner>,
    slots_max: usize,
}

struct Inner {
    sessions: HashMap<i32, Session>,
    next_id: i32,
}

#[derive(Debug, PartialEq, Eq)]
pub enum SessionError {
    NotFound,
    InvalidEpoch,
}

/// What a fetch works on: the partitions to read, whether the response may leave out
/// partitions without news, and the session id to answer with.
pub struct Resolved {
    pub session_id: i32,
    pub incremental: bool,
    pub parts: Vec<(PartKey, PartState)>,
}

impl FetchSessions {
    pub fn new(slots_max: usize) -> FetchSessions {
        FetchSessions { inner: Mutex::new(Inner { sessions: HashMap::new(), next_id: 1 }), slots_max }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock_or_stop()
    }

    /// Applies a request's partitions (`wanted`, in request order) and forgotten
    /// partitions to the session it names, and returns what to fetch.
    pub fn resolve(
        &self,
        session_id: i32,
        epoch: i32,
        wanted: Vec<(PartKey, PartState)>,
        forgotten: &[PartKey],
    ) -> Result<Resolved, SessionError> {
        let mut inner = self.lock();
        if epoch <= 0 {
            if session_id != 0 {
                inner.sessions.remove(&session_id);
            }
            if epoch == -1 {
                return Ok(Resolved { session_id: 0, incremental: false, parts: wanted });
            }
            let id = self.open(&mut inner, &wanted);
            return Ok(Resolved { session_id: id, incremental: false, parts: wanted });
        }
        let s = inner.sessions.get_mut(&session_id).ok_or(SessionError::NotFound)?;
        if s.next_epoch != epoch {
            return Err(SessionError::InvalidEpoch);
        }
        s.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
        for key in forgotten {
            s.parts.remove(key);
        }
        for (key, state) in wanted {
            let e = s.parts.entry(key).or_insert(state);
            e.fetch_offset = state.fetch_offset;
            e.max_bytes = state.max_bytes;
        }
        s.last_used = Instant::now();
        let parts = s.parts.iter().map(|(k, v)| (k.clone(), *v)).collect();
        Ok(Resolved { session_id, incremental: true, parts })
    }

    /// Opens a session; 0 (no session) when the cache is disabled.
    fn open(&self, inner: &mut Inner, parts: &[(PartKey, PartState)]) -> i32 {
        if self.slots_max == 0 {
            return 0;
        }
        if inner.sessions.len() >= self.slots_max {
            if let Some(oldest) = inner.sessions.iter().min_by_key(|(_, s)| s.last_used).map(|(id, _)| *id) {
                inner.sessions.remove(&oldest);
            }
        }
        let id = loop {
            let id = inner.next_id;
            inner.next_id = if inner.next_id == i32::MAX { 1 } else { inner.next_id + 1 };
            if !inner.sessions.contains_key(&id) {
                break id;
            }
        };
        let parts = parts.iter().cloned().collect();
        inner.sessions.insert(id, Session { next_epoch: 1, parts, last_used: Instant::now() });
        id
    }

    /// After a response: remember what was sent for each partition.
    /// `sent`: (partition, high watermark, last stable offset, log start offset).
    pub fn record_sent(&self, session_id: i32, sent: &[(PartKey, i64, i64, i64)]) {
        if session_id == 0 {
            return;
        }
        let mut inner = self.lock();
        if let Some(s) = inner.sessions.get_mut(&session_id) {
            for (key, hw, lso, start) in sent {
                if let Some(p) = s.parts.get_mut(key) {
                    p.sent_high_watermark = *hw;
                    p.sent_last_stable_offset = *lso;
                    p.sent_log_start_offset = *start;
                }
            }
            s.last_used = Instant::now();
        }
    }

    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> PartKey {
        PartKey { topic: "t".into(), topic_id: Uuid::nil(), partition: p }
    }

    #[test]
    fn full_then_incremental_then_close() {
        let s = FetchSessions::new(2);
        let r = s
            .resolve(0, 0, vec![(key(0), PartState::new(0, 100)), (key(1), PartState::new(5, 100))], &[])
            .expect("open");
        assert!(r.session_id > 0 && !r.incremental && r.parts.len() == 2);
        s.record_sent(r.session_id, &[(key(0), 10, 10, 0)]);
        // Epoch 1: only partition 1 moved; partition 0 is forgotten.
        let inc = s.resolve(r.session_id, 1, vec![(key(1), PartState::new(7, 100))], &[key(0)]).expect("incremental");
        assert!(inc.incremental);
        assert_eq!(inc.parts.len(), 1);
        assert_eq!(inc.parts[0].1.fetch_offset, 7);
        // A replayed epoch is refused; an unknown session too.
        assert_eq!(s.resolve(r.session_id, 1, vec![], &[]).err(), Some(SessionError::InvalidEpoch));
        assert_eq!(s.resolve(999, 1, vec![], &[]).err(), Some(SessionError::NotFound));
        // Close.
        let closed = s.resolve(r.session_id, -1, vec![], &[]).expect("close");
        assert_eq!(closed.session_id, 0);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn cache_is_bounded() {
        let s = FetchSessions::new(2);
        for _ in 0..5 {
            s.resolve(0, 0, vec![(key(0), PartState::new(0, 1))], &[]).expect("open");
        }
        assert_eq!(s.len(), 2);
    }
}
