//! One consumer group under the classic protocol, as Kafka's GroupCoordinator runs it:
//! Empty → PreparingRebalance (members (re)join) → CompletingRebalance (the leader computes
//! the assignment) → Stable, with generation fencing, session timeouts, KIP-394 member ids,
//! and KIP-345 static membership.
//!
//! No I/O and no locks here: the coordinator calls these methods under its lock; replies to
//! parked JoinGroup/SyncGroup requests go through oneshot channels stored on the members.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;
use tokio::sync::oneshot;

use crate::records::{GroupValue, MemberValue, OffsetValue};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    /// The names Kafka reports in DescribeGroups and ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: (member id, instance id, metadata of the chosen protocol).
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// KIP-814: a returning static leader must not compute a new assignment.
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(code: E, member_id: &str) -> JoinResult {
        JoinResult { error: code.code(), generation: -1, member_id: member_id.to_string(), ..Default::default() }
    }
}

#[derive(Debug, Clone, Default)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(code: E) -> SyncResult {
        SyncResult { error: code.code(), ..Default::default() }
    }
}

pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a first join without a member id gets MEMBER_ID_REQUIRED (KIP-394).
    pub require_known_member_id: bool,
}

pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    join_waiter: Option<oneshot::Sender<JoinResult>>,
    sync_waiter: Option<oneshot::Sender<SyncResult>>,
    last_seen: Instant,
    /// Join order: the longest-standing member leads, as in Kafka.
    joined: u64,
}

impl Member {
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }
}

/// What a join or sync call leads to: an answer now, or a wait for the rebalance.
pub enum Pending<T> {
    Now(T),
    Wait(oneshot::Receiver<T>),
}

pub struct Group {
    pub id: String,
    pub state: State,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined, with when they
    /// expire (the session timeout of the join that got them, as in Kafka).
    pending: HashMap<String, Instant>,
    /// group.instance.id → member id (KIP-345).
    static_members: HashMap<String, String>,
    pub offsets: BTreeMap<(String, i32), OffsetValue>,
    /// Offsets committed in producers' open transactions (TxnOffsetCommit), by producer id:
    /// they replace `offsets` when the transaction commits, and go when it aborts.
    pub txn_offsets: HashMap<i64, BTreeMap<(String, i32), OffsetValue>>,
    join_not_before: Instant,
    rebalance_deadline: Instant,
    pub state_timestamp: i64,
    next_join_seq: u64,
    /// OffsetCommits checked but not yet applied; offset expiry leaves the group alone
    /// meanwhile so a commit and an expiry tombstone never cross in the log.
    pub pending_commits: u32,
}

pub struct Timing {
    pub initial_rebalance_delay: Duration,
    pub now: Instant,
    pub now_ms: i64,
}

