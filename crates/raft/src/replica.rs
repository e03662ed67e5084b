//! One replica of one Raft group, without I/O of its own: the caller ticks it, feeds it
//! messages, sends what it emits, and syncs the disk between [`Replica::collect`] and
//! [`Replica::persisted`] (so one fsync can cover many groups).
//!
//! The leader assigns Kafka offsets when it proposes: a batch goes into the Raft log with
//! its base offset and leader epoch (the Raft term) already stamped, so every replica
//! stores the same bytes at the same offsets. The high watermark is the end of the last
//! committed entry that is also on this replica's disk.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, Entry, EntryType, Message,
    MessageType,
};
use raft::{Config, RawNode, SnapshotStatus, StateRole};
use runnel_storage::{CleanPlan, CleanStats, Cleaned, Log, LogConfig, ProducerError};
use runnel_wire::marker::marker_batch;
use runnel_wire::{BatchHeader, TxnEnd};
use tokio::sync::oneshot;

use crate::store::RaftLog;

mod config;
mod members;
mod quiet;
mod warm;
pub use config::ReplicaConfig;
pub use members::Member;
pub use quiet::QUIESCE;

#[derive(Debug)]
pub enum ProposeError {
    /// Not the leader (the known leader, if any, is given).
    NotLeader(Option<u64>),
    /// Too much proposed and not yet committed; try again shortly.
    Busy,
    Producer(ProducerError),
    Invalid(String),
}

/// Where a proposed batch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposed {
    pub base_offset: i64,
    pub last_offset: i64,
    /// Raft index of the entry holding it.
    pub index: u64,
    pub term: u64,
    /// A retry of a batch already proposed: nothing new was written.
    pub duplicate: bool,
}

/// How an acknowledgement waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// acks=all: committed (on a majority of disks).
    Committed,
    /// acks=1: on the leader's disk.
    Local,
}

struct Waiter {
    index: u64,
    term: u64,
    tx: oneshot::Sender<bool>,
}

/// A ready taken by [`Replica::collect`], waiting for the caller's disk sync.
pub struct Collected {
    number: u64,
    must_sync: bool,
    /// Bytes of entry data this ready wrote to the log.
    bytes: u64,
    last_index: u64,
    /// Index of the snapshot installed by this ready (0 when none).
    snapshot_index: u64,
    held: Vec<Message>,
    /// A new term or vote, staged: synced, then committed
    /// ([`Replica::commit_staged_state`]) and its directory synced, before
    /// [`Replica::persisted`].
    state: Option<Arc<File>>,
}

impl Collected {
    /// Entries (or a snapshot) were written: the log must be synced before
    /// [`Replica::persisted`].
    pub fn must_sync(&self) -> bool {
        self.must_sync
    }

    /// Bytes of entry data written, for bounding a round ([`crate::driver`]).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The staged state file this ready wrote (see [`Collected::state`]).
    pub fn staged_state(&self) -> Option<&Arc<File>> {
        self.state.as_ref()
    }
}

pub struct Replica {
    node: RawNode<RaftLog>,
    deliver_committed: bool,
    high_watermark: i64,
    /// The Raft index `high_watermark` is the end of.
    durable_index: u64,
    commit_waiters: VecDeque<Waiter>,
    local_waiters: VecDeque<Waiter>,
    applied: Vec<Entry>,
    /// As leader: the last index of the log when this replica became leader (its empty
    /// entry included, if it appended one). Once durable, everything earlier leaders
    /// committed is below the high watermark.
    led_from: u64,
    /// The term `led_from` was recorded in.
    led_term: u64,
    /// The log start DeleteRecords asked for (see `raise_log_start`).
    log_start_floor: i64,
    /// Ticks still to pass before this replica's election clock starts (see
    /// [`Replica::hold_elections`]).
    held_ticks: usize,
    /// Ticks so far, and when each member of the group was last heard from (in ticks):
    /// which followers are alive, for choosing a replica consumers may read from. (raft-rs's
    /// own `recent_active` is reset at every quorum check, so it reads false for a moment
    /// even for a healthy follower.)
    ticks: u64,
    heard: std::collections::HashMap<u64, u64>,
    /// Leader: per member, when it was last caught up (in ticks), and the commit index
    /// as of its previous answer. A member is caught up when it has everything committed,
    /// or everything that was committed when it last answered (as Kafka's followers are
    /// when they fetch past the log end of their previous fetch): under steady writes a
    /// follower one round behind the quorum still counts.
    catch_up: std::collections::HashMap<u64, (u64, u64)>,
    /// A member not heard from for longer than this (twice the election timeout) is silent.
    silent_after_ticks: u64,
    /// This replica may go quiet ([`ReplicaConfig::quiesce`]), and has: its clocks stand.
    may_quiesce: bool,
    quiet: bool,
}

