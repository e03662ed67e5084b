//! The state behind share groups on a partition leader, owned by the broker: the
//! share-partitions it serves (each behind its own lock, loaded and written by `share`)
//! and the members' share sessions (KIP-932), with the rules of their epochs.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError as E;
use runnel_share::SharePartition;
use runnel_sync::LockExt;
use uuid::Uuid;

/// (topic id, partition).
pub type Tp = (Uuid, i32);
/// (group, topic id, partition).
pub(crate) type Key = (String, Uuid, i32);

pub(crate) struct Loaded {
    pub part: SharePartition,
    /// The leader term it was read back in.
    pub term: u64,
}

#[derive(Default)]
pub(crate) struct Entry {
    pub state: Mutex<Option<Loaded>>,
    /// Loads and writes of the share-partition's state, one at a time.
    pub gate: tokio::sync::Mutex<()>,
}

struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    parts: BTreeSet<Tp>,
    last_used: Instant,
}

#[derive(Default)]
pub struct Shares {
    pub(crate) parts: Mutex<HashMap<Key, Arc<Entry>>>,
    sessions: Mutex<HashMap<(String, String), Session>>,
}

/// How a share session request stands.
pub struct SessionView {
    /// Every partition of the session (after this request's changes).
    pub parts: Vec<Tp>,
    /// A new session: the response lists every partition.
    pub full: bool,
}

impl Shares {
    /// Opens, continues or closes (epoch -1) the share session of (group, member).
    pub fn session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        add: &[Tp],
        forget: &[Tp],
        max_sessions: usize,
    ) -> Result<SessionView, E> {
        let key = (group.to_string(), member.to_string());
        let mut sessions = self.sessions.lock_or_stop();
        match epoch {
            0 => {
                if !sessions.contains_key(&key) && sessions.len() >= max_sessions {
                    return Err(E::ShareSessionLimitReached);
                }
                let parts: BTreeSet<Tp> = add.iter().copied().collect();
                // As Kafka: a member's new session replaces its old one; what it acquired
                // stays its own until acknowledged or the locks run out (the client may be
                // processing those records still).
                let view = SessionView { parts: parts.iter().copied().collect(), full: true };
                sessions.insert(key, Session { next_epoch: 1, parts, last_used: Instant::now() });
                Ok(view)
            }
            -1 => {
                let s = sessions.remove(&key).ok_or(E::ShareSessionNotFound)?;
                Ok(SessionView { parts: s.parts.into_iter().collect(), full: false })
            }
            e => {
                let s = sessions.get_mut(&key).ok_or(E::ShareSessionNotFound)?;
                if s.next_epoch != e {
                    return Err(E::InvalidShareSessionEpoch);
                }
                s.next_epoch = if e == i32::MAX { 1 } else { e + 1 };
                s.last_used = Instant::now();
                s.parts.extend(add.iter().copied());
                for tp in forget {
                    s.parts.remove(tp);
                }
                Ok(SessionView { parts: s.parts.iter().copied().collect(), full: false })
            }
        }
    }

    pub(crate) fn entry(&self, key: &Key) -> Arc<Entry> {
        self.parts.lock_or_stop().entry(key.clone()).or_default().clone()
    }

    /// Ends the sessions not used for `idle` (their members crashed or left without
    /// closing them): (group, member, partitions) of each.
    pub fn expire_idle(&self, idle: Duration) -> Vec<(String, String, Vec<Tp>)> {
        let now = Instant::now();
        let mut gone = Vec::new();
        self.sessions.lock_or_stop().retain(|(group, member), s| {
            let keep = now.duration_since(s.last_used) <= idle;
            if !keep {
                gone.push((group.clone(), member.clone(), s.parts.iter().copied().collect()));
            }
            keep
        });
        gone
    }

    pub fn has_sessions(&self, group: &str) -> bool {
        self.sessions.lock_or_stop().keys().any(|(g, _)| g == group)
    }

    /// Drops the group's share-partitions from memory (it has no session here any more):
    /// their next use reads their state back, with whatever changed it meanwhile
    /// (AlterShareGroupOffsets, DeleteShareGroupOffsets).
    pub fn forget_group(&self, group: &str) {
        self.parts.lock_or_stop().retain(|(g, _, _), _| g != group);
    }

    /// Drops one share-partition from memory: its state was changed elsewhere.
    pub(crate) fn forget(&self, key: &Key) {
        self.parts.lock_or_stop().remove(key);
    }
}