impl Group {
    pub fn new(id: &str, now: Instant) -> Group {
        Group {
            id: id.to_string(),
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            static_members: HashMap::new(),
            offsets: BTreeMap::new(),
            txn_offsets: HashMap::new(),
            join_not_before: now,
            rebalance_deadline: now,
            state_timestamp: 0,
            next_join_seq: 0,
            pending_commits: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member ids handed out (KIP-394) whose join has not come yet.
    pub fn has_pending_members(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Protocols every member supports (all of the candidate's when the group is empty).
    fn common_protocols<'a>(&'a self, candidate: &'a [(String, Bytes)]) -> Vec<&'a str> {
        candidate
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == n)))
            .collect()
    }

    fn check_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), E> {
        if let Some(inst) = instance_id {
            if let Some(owner) = self.static_members.get(inst) {
                if owner != member_id {
                    return Err(E::FencedInstanceId);
                }
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(E::UnknownMemberId);
        }
        Ok(())
    }

    /// A JoinGroup. A new member finds room only while the group has fewer than
    /// `max_size` members and member ids handed out (`group.max.size`).
    pub fn join(&mut self, req: JoinRequest, t: &Timing, max_size: usize) -> Pending<JoinResult> {
        if !self.is_empty() {
            let same_type = self.protocol_type.as_deref() == Some(req.protocol_type.as_str());
            if !same_type || self.common_protocols(&req.protocols).is_empty() {
                return Pending::Now(JoinResult::error(E::InconsistentGroupProtocol, &req.member_id));
            }
        }
        if req.member_id.is_empty() {
            let returning = req.instance_id.as_ref().is_some_and(|i| self.static_members.contains_key(i));
            if !returning && self.members.len() + self.pending.len() >= max_size {
                return Pending::Now(JoinResult::error(E::GroupMaxSizeReached, ""));
            }
            return self.join_new(req, t);
        }
        if let Some(inst) = &req.instance_id {
            if self.static_members.get(inst).is_some_and(|owner| owner != &req.member_id) {
                return Pending::Now(JoinResult::error(E::FencedInstanceId, &req.member_id));
            }
        }
        if self.pending.remove(&req.member_id).is_some() {
            return self.add_member(req.member_id.clone(), req, t);
        }
        let Some(member) = self.members.get_mut(&req.member_id) else {
            return Pending::Now(JoinResult::error(E::UnknownMemberId, &req.member_id));
        };
        member.last_seen = t.now;
        let changed = member.protocols != req.protocols;
        member.protocols = req.protocols;
        member.session_timeout_ms = req.session_timeout_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        let is_leader = self.leader.as_deref() == Some(req.member_id.as_str());
        match self.state {
            State::PreparingRebalance => self.park_join(&req.member_id, t),
            State::CompletingRebalance if !changed => Pending::Now(self.join_result(&req.member_id)),
            State::Stable if !changed && !is_leader => Pending::Now(self.join_result(&req.member_id)),
            _ => {
                self.prepare_rebalance(t);
                self.park_join(&req.member_id, t)
            }
        }
    }

    fn join_new(&mut self, req: JoinRequest, t: &Timing) -> Pending<JoinResult> {
        let new_id = format!("{}-{}", req.client_id, uuid::Uuid::new_v4());
        if let Some(inst) = req.instance_id.clone() {
            if let Some(old_id) = self.static_members.get(&inst).cloned() {
                return self.replace_static(old_id, new_id, req, t);
            }
            self.static_members.insert(inst, new_id.clone());
            return self.add_member(new_id, req, t);
        }
        if req.require_known_member_id {
            let expiry = t.now + Duration::from_millis(req.session_timeout_ms.max(0) as u64);
            self.pending.insert(new_id.clone(), expiry);
            return Pending::Now(JoinResult::error(E::MemberIdRequired, &new_id));
        }
        self.add_member(new_id, req, t)
    }

    /// A static member came back with a new member id: it takes the old one's place (the
    /// old id is fenced) and, in a stable group with unchanged protocols, keeps its
    /// assignment without a rebalance.
    fn replace_static(&mut self, old_id: String, new_id: String, req: JoinRequest, t: &Timing) -> Pending<JoinResult> {
        let Some(mut m) = self.members.remove(&old_id) else {
            return self.add_member(new_id, req, t);
        };
        if let Some(w) = m.join_waiter.take() {
            let _ = w.send(JoinResult::error(E::FencedInstanceId, &old_id));
        }
        if let Some(w) = m.sync_waiter.take() {
            let _ = w.send(SyncResult::error(E::FencedInstanceId));
        }
        let changed = m.protocols != req.protocols;
        m.id = new_id.clone();
        m.protocols = req.protocols;
        m.session_timeout_ms = req.session_timeout_ms;
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.last_seen = t.now;
        self.members.insert(new_id.clone(), m);
        if let Some(inst) = &req.instance_id {
            self.static_members.insert(inst.clone(), new_id.clone());
        }
        let previous_leader = self.leader.clone().unwrap_or_default();
        let was_leader = previous_leader == old_id;
        if was_leader {
            self.leader = Some(new_id.clone());
        }
        match self.state {
            // As Kafka answers it: the leader id from before the replacement (so a pre-v9
            // leader sees someone else's id and just syncs) and, for the leader, the
            // members with skip_assignment (v9, KIP-814). No rebalance.
            State::Stable if !changed => {
                let mut result = self.join_result(&new_id);
                result.leader = previous_leader;
                result.skip_assignment = was_leader;
                Pending::Now(result)
            }
            State::PreparingRebalance => self.park_join(&new_id, t),
            _ => {
                self.prepare_rebalance(t);
                self.park_join(&new_id, t)
            }
        }
    }

    fn add_member(&mut self, id: String, req: JoinRequest, t: &Timing) -> Pending<JoinResult> {
        if self.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        self.members.insert(
            id.clone(),
            Member {
                id: id.clone(),
                instance_id: req.instance_id,
                client_id: req.client_id,
                client_host: req.client_host,
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: req.protocols,
                assignment: Bytes::new(),
                join_waiter: None,
                sync_waiter: None,
                last_seen: t.now,
                joined: self.next_join_seq,
            },
        );
        self.next_join_seq += 1;
        if self.state != State::PreparingRebalance {
            self.prepare_rebalance(t);
        }
        self.park_join(&id, t)
    }

    fn park_join(&mut self, member_id: &str, t: &Timing) -> Pending<JoinResult> {
        let (tx, rx) = oneshot::channel();
        if let Some(m) = self.members.get_mut(member_id) {
            if let Some(old) = m.join_waiter.replace(tx) {
                let _ = old.send(JoinResult::error(E::UnknownMemberId, member_id));
            }
        }
        self.maybe_complete_join(t);
        Pending::Wait(rx)
    }

    fn prepare_rebalance(&mut self, t: &Timing) {
        if self.state == State::CompletingRebalance {
            for m in self.members.values_mut() {
                if let Some(w) = m.sync_waiter.take() {
                    let _ = w.send(SyncResult::error(E::RebalanceInProgress));
                }
            }
        }
        let delay = if self.state == State::Empty { t.initial_rebalance_delay } else { Duration::ZERO };
        let timeout = self.members.values().map(|m| m.rebalance_timeout_ms.max(0)).max().unwrap_or(0);
        self.state = State::PreparingRebalance;
        self.state_timestamp = t.now_ms;
        self.join_not_before = t.now + delay;
        self.rebalance_deadline = t.now + Duration::from_millis(timeout as u64).max(delay);
    }

    /// Completes the join phase once every member has rejoined (after the initial delay)
    /// or the rebalance timeout ran out; members that did not rejoin are dropped.
    pub fn maybe_complete_join(&mut self, t: &Timing) -> bool {
        if self.state != State::PreparingRebalance || t.now < self.join_not_before {
            return false;
        }
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        if !all_joined && t.now < self.rebalance_deadline {
            return false;
        }
        let gone: Vec<String> =
            self.members.values().filter(|m| m.join_waiter.is_none()).map(|m| m.id.clone()).collect();
        for id in gone {
            self.remove_member(&id);
        }
        self.generation += 1;
        self.state_timestamp = t.now_ms;
        if self.is_empty() {
            self.become_empty();
            return true;
        }
        self.protocol = self.select_protocol();
        if !self.leader.as_ref().is_some_and(|l| self.members.contains_key(l)) {
            self.leader = self.members.values().min_by_key(|m| m.joined).map(|m| m.id.clone());
        }
        self.state = State::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.last_seen = t.now;
                if let Some(w) = m.join_waiter.take() {
                    let _ = w.send(result);
                }
            }
        }
        true
    }

    fn become_empty(&mut self) {
        self.state = State::Empty;
        self.protocol = None;
        self.leader = None;
        self.protocol_type = if self.offsets.is_empty() { None } else { self.protocol_type.take() };
    }

    /// Each member votes for its most preferred protocol among those all support.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let common = self.common_protocols(&first.protocols);
        let mut votes: Vec<(usize, &str)> = common.iter().map(|c| (0, *c)).collect();
        for m in self.members.values() {
            if let Some((_, name)) = m.protocols.iter().find(|(n, _)| common.contains(&n.as_str())) {
                if let Some(v) = votes.iter_mut().find(|(_, c)| c == name) {
                    v.0 += 1;
                }
            }
        }
        votes.iter().enumerate().max_by_key(|(i, (n, _))| (*n, std::cmp::Reverse(*i))).map(|(_, (_, c))| c.to_string())
    }

    fn join_result(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members.values().map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol))).collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: 0,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader,
            member_id: member_id.to_string(),
            members,
            skip_assignment: false,
        }
    }

    /// SyncGroup. `Some(value)` in the result means the assignment is now stable and the
    /// group's metadata should be written to the log.
    pub fn sync(
        &mut self,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        t: &Timing,
    ) -> (Pending<SyncResult>, Option<GroupValue>) {
        if let Err(e) = self.check_member(member_id, instance_id) {
            return (Pending::Now(SyncResult::error(e)), None);
        }
        if generation != self.generation {
            return (Pending::Now(SyncResult::error(E::IllegalGeneration)), None);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen = t.now;
        }
        match self.state {
            State::Empty => (Pending::Now(SyncResult::error(E::UnknownMemberId)), None),
            State::PreparingRebalance => (Pending::Now(SyncResult::error(E::RebalanceInProgress)), None),
            State::Stable => (Pending::Now(self.sync_result(member_id)), None),
            State::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                if let Some(m) = self.members.get_mut(member_id) {
                    m.sync_waiter = Some(tx);
                }
                if self.leader.as_deref() != Some(member_id) {
                    return (Pending::Wait(rx), None);
                }
                let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                for m in self.members.values_mut() {
                    m.assignment = given.remove(&m.id).unwrap_or_default();
                }
                self.state = State::Stable;
                self.state_timestamp = t.now_ms;
                let ids: Vec<String> = self.members.keys().cloned().collect();
                for id in ids {
                    let result = self.sync_result(&id);
                    if let Some(w) = self.members.get_mut(&id).and_then(|m| m.sync_waiter.take()) {
                        let _ = w.send(result);
                    }
                }
                (Pending::Wait(rx), Some(self.value()))
            }
        }
    }

    fn sync_result(&self, member_id: &str) -> SyncResult {
        SyncResult {
            error: 0,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            assignment: self.members.get(member_id).map(|m| m.assignment.clone()).unwrap_or_default(),
        }
    }

    pub fn heartbeat(
        &mut self,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        t: &Timing,
    ) -> Result<(), E> {
        self.check_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(E::IllegalGeneration);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen = t.now;
        }
        match self.state {
            State::PreparingRebalance => Err(E::RebalanceInProgress),
            State::Empty => Err(E::UnknownMemberId),
            State::CompletingRebalance | State::Stable => Ok(()),
        }
    }

    /// LeaveGroup for one member (by member id, or by instance id when the id is empty).
    pub fn leave(&mut self, member_id: &str, instance_id: Option<&str>, t: &Timing) -> Result<(), E> {
        let id = match (member_id, instance_id) {
            ("", Some(inst)) => match self.static_members.get(inst) {
                Some(id) => id.clone(),
                None => return Err(E::UnknownMemberId),
            },
            (id, inst) => {
                self.check_member(id, inst)?;
                id.to_string()
            }
        };
        self.remove_member(&id);
        self.after_departure(t);
        Ok(())
    }

    fn remove_member(&mut self, id: &str) {
        if let Some(mut m) = self.members.remove(id) {
            if let Some(inst) = &m.instance_id {
                if self.static_members.get(inst).map(String::as_str) == Some(id) {
                    self.static_members.remove(inst);
                }
            }
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinResult::error(E::UnknownMemberId, id));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(E::UnknownMemberId));
            }
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
    }

    fn after_departure(&mut self, t: &Timing) {
        match self.state {
            State::Stable | State::CompletingRebalance => self.prepare_rebalance(t),
            State::PreparingRebalance => {}
            State::Empty => return,
        }
        self.maybe_complete_join(t);
    }

    /// Drops members whose session timed out; finishes a rebalance whose time ran out.
    /// Returns true when the group changed in a way worth persisting.
    pub fn tick(&mut self, t: &Timing) -> bool {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none() && m.sync_waiter.is_none())
            .filter(|m| t.now.duration_since(m.last_seen) > Duration::from_millis(m.session_timeout_ms.max(0) as u64))
            .map(|m| m.id.clone())
            .collect();
        // A member id handed out whose join never came (Kafka's pending member expiry).
        self.pending.retain(|_, expiry| *expiry > t.now);
        let departed = !expired.is_empty();
        for id in &expired {
            tracing::info!(group = %self.id, member = %id, "member session expired");
            self.remove_member(id);
        }
        if departed {
            self.after_departure(t);
        }
        self.maybe_complete_join(t) && self.state == State::Empty
    }

    /// The group's metadata as stored in the offsets log.
    pub fn value(&self) -> GroupValue {
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_timestamp: self.state_timestamp,
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: self.protocol.as_deref().map(|p| m.metadata(p)).unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Restores a group from its last stored metadata: a stable group with its members,
    /// who keep their session (they go on heartbeating), or an empty one.
    pub fn restore(&mut self, v: GroupValue, now: Instant) {
        self.generation = v.generation;
        self.protocol_type = (!v.protocol_type.is_empty()).then_some(v.protocol_type);
        self.protocol = v.protocol;
        self.leader = v.leader;
        self.state_timestamp = v.state_timestamp;
        self.members.clear();
        self.static_members.clear();
        for m in v.members {
            let protocol = self.protocol.clone().unwrap_or_default();
            if let Some(inst) = &m.group_instance_id {
                self.static_members.insert(inst.clone(), m.member_id.clone());
            }
            self.members.insert(
                m.member_id.clone(),
                Member {
                    id: m.member_id,
                    instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: vec![(protocol, m.subscription)],
                    assignment: m.assignment,
                    join_waiter: None,
                    sync_waiter: None,
                    last_seen: now,
                    joined: self.next_join_seq,
                },
            );
            self.next_join_seq += 1;
        }
        self.state = if self.members.is_empty() { State::Empty } else { State::Stable };
    }

    /// OffsetCommit's membership check (Kafka's rules): a simple consumer (generation -1,
    /// no member id) may commit while the group has no members; a member must be current.
    pub fn check_commit(&self, generation: i32, member_id: &str, instance_id: Option<&str>) -> Result<(), E> {
        if generation < 0 && member_id.is_empty() {
            return if self.is_empty() { Ok(()) } else { Err(E::UnknownMemberId) };
        }
        self.check_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(E::IllegalGeneration);
        }
        if self.state == State::CompletingRebalance {
            return Err(E::RebalanceInProgress);
        }
        Ok(())
    }

    /// Topics the members subscribe to, read from the consumer protocol metadata
    /// (version i16, then an array of topic names).
    pub fn subscribed_topics(&self) -> HashSet<String> {
        let mut out = HashSet::new();
        if self.protocol_type.as_deref() != Some("consumer") {
            return out;
        }
        for m in self.members.values() {
            let meta = match &self.protocol {
                Some(p) => m.metadata(p),
                None => m.protocols.first().map(|(_, b)| b.clone()).unwrap_or_default(),
            };
            out.extend(parse_subscription(&meta));
        }
        out
    }
}

fn parse_subscription(meta: &[u8]) -> Vec<String> {
    let mut topics = Vec::new();
    if meta.len() < 6 {
        return topics;
    }
    let n = i32::from_be_bytes([meta[2], meta[3], meta[4], meta[5]]);
    let mut at = 6usize;
    for _ in 0..n.max(0) {
        let Some(len) = meta.get(at..at + 2).map(|b| i16::from_be_bytes([b[0], b[1]])) else { break };
        at += 2;
        let Some(name) = meta.get(at..at + len.max(0) as usize) else { break };
        topics.push(String::from_utf8_lossy(name).into_owned());
        at += len.max(0) as usize;
    }
    topics
}
