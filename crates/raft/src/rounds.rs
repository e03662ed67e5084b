//! The driver's persistence rounds in flight (pipelined persistence, Raft thesis §10.2.1).
//!
//! A round is the readies of many groups collected at once (their entries written, not yet
//! synced) and the one sync that makes them durable. Up to [`ROUNDS_IN_FLIGHT`] rounds sync
//! at once: entries that arrive while a round syncs are written and their sync started at
//! once, instead of waiting for that round to end and then for a sync of their own. Rounds
//! finish in the order they started (a group's readies must be persisted in order, and a
//! later sync says nothing of an earlier one's files).
//!
//! A group may have readies in several rounds only while it leads: a leader only appends to
//! its log. A follower's next ready may truncate entries an earlier round is still syncing,
//! install a snapshot, or stage a new term or vote, so a follower (or any group whose ready
//! in flight staged a state) waits for its rounds to finish before it is collected again.
//! A leader deposed while its round syncs may meanwhile learn of the new leader's
//! conflicting entries: Raft replaces them in memory, the store only at the next collect.
//! The round's end must not make the old entries count, so the high watermark stops at
//! Raft's own persisted index, which Raft lowers below a conflict (`release_waiters`; the
//! driver simulation found this).
//!
//! The rounds also keep the page-cache tail ([`CacheTail`]): a round's writes join it only
//! once that round has synced, in order, so what the tail pushes out was synced by then and
//! its pages are clean for the kernel to drop. They are dropped after the next round's sync,
//! on the thread that syncs. A range pushed out while another round of its file still synced
//! (rounds sync at once) would find its pages under writeback, and the kernel would keep
//! them for good.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use runnel_storage::{CacheTail, Written};

use crate::replica::{Collected, Replica};

/// A group's replica, shared by the driver and the broker.
pub type SharedReplica = Arc<Mutex<Replica>>;

/// A disk sync in progress (see `driver::Disk::sync`).
pub type SyncFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// Rounds syncing at once at most. With two, entries that arrive while both sync wait for
/// the older to end before they are even written. One broker alone at durable-512 sent
/// 1.28M records/s with two, 1.36M with four (means of eight runs), 1.37-1.38M with six
/// (docs/bench.md, "Rounds in flight, again").
pub const ROUNDS_IN_FLIGHT: usize = 4;

/// One group's ready in a round.
pub struct Taken {
    pub group: u64,
    pub replica: SharedReplica,
    pub collected: Collected,
}

/// The readies a round collected, the sync they wait for (none when nothing was written),
/// and the log pages the sync covers, for the page-cache tail.
pub struct Round {
    pub taken: Vec<Taken>,
    pub sync: Option<SyncFuture>,
    pub written: Vec<Written>,
}

/// The rounds in flight, oldest first, and which groups they hold.
pub struct Rounds {
    queue: VecDeque<Round>,
    /// Per group with readies in flight: how many rounds hold one, and whether one of those
    /// staged a state.
    held: HashMap<u64, (usize, bool)>,
    tail: CacheTail,
    /// Synced pages the tail pushed out, to drop after the next sync. At most what the
    /// rounds finished since that sync wrote, in ranges merged per file.
    evict: Vec<Written>,
}

impl Rounds {
    /// `tail_bytes` of the newest synced log pages stay in the page cache; 0 leaves the page
    /// cache to the kernel.
    pub fn new(tail_bytes: u64) -> Rounds {
        Rounds { queue: VecDeque::new(), held: HashMap::new(), tail: CacheTail::new(tail_bytes), evict: Vec::new() }
    }

    /// Whether rounds hand in the pages they write ([`Round::written`]).
    pub fn keeps_a_tail(&self) -> bool {
        self.tail.enabled()
    }

    /// Whether synced pages pushed out of the tail wait to be dropped.
    pub fn has_evictions(&self) -> bool {
        !self.evict.is_empty()
    }

    /// The synced pages pushed out of the tail so far, for a sync about to start to drop
    /// once it is done.
    pub fn take_evictions(&mut self) -> Vec<Written> {
        std::mem::take(&mut self.evict)
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn has_room(&self) -> bool {
        self.queue.len() < ROUNDS_IN_FLIGHT
    }

    /// The oldest round wrote nothing that needs a sync.
    pub fn oldest_needs_no_sync(&self) -> bool {
        self.queue.front().is_some_and(|r| r.sync.is_none())
    }

    /// Whether the group's next ready may be collected now, with earlier rounds in flight.
    pub fn may_collect(&self, group: u64, replica: &Replica) -> bool {
        match self.held.get(&group) {
            None => true,
            Some(&(_, staged)) => !staged && replica.is_leader(),
        }
    }

    pub fn push(&mut self, round: Round) {
        for t in &round.taken {
            let e = self.held.entry(t.group).or_insert((0, false));
            e.0 += 1;
            e.1 |= t.collected.staged_state().is_some();
        }
        self.queue.push_back(round);
    }

    /// Resolves once the oldest round's sync has (at once when it needed none, or when no
    /// round is in flight: the caller asks only with rounds in flight). Cancel-safe: the
    /// sync stays with its round until [`Rounds::pop`].
    pub async fn oldest_synced(&mut self) -> io::Result<()> {
        match self.queue.front_mut().and_then(|r| r.sync.as_mut()) {
            Some(sync) => sync.await,
            None => Ok(()),
        }
    }

    /// Takes the oldest round, once [`Rounds::oldest_synced`] resolved; its groups are no
    /// longer held by it. Its pages join the tail if `synced`.
    pub fn pop(&mut self, synced: bool) -> Option<Round> {
        let mut round = self.queue.pop_front()?;
        if synced {
            for w in round.written.drain(..) {
                self.tail.push(w, &mut self.evict);
            }
        }
        for t in &round.taken {
            if let Some(e) = self.held.get_mut(&t.group) {
                e.0 -= 1;
                if e.0 == 0 {
                    self.held.remove(&t.group);
                }
            }
        }
        Some(round)
    }
}
