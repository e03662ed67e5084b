//! Quiescence: an idle group sends nothing. Without it every group's leader heartbeats its
//! followers three times a second whether or not anything is written, and with ten
//! thousand partitions the brokers spend most of a core on groups with nothing to do.
//!
//! A leader goes quiet when its whole log is committed, on its own disk and acknowledged by
//! every member (voters and learners) whose broker is live (the driver's
//! [`Liveness`](crate::liveness::Liveness) says so) and by a majority of the voters, nothing
//! is pending here (a proposal, a waiter, a configuration change, a leadership transfer, a
//! read), and every member whose broker is gone is out of the in-sync replicas already
//! (CockroachDB's ranges quiesce with dead replicas the same way). A member whose broker
//! comes back wakes the leader. It then sends each member one last heartbeat whose context
//! is [`QUIESCE`], and its clocks stop. A follower that steps that heartbeat from its
//! leader, having then committed all the leader's log, stops its clocks too. Raft echoes the
//! context in the answer, which leaves the leader quiet.
//!
//! Anything else wakes a replica: any other message, a proposal, a campaign, a
//! configuration change, a leadership transfer. A quiet group whose peer broker dies is
//! woken by the driver, which pings the brokers it shares groups with (CockroachDB and
//! TiKV keep quiet ranges the same way): a follower whose leader's broker went silent
//! campaigns as if the leader's heartbeats had stopped an election timeout ago, and a
//! leader whose follower's broker went silent ticks again, so that its in-sync replicas
//! shrink and check-quorum still works, and goes quiet again without it. A follower stays
//! quiet when another follower's broker goes: its leader still stands, and sends nothing to
//! wake its clock back up. The metadata group never goes quiet.

use raft::eraftpb::{Message, MessageType};
use raft::StateRole;

use super::Replica;

/// The context of a leader's last heartbeat before its group goes quiet (and of the
/// answers, which Raft echoes).
pub const QUIESCE: &[u8] = b"runnel.quiesce";

/// How a stepped message bears on quiescence.
pub(super) enum Quiesce {
    /// The leader's last heartbeat, with the leader's whole log committed: the follower may
    /// go quiet.
    Heartbeat { commit: u64 },
    /// A follower's answer to it: the leader stays as it is.
    Answer,
    /// Anything else: the replica wakes.
    Other,
}

impl Replica {
    /// The group's clocks stand (see the module doc).
    pub fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// The replica goes quiet when idle ([`crate::ReplicaConfig::quiesce`]).
    pub fn may_quiesce(&self) -> bool {
        self.may_quiesce
    }

    /// The clocks run again from where they stopped.
    pub fn wake(&mut self) {
        self.quiet = false;
    }

    /// The broker of `peer` went silent or restarted. A quiet leader with `peer` among its
    /// members wakes, and ticks again. A follower wakes only when `peer` leads it (or it
    /// knows no leader), and then campaigns as if its heartbeats had stopped an election
    /// timeout ago (its election clock still randomized): a follower that woke for another
    /// member's sake would find its quiet leader silent and start an election for nothing.
    /// Returns whether the replica woke.
    pub fn peer_gone(&mut self, peer: u64) -> bool {
        if !self.has_member(peer) {
            return false;
        }
        let raft = &mut self.node.raft;
        if raft.state != StateRole::Leader {
            if raft.leader_id != peer && raft.leader_id != raft::INVALID_ID {
                return false;
            }
            raft.election_elapsed = raft.election_elapsed.max(raft.election_timeout());
        }
        self.wake();
        true
    }

    /// The broker of `peer` is heard from again after it went silent, without a restart
    /// (a network partition healed, a paused process resumed). A quiet leader with `peer`
    /// among its members wakes: it may have gone quiet without it, which may now be behind
    /// and is out of the in-sync replicas. Returns whether the replica woke.
    pub fn peer_back(&mut self, peer: u64) -> bool {
        if !self.is_leader() || !self.has_member(peer) {
            return false;
        }
        self.wake();
        true
    }