impl Replica {
    pub fn open(dir: &Path, log_config: LogConfig, cfg: &ReplicaConfig, now_ms: i64) -> io::Result<Replica> {
        let mut store = RaftLog::open_with(dir, log_config, &cfg.voters, now_ms, cfg.tail_synced)?;
        let conf = store.conf_state();
        if conf.voters == [cfg.id] && conf.learners.is_empty() && conf.voters_outgoing.is_empty() {
            // The only voter: every entry on its disk is committed (a majority of one has
            // it), whatever commit index was last written (it is written lazily).
            store.set_commit(store.last());
        }
        let commit = store.hard_state().commit;
        let high_watermark = store.end_offset_of(commit)?;
        let config = Config {
            id: cfg.id,
            election_tick: cfg.election_tick,
            heartbeat_tick: cfg.heartbeat_tick,
            // Partitions need nothing replayed; the metadata group rebuilds its state.
            applied: if cfg.deliver_committed { store.first() - 1 } else { commit },
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            max_uncommitted_size: cfg.max_uncommitted_bytes,
            max_committed_size_per_ready: 16 << 20,
            // Every entry takes an offset in the Kafka log: a leader with nothing to commit
            // appends no empty entry, so a leader change leaves no gap in the offsets.
            // The metadata group keeps it (see `leader_caught_up`).
            skip_empty_entry_when_committed: !cfg.deliver_committed,
            ..Default::default()
        };
        config.validate().map_err(|e| io::Error::other(e.to_string()))?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&config, store, &logger).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Replica {
            node,
            deliver_committed: cfg.deliver_committed,
            high_watermark,
            durable_index: commit,
            commit_waiters: VecDeque::new(),
            local_waiters: VecDeque::new(),
            applied: Vec::new(),
            led_from: 0,
            led_term: 0,
            log_start_floor: 0,
            held_ticks: 0,
            ticks: 0,
            heard: std::collections::HashMap::new(),
            catch_up: std::collections::HashMap::new(),
            silent_after_ticks: 2 * cfg.election_tick as u64,
            may_quiesce: cfg.quiesce,
            quiet: false,
        })
    }

    /// Raft has work for a ready (messages, entries, commits).
    pub fn has_ready(&self) -> bool {
        self.node.has_ready()
    }

    pub fn id(&self) -> u64 {
        self.node.raft.id
    }

    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<u64> {
        Some(self.node.raft.leader_id).filter(|id| *id != raft::INVALID_ID)
    }

    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    pub fn role(&self) -> StateRole {
        self.node.raft.state
    }

    pub fn voters(&self) -> Vec<u64> {
        self.node.store().conf_state().voters.clone()
    }

    pub fn store(&self) -> &RaftLog {
        self.node.store()
    }

    pub fn log(&self) -> &Log {
        self.node.store().log()
    }

    pub fn log_mut(&mut self) -> &mut Log {
        self.node.mut_store().log_mut()
    }

    /// Offsets below this are committed and on this replica's disk.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    pub fn committed_index(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    /// A leader that has applied an entry of its own term has applied everything earlier
    /// leaders committed, so its state machine is current and it may decide on it.
    pub fn leader_caught_up(&self, applied_index: u64) -> bool {
        self.is_leader() && self.node.raft.raft_log.term(applied_index).ok() == Some(self.term())
    }

    /// A leader whose high watermark covers its log as it was when it became leader (an
    /// entry of its own term, or a log it knew to be all committed): everything earlier
    /// leaders committed is below it, so reading up to it reads the whole committed log.
    pub fn leader_current(&self) -> bool {
        self.is_leader() && self.led_term == self.term() && self.durable_index >= self.led_from
    }

    /// The last committed entry handed to the state machine.
    pub fn applied_index(&self) -> u64 {
        self.node.raft.raft_log.applied
    }

    /// Raft's own test hook, used by the simulator to make election timeouts reproducible.
    pub fn set_election_timeout(&mut self, ticks: usize) {
        self.node.raft.set_randomized_election_timeout(ticks);
    }

    /// For a brand-new group's replicas other than the one meant to lead: its election
    /// clock starts only after `ticks`, so the replica that campaigns at once wins even when
    /// its first vote requests reached brokers that had not opened the group yet (its own
    /// retry comes within an election timeout). It votes and follows as usual meanwhile.
    pub fn hold_elections(&mut self, ticks: usize) {
        self.held_ticks = ticks;
    }

    /// One tick of the group's clocks; none while it is quiet. True when Raft has work.
    pub fn tick(&mut self) -> bool {
        if self.quiet {
            return false;
        }
        self.ticks += 1;
        if self.held_ticks > 0 {
            self.held_ticks -= 1;
            if self.node.raft.leader_id == raft::INVALID_ID {
                return false;
            }
            self.held_ticks = 0;
        }
        self.node.tick()
    }

    /// Steps a message from a peer. Messages that no correct peer sends, and on which
    /// raft-rs would panic, are refused first (the Raft port is reachable from the network).
    pub fn step(&mut self, m: Message) -> raft::Result<()> {
        if let Err(why) = self.admissible(&m) {
            return Err(raft::Error::ConfigInvalid(format!("{:?} from {} refused: {why}", m.get_msg_type(), m.from)));
        }
        let from = m.from;
        if self.node.raft.prs().get(from).is_some() {
            self.heard.insert(from, self.ticks);
        }
        let quiesce = quiet::Quiesce::of(&m);
        self.node.step(m)?;
        self.after_step(quiesce, from);
        let raft = &self.node.raft;
        if let (true, Some(p)) = (self.is_leader(), raft.prs().get(from)) {
            let committed = raft.raft_log.committed;
            let (mut at, target) = self.catch_up.get(&from).copied().unwrap_or((u64::MAX, committed));
            if p.matched >= committed.min(target) {
                at = self.ticks;
            }
            self.catch_up.insert(from, (at, committed));
        }
        Ok(())
    }

    /// Why raft-rs must not be handed `m`, if it must not. Peers exchange only these
    /// message kinds, always with a term (raft-rs takes a term of 0 for a local message,
    /// and forwarding a local kind such as MsgPropose back out panics); a leader sends a
    /// follower a commit index only up to what the follower has (`commit_to` panics past the
    /// log's end); an append's entries follow its index, with terms as a log has them.
    fn admissible(&self, m: &Message) -> Result<(), &'static str> {
        use MessageType::*;
        let kind = m.get_msg_type();
        let from_peers = matches!(
            kind,
            MsgAppend
                | MsgAppendResponse
                | MsgRequestVote
                | MsgRequestVoteResponse
                | MsgRequestPreVote
                | MsgRequestPreVoteResponse
                | MsgSnapshot
                | MsgHeartbeat
                | MsgHeartbeatResponse
                | MsgTimeoutNow
        );
        if !from_peers {
            return Err("not a message Raft peers exchange");
        }
        if m.term == 0 {
            return Err("no term");
        }
        if kind == MsgHeartbeat && m.commit > self.node.raft.raft_log.last_index() {
            return Err("commit index past the end of the log");
        }
        if kind == MsgAppend {
            if !m.entries.iter().enumerate().all(|(i, e)| Some(e.index) == m.index.checked_add(i as u64 + 1)) {
                return Err("entries that do not follow the append's index");
            }
            // Every entry has a term, at most the leader's, and terms never go down along a
            // log; only the empty log's index 0 has term 0 (raft-rs reads an index past its
            // log as term 0, so a forged "after entry N of term 0" matched and then broke
            // its unstable log).
            if m.log_term > m.term || (m.index > 0 && m.log_term == 0) {
                return Err("an append after an entry of an impossible term");
            }
            let mut floor = m.log_term.max(1);
            for e in &m.entries {
                if e.term < floor || e.term > m.term {
                    return Err("entries whose terms go down or past the leader's");
                }
                floor = e.term;
            }
        }
        Ok(())
    }

    pub fn campaign(&mut self) -> raft::Result<()> {
        self.wake();
        self.node.campaign()
    }

    /// Leader only: proposes one configuration change made of `changes`. Several changes
    /// go through joint consensus, left automatically once applied.
    pub fn propose_membership(&mut self, changes: &[(ConfChangeType, u64)]) -> Result<(), ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader(self.leader()));
        }
        let mut cc = ConfChangeV2::default();
        cc.set_transition(ConfChangeTransition::Auto);
        cc.set_changes(
            changes
                .iter()
                .map(|(kind, id)| {
                    let mut c = ConfChangeSingle::default();
                    c.set_change_type(*kind);
                    c.node_id = *id;
                    c
                })
                .collect(),
        );
        self.wake();
        self.node.propose_conf_change(Vec::new(), cc).map_err(|e| match e {
            raft::Error::ProposalDropped => ProposeError::Busy,
            e => ProposeError::Invalid(e.to_string()),
        })
    }

    pub fn transfer_leader(&mut self, to: u64) {
        self.wake();
        self.node.transfer_leader(to)
    }

    /// Proposes a validated client batch. The leader checks idempotence against the log and
    /// against batches proposed but not yet written. The batch goes into the entry as it
    /// came (not copied): its offsets and leader epoch are stamped as the store writes it.
    pub fn propose_batch(&mut self, batch: Bytes, h: &BatchHeader) -> Result<Proposed, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader(self.leader()));
        }
        if h.is_control() {
            return Err(ProposeError::Invalid("control batches cannot be produced".into()));
        }
        let term = self.term();
        i32::try_from(term).map_err(|_| ProposeError::Invalid("term past i32".into()))?;
        let (next, pending) = self.pending();
        let store = self.node.store();
        if let Some((base, last)) = store.log().check_producer(h, &pending).map_err(ProposeError::Producer)? {
            let index =
                self.index_holding(base).ok_or_else(|| ProposeError::Invalid("duplicate's entry is gone".into()))?;
            let term = self.entry_term(index).unwrap_or(term);
            return Ok(Proposed { base_offset: base, last_offset: last, index, term, duplicate: true });
        }
        self.propose_raw(batch)?;
        let index = self.node.raft.raft_log.last_index();
        Ok(Proposed {
            base_offset: next,
            last_offset: next + h.last_offset_delta as i64,
            index,
            term,
            duplicate: false,
        })
    }

    /// Proposes a transaction marker ending `producer_id`'s transaction here. A marker from
    /// an epoch older than the producer's (in the log or proposed) is fenced.
    pub fn propose_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        end: TxnEnd,
        now_ms: i64,
    ) -> Result<Proposed, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader(self.leader()));
        }
        let term = self.term();
        i32::try_from(term).map_err(|_| ProposeError::Invalid("term past i32".into()))?;
        let (next, pending) = self.pending();
        let newer_pending = pending.iter().any(|p| p.producer_id == producer_id && p.producer_epoch > producer_epoch);
        if newer_pending {
            return Err(ProposeError::Producer(ProducerError::Fenced));
        }
        self.log().check_marker(producer_id, producer_epoch).map_err(ProposeError::Producer)?;
        let data = marker_batch(producer_id, producer_epoch, coordinator_epoch, end, now_ms);
        self.propose_raw(data.into())?;
        let index = self.node.raft.raft_log.last_index();
        Ok(Proposed { base_offset: next, last_offset: next, index, term, duplicate: false })
    }

    /// Whether the producer has a transaction open here at `epoch`: in the log, or by a
    /// transactional batch proposed and not yet written.
    pub fn in_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        let (_, pending) = self.pending();
        // The producer's last pending batch tells, if it has one: data opens, a marker closes.
        match pending.iter().rev().find(|h| h.producer_id == producer_id) {
            Some(h) => h.is_transactional() && !h.is_control() && h.producer_epoch == epoch,
            None => self.log().in_transaction(producer_id, epoch),
        }
    }

    /// Proposes DeleteRecords: once the entry commits, every replica moves its log start to
    /// `offset` (which the caller checked is at most the high watermark).
    pub fn propose_delete_records(&mut self, offset: i64) -> Result<Proposed, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader(self.leader()));
        }
        let term = self.term();
        i32::try_from(term).map_err(|_| ProposeError::Invalid("term past i32".into()))?;
        let (next, _) = self.pending();
        self.propose_raw(crate::store::delete_records_batch(offset).into())?;
        let index = self.node.raft.raft_log.last_index();
        Ok(Proposed { base_offset: next, last_offset: next, index, term, duplicate: false })
    }

    /// Time and size retention: moves the log start to where the log's policy allows,
    /// within what this replica has applied (committed entries only). Each replica decides
    /// for itself, as Kafka's replicas do; a follower that needs entries the leader has
    /// dropped gets a snapshot and restarts its log at the leader's start. Returns the new
    /// log start if it moved.
    pub fn enforce_retention(&mut self, now_ms: i64) -> io::Result<Option<i64>> {
        let applied = self.applied_index();
        let retained = self.node.mut_store().log_mut().retention_point(now_ms)?;
        let floor = Some(self.log_start_floor).filter(|f| *f > self.log().log_start_offset());
        let Some(point) = retained.max(floor) else { return Ok(None) };
        self.node.mut_store().trim(point, applied)
    }

    /// DeleteRecords decided outside the group (through the metadata log): the log start
    /// moves to `offset` now as far as this replica has applied, and the rest of the way as
    /// it applies more (each [`Replica::enforce_retention`]). Returns the new log start if it
    /// moved.
    pub fn raise_log_start(&mut self, offset: i64) -> io::Result<Option<i64>> {
        self.log_start_floor = self.log_start_floor.max(offset);
        let applied = self.applied_index();
        self.node.mut_store().trim(self.log_start_floor, applied)
    }

    /// A compaction pass over committed, applied entries, if the log's policy wants one.
    pub fn clean_plan(&self, now_ms: i64) -> Option<CleanPlan> {
        let store = self.node.store();
        let end = match store.end_offset_of(self.applied_index()) {
            Ok(end) => end,
            Err(e) => {
                tracing::warn!(dir = %store.dir().display(), error = %e, "no compaction: the log could not be read");
                return None;
            }
        };
        store.log().clean_plan(self.high_watermark.min(end), now_ms)
    }

    /// Swaps in a pass from [`Replica::clean_plan`] (see [`RaftLog::compact`]).
    pub fn clean_swap(&mut self, cleaned: Cleaned, now_ms: i64) -> io::Result<Option<CleanStats>> {
        let applied = self.applied_index();
        self.node.mut_store().compact(cleaned, applied, now_ms)
    }

    /// Proposes an internal record (the metadata group's), as a one-record batch.
    pub fn propose_record(&mut self, value: &[u8], now_ms: i64) -> Result<Proposed, ProposeError> {
        let mut b = runnel_wire::build::BatchBuilder::new(now_ms);
        b.push(now_ms, None, Some(value));
        let batch =
            b.finish(0, runnel_wire::build::ProducerFields::NONE).map_err(|e| ProposeError::Invalid(e.to_string()))?;
        let h = BatchHeader::parse(&batch).map_err(|e| ProposeError::Invalid(e.to_string()))?;
        self.propose_batch(batch.into(), &h)
    }

    /// Proposes an entry holding `data` (raft-rs's `propose` would take a `Vec`, and a
    /// client's batch would be copied into one).
    fn propose_raw(&mut self, data: Bytes) -> Result<(), ProposeError> {
        self.wake();
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgPropose);
        m.from = self.node.raft.id;
        m.set_entries(vec![Entry { data, ..Entry::default() }].into());
        match self.node.raft.step(m) {
            Ok(()) => Ok(()),
            Err(raft::Error::ProposalDropped) if self.is_leader() => Err(ProposeError::Busy),
            Err(_) => Err(ProposeError::NotLeader(self.leader())),
        }
    }

    /// The offset after every entry Raft holds (written or not), and the headers of the
    /// batches proposed but not yet written, with the offsets they will be written at (the
    /// store stamps them: an entry's batch holds what the client sent).
    fn pending(&self) -> (i64, Vec<BatchHeader>) {
        let (next, pending) = self.unwritten();
        (next, pending.into_iter().map(|(_, h)| h).collect())
    }

    /// [`Replica::pending`], each batch with its Raft index.
    fn unwritten(&self) -> (i64, Vec<(u64, BatchHeader)>) {
        let store = self.node.store();
        let mut next = store.log().log_end_offset();
        let mut batches = Vec::new();
        for e in self.node.raft.raft_log.unstable.entries.iter().filter(|e| e.index > store.last()) {
            match BatchHeader::parse(&e.data) {
                Ok(h) if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() => {
                    let h = BatchHeader { base_offset: next, ..h };
                    next = h.next_offset();
                    batches.push((e.index, h));
                }
                _ => next += 1,
            }
        }
        (next, batches)
    }

    /// Raft index of the entry whose batch starts at `offset` (written or pending).
    fn index_holding(&self, offset: i64) -> Option<u64> {
        let store = self.node.store();
        match store.index_of(offset) {
            Ok(Some(i)) => return Some(i),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(dir = %store.dir().display(), offset, error = %e, "could not find the entry holding an offset");
                return None;
            }
        }
        let (_, unwritten) = self.unwritten();
        unwritten
            .into_iter()
            .find(|(_, h)| h.base_offset <= offset && offset <= h.last_offset())
            .map(|(index, _)| index)
    }

    fn entry_term(&self, index: u64) -> Option<u64> {
        self.node.raft.raft_log.term(index).ok()
    }

    /// A receiver that yields true once the entry `index` of `term` is durable as asked,
    /// false if it never will be here (leadership lost, or the entry was replaced).
    pub fn wait(&mut self, index: u64, term: u64, durability: Durability) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        let w = Waiter { index, term, tx };
        match durability {
            Durability::Committed => insert_sorted(&mut self.commit_waiters, w),
            Durability::Local => insert_sorted(&mut self.local_waiters, w),
        }
        self.release_waiters();
        rx
    }

    /// First half of a ready: writes entries and hard state (no fsync), applies committed
    /// entries, and puts messages that may leave now into `out`. Returns None when there
    /// was nothing to do; otherwise sync the log, then call [`Replica::persisted`].
    pub fn collect(&mut self, now_ms: i64, out: &mut Vec<Message>) -> io::Result<Option<Collected>> {
        if !self.node.has_ready() {
            return Ok(None);
        }
        let mut rd = self.node.ready();
        let messages = rd.take_messages();
        self.snapshots_sent(&messages);
        out.extend(messages);
        let snapshot_index = rd.snapshot().get_metadata().index;
        if !rd.snapshot().is_empty() {
            self.node.mut_store().apply_snapshot(rd.snapshot(), now_ms)?;
        }
        self.node.mut_store().append(rd.entries(), now_ms)?;
        let bytes = rd.entries().iter().map(|e| e.data.len() as u64).sum();
        if let Some(hs) = rd.hs() {
            self.node.mut_store().set_hard_state(hs.clone())?;
        }
        if let Some(ss) = rd.ss() {
            if ss.raft_state != StateRole::Leader {
                self.fail_waiters();
            } else {
                runnel_metrics::get().elections.inc();
                self.led_from = self.node.raft.raft_log.last_index();
                self.led_term = self.term();
            }
        }
        let committed = rd.take_committed_entries();
        let held = rd.take_persisted_messages();
        let number = rd.number();
        let must_sync = rd.must_sync();
        self.node.advance_append_async(rd);
        self.apply(committed)?;
        // Taken last: applying a configuration change rewrites the whole state, synced.
        let state = self.node.store().staged_state();
        Ok(Some(Collected {
            number,
            must_sync,
            bytes,
            last_index: self.node.store().last(),
            snapshot_index,
            held,
            state,
        }))
    }

    /// Puts the state a ready staged (and the caller synced) in place of the state file;
    /// returns the directory to sync before [`Replica::persisted`], if there was one.
    pub fn commit_staged_state(&mut self) -> io::Result<Option<PathBuf>> {
        self.node.mut_store().commit_staged_state()
    }

    /// Second half of a ready, after the caller synced the log. Returns true when the high
    /// watermark moved. A new term or vote the caller did not put in place with
    /// [`Replica::commit_staged_state`] (and a synced directory) is synced and put in place
    /// here, one replica at a time, before anything that depends on it is released.
    pub fn persisted(&mut self, c: Collected, out: &mut Vec<Message>) -> io::Result<bool> {
        self.node.mut_store().commit_staged_state_now()?;
        self.node.mut_store().mark_synced(c.last_index);
        self.node.on_persist_ready(c.number);
        if c.snapshot_index > self.applied_index() {
            // An installed snapshot counts as applied: Raft expects every entry between the
            // applied and the commit index to be readable, and those are gone.
            self.node.advance_apply_to(c.snapshot_index);
        }
        self.snapshots_sent(&c.held);
        out.extend(c.held);
        Ok(self.release_waiters())
    }

    /// A snapshot is only a log start (the entries before it are gone everywhere that
    /// sent it), so it is as good as delivered once sent. Reporting it at once takes the
    /// follower's progress out of the snapshot state; if the message was lost, the next
    /// heartbeat response shows the follower still behind and another goes out. Without
    /// the report, a lost snapshot would stall that follower for good.
    fn snapshots_sent(&mut self, messages: &[Message]) {
        for m in messages {
            if m.get_msg_type() == MessageType::MsgSnapshot {
                self.node.report_snapshot(m.to, SnapshotStatus::Finish);
            }
        }
    }

    fn apply(&mut self, committed: Vec<Entry>) -> io::Result<()> {
        let Some(last) = committed.last().map(|e| e.index) else { return Ok(()) };
        for e in committed {
            match e.get_entry_type() {
                EntryType::EntryConfChange => {
                    let cc: ConfChange = protobuf::Message::parse_from_bytes(&e.data).map_err(io::Error::other)?;
                    let cs = self.node.apply_conf_change(&cc).map_err(|e| io::Error::other(e.to_string()))?;
                    self.node.mut_store().set_conf_state(e.index, cs)?;
                }
                EntryType::EntryConfChangeV2 => {
                    let cc: ConfChangeV2 = protobuf::Message::parse_from_bytes(&e.data).map_err(io::Error::other)?;
                    let cs = self.node.apply_conf_change(&cc).map_err(|e| io::Error::other(e.to_string()))?;
                    self.node.mut_store().set_conf_state(e.index, cs)?;
                }
                EntryType::EntryNormal if self.deliver_committed && !e.data.is_empty() => self.applied.push(e),
                EntryType::EntryNormal => {
                    if let Some(offset) = crate::store::delete_records_of(&e) {
                        self.node.mut_store().trim(offset, e.index)?;
                    }
                }
            }
        }
        self.node.mut_store().set_commit(last);
        self.node.mut_store().applied_to(last);
        self.node.advance_apply_to(last);
        Ok(())
    }

    /// Committed entries with data since the last call (only with `deliver_committed`).
    pub fn take_applied(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.applied)
    }

    /// Moves the high watermark and answers waiters whose entries are now durable.
    fn release_waiters(&mut self) -> bool {
        // And Raft's persisted index: a round syncing may cover entries Raft replaced (rounds.rs).
        let synced = self.node.store().synced_index().min(self.node.raft.raft_log.persisted);
        let durable = self.node.raft.raft_log.committed.min(synced);
        // Entries past the durable point are never settled, so this reads no disk.
        let hw =
            self.node.store().end_offset_in_memory(durable).expect("the offsets of unsettled entries are in memory");
        let moved = hw > self.high_watermark;
        self.high_watermark = self.high_watermark.max(hw);
        if moved {
            let hw = self.high_watermark;
            self.node.mut_store().log_mut().settle_transactions(hw);
        }
        self.durable_index = self.durable_index.max(durable);
        for (queue, upto) in [(&mut self.commit_waiters, durable), (&mut self.local_waiters, synced)] {
            while queue.front().is_some_and(|w| w.index <= upto) {
                let w = queue.pop_front().expect("front exists");
                let same = self.node.raft.raft_log.term(w.index).ok() == Some(w.term);
                let _ = w.tx.send(same);
            }
        }
        moved
    }

    /// Leadership was lost: entries proposed here may or may not commit under the next
    /// leader, so their producers are told to retry (idempotence removes duplicates).
    fn fail_waiters(&mut self) {
        for w in self.commit_waiters.drain(..).chain(self.local_waiters.drain(..)) {
            let _ = w.tx.send(false);
        }
    }

    /// Clean shutdown: commit index and log checkpoint to disk.
    pub fn close(&mut self) -> io::Result<()> {
        self.fail_waiters();
        self.node.mut_store().close()
    }

    /// [`Replica::close`] in steps, for many replicas at once (see [`RaftLog::close_stage`]):
    /// returns the files to sync before [`Replica::close_commit`].
    pub fn close_stage(&mut self) -> io::Result<Vec<Arc<File>>> {
        self.fail_waiters();
        self.node.mut_store().close_stage()
    }

    /// Returns the directory to sync last, if a file was put in place there.
    pub fn close_commit(&mut self) -> io::Result<Option<PathBuf>> {
        self.node.mut_store().close_commit()
    }
}

fn insert_sorted(queue: &mut VecDeque<Waiter>, w: Waiter) {
    let at = queue.partition_point(|x| x.index <= w.index);
    queue.insert(at, w);
}
