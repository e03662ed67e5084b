//! A group's members as its leader sees them: who is alive, caught up, how far each has
//! replicated; and the configuration as applied.

use super::Replica;

/// One member of a group as its leader sees it ([`Replica::members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// A voter, else a learner.
    pub voter: bool,
    /// The last entry it has acknowledged (the leader: its last entry).
    pub matched: u64,
    /// Ticks since it was last heard from, and since it last had every committed entry
    /// (None: not since this replica led).
    pub heard_ticks_ago: Option<u64>,
    pub caught_up_ticks_ago: Option<u64>,
}

impl Replica {
    /// Leader only: every member of the group (voters, then learners) with what it has
    /// acknowledged, as DescribeQuorum shows it. Empty elsewhere.
    pub fn members(&self) -> Vec<Member> {
        if !self.is_leader() {
            return Vec::new();
        }
        let raft = &self.node.raft;
        let conf = raft.prs().conf();
        let mut ids: Vec<(u64, bool)> = conf.voters().ids().iter().map(|id| (id, true)).collect();
        ids.sort();
        let mut learners: Vec<u64> = conf.learners().iter().copied().collect();
        learners.sort();
        ids.extend(learners.into_iter().map(|id| (id, false)));
        let ago = |at: Option<&u64>| at.map(|t| self.ticks.saturating_sub(*t));
        ids.into_iter()
            .map(|(id, voter)| {
                if id == self.id() {
                    let last = raft.raft_log.last_index();
                    return Member { id, voter, matched: last, heard_ticks_ago: Some(0), caught_up_ticks_ago: Some(0) };
                }
                Member {
                    id,
                    voter,
                    matched: raft.prs().get(id).map_or(0, |p| p.matched),
                    heard_ticks_ago: ago(self.heard.get(&id)),
                    caught_up_ticks_ago: ago(self.catch_up.get(&id).map(|(at, _)| at).filter(|at| **at != u64::MAX)),
                }
            })
            .collect()
    }

    /// Leader only: `peer` is a voter that answered recently and lacks at most `lag` of the
    /// leader's entries (with 0: a leadership transfer to it completes at once; with a few,
    /// after one round of appends, while proposals wait).
    pub fn has_everything(&self, peer: u64, lag: u64) -> bool {
        let raft = &self.node.raft;
        self.is_leader()
            && raft.prs().conf().voters().contains(peer)
            && raft.prs().get(peer).is_some_and(|p| p.recent_active && p.matched + lag >= raft.raft_log.last_index())
    }

    /// Leader only: `peer` is a voter that answered recently (it may still lack entries).
    pub fn voter_active(&self, peer: u64) -> bool {
        let raft = &self.node.raft;
        self.is_leader()
            && raft.prs().conf().voters().contains(peer)
            && raft.prs().get(peer).is_some_and(|p| p.recent_active)
    }

    /// Leader only: `peer` (voter or learner) has acknowledged entries, answered recently,
    /// and is within `lag` entries of the leader's log. (A replica just added counts as
    /// recently active and has matched nothing: it is not caught up until it answers.)
    pub fn caught_up(&self, peer: u64, lag: u64) -> bool {
        let raft = &self.node.raft;
        self.is_leader()
            && raft
                .prs()
                .get(peer)
                .is_some_and(|p| p.recent_active && p.matched > 0 && p.matched + lag >= raft.raft_log.last_index())
    }

    /// Leader only: for each voter heard from within twice the election timeout (the
    /// leader itself included), the offset one past the entries it has acknowledged. A
    /// voter that is far behind (its acknowledged entries no longer tracked one by one in
    /// memory) is left out, so this never reads the disk.
    pub fn voter_ends(&self) -> Vec<(u64, i64)> {
        let raft = &self.node.raft;
        if !self.is_leader() {
            return Vec::new();
        }
        let store = self.node.store();
        let me = self.id();
        let alive = |id: u64| id == me || self.heard_lately(id);
        raft.prs()
            .iter()
            .filter(|(id, _)| raft.prs().conf().voters().contains(**id) && alive(**id))
            .filter(|(id, p)| p.matched > 0 || **id == me)
            .filter_map(|(id, p)| {
                let matched = if *id == self.id() { store.last() } else { p.matched };
                store.end_offset_in_memory(matched).map(|end| (*id, end))
            })
            .collect()
    }

    /// `id` was heard from within twice the election timeout (in this replica's ticks).
    pub(super) fn heard_lately(&self, id: u64) -> bool {
        self.heard.get(&id).is_some_and(|t| self.ticks.saturating_sub(*t) <= self.silent_after_ticks)
    }

    /// The group's configuration as applied: (voters, learners, joint).
    pub fn membership(&self) -> (Vec<u64>, Vec<u64>, bool) {
        let conf = self.node.store().conf_state();
        (conf.voters.clone(), conf.learners.clone(), !conf.voters_outgoing.is_empty())
    }

    /// A configuration change was proposed and is not applied yet.
    pub fn has_pending_conf(&self) -> bool {
        self.node.raft.has_pending_conf()
    }

    /// Leader only: the voters in sync, Kafka's ISR: this replica, and every voter heard
    /// from within twice the election timeout that was caught up within `lag_ticks`
    /// (`replica.lag.time.max.ms`). Empty elsewhere.
    pub fn in_sync(&self, lag_ticks: u64) -> Vec<u64> {
        if !self.is_leader() {
            return Vec::new();
        }
        let me = self.id();
        let within =
            |at: Option<&u64>, ticks: u64| at.is_some_and(|t| *t != u64::MAX && self.ticks.saturating_sub(*t) <= ticks);
        let mut ids: Vec<u64> = self
            .node
            .raft
            .prs()
            .conf()
            .voters()
            .ids()
            .iter()
            .filter(|id| {
                *id == me || (self.heard_lately(*id) && within(self.catch_up.get(id).map(|(at, _)| at), lag_ticks))
            })
            .collect();
        ids.sort_unstable();
        ids
    }
}