    /// `peer` is a voter or a learner of the group as this replica knows it.
    pub fn has_member(&self, peer: u64) -> bool {
        let conf = self.node.raft.prs().conf();
        conf.voters().contains(peer) || conf.learners().contains(&peer)
    }

    /// Leader: when the group is idle, goes quiet and puts its last heartbeat to each member
    /// into `out`. Returns whether it went quiet.
    ///
    /// Idle: every member whose broker is `live` has the whole log, and so does a majority
    /// of the voters. A member whose broker is gone is left out once it is out of the
    /// in-sync replicas (not heard from for twice the election timeout), so the in-sync set
    /// the quiet group keeps is right; it wakes the leader when it is back
    /// ([`Replica::peer_back`], or [`Replica::peer_gone`] after a restart).
    pub fn quiesce(&mut self, live: impl Fn(u64) -> bool, out: &mut Vec<Message>) -> bool {
        if !self.may_quiesce || self.quiet || !self.idle_leader() {
            return false;
        }
        let raft = &self.node.raft;
        let (me, last) = (self.id(), raft.raft_log.last_index());
        let voters = raft.prs().conf().voters().ids();
        let mut caught_up_voters = 0;
        for (id, p) in raft.prs().iter() {
            if *id == me || (p.matched == last && live(*id)) {
                caught_up_voters += usize::from(voters.contains(*id));
            } else if live(*id) || self.heard_lately(*id) {
                return false;
            }
        }
        if caught_up_voters <= voters.len() / 2 {
            return false;
        }
        let term = raft.term;
        for (id, p) in raft.prs().iter().filter(|(id, _)| **id != me) {
            // What the member is known to share with this log, as Raft's own heartbeats
            // carry: a member left out while gone may hold other entries past it, which a
            // commit index of `last` would have it take for committed.
            let commit = p.matched.min(last);
            let mut m = Message { to: *id, from: me, term, commit, ..Default::default() };
            m.set_msg_type(MessageType::MsgHeartbeat);
            m.context = QUIESCE.to_vec().into();
            out.push(m);
        }
        self.quiet = true;
        true
    }

    /// A leader with its whole log committed and on its disk, and nothing in flight.
    fn idle_leader(&self) -> bool {
        let raft = &self.node.raft;
        let last = raft.raft_log.last_index();
        self.is_leader()
            && !self.node.has_ready()
            && raft.raft_log.committed == last
            && self.node.store().synced_index() == last
            && self.durable_index == last
            && self.commit_waiters.is_empty()
            && self.local_waiters.is_empty()
            && raft.lead_transferee.is_none()
            && !raft.has_pending_conf()
            && raft.read_only.pending_read_count() == 0
            && self.node.store().conf_state().voters_outgoing.is_empty()
    }

    /// After stepping a message from `from`: a follower that stepped its leader's last
    /// heartbeat and has committed the leader's whole log goes quiet; anything else but an
    /// answer to such a heartbeat wakes the replica.
    ///
    /// Entries past the leader's log do not keep a follower awake: a follower that led an
    /// earlier term may keep entries of that term no one else has, until the leader's next
    /// entry replaces them (Raft §5.3), and the leader, which counts the follower as caught
    /// up, goes quiet. Kept awake, the follower would find its leader silent and ask for
    /// votes every election timeout, in vain: its log is behind the leader's.
    pub(super) fn after_step(&mut self, q: Quiesce, from: u64) {
        let raft = &self.node.raft;
        match q {
            Quiesce::Answer => {}
            Quiesce::Heartbeat { commit } => {
                self.quiet = self.may_quiesce
                    && raft.state == StateRole::Follower
                    && raft.leader_id == from
                    && raft.raft_log.committed >= commit;
            }
            Quiesce::Other => self.quiet = false,
        }
    }
}

impl Quiesce {
    pub(super) fn of(m: &Message) -> Quiesce {
        match m.get_msg_type() {
            _ if *m.context != *QUIESCE => Quiesce::Other,
            MessageType::MsgHeartbeat => Quiesce::Heartbeat { commit: m.commit },
            MessageType::MsgHeartbeatResponse => Quiesce::Answer,
            _ => Quiesce::Other,
        }
    }
}
