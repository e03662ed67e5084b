//! A consumer-group member of the workload, speaking the classic group protocol as Kafka's
//! consumers do (eager rebalancing): find the coordinator, join, the leader assigns every
//! partition round-robin over the members, sync, fetch from the committed offsets, commit
//! what was read, heartbeat, and on a rebalance commit and rejoin.
//!
//! Each assignment a member receives reads under a new consumer id in the history, so the
//! per-consumer order checks hold within one assignment, and the group check (no offset
//! skipped by the group as a whole) sees every id the group used.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, FindCoordinatorRequest, GroupId, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use runnel_client::{topic_name, FIND_COORDINATOR_VERSION};
use tokio::sync::watch;

use crate::config::{ClientRegion, VerifyConfig};
use crate::fetch::fetch_round;
use crate::history::{in_region, Op, OpKind, Outcome, Poll};
use crate::router::Router;

/// Group consumers' ids in the history start here: member `g`'s `n`th assignment reads as
/// `GROUP_CONSUMER_BASE + g * 100_000 + n`.
pub const GROUP_CONSUMER_BASE: usize = 1_000_000;

const JOIN_GROUP_VERSION: i16 = 5;
const SYNC_GROUP_VERSION: i16 = 3;
const HEARTBEAT_VERSION: i16 = 3;
const LEAVE_GROUP_VERSION: i16 = 3;
const OFFSET_COMMIT_VERSION: i16 = 8;
const OFFSET_FETCH_VERSION: i16 = 7;

const SESSION_TIMEOUT_MS: i32 = 10_000;
const HEARTBEAT_EVERY: Duration = Duration::from_millis(1000);
const COMMIT_EVERY: Duration = Duration::from_millis(1000);

fn group_id(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_string()))
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A consumer-protocol message as it travels inside group requests: its version, then the
/// message encoded at that version.
fn encode_versioned<M: Encodable>(m: &M, version: i16) -> Option<Bytes> {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&version.to_be_bytes());
    m.encode(&mut buf, version).ok()?;
    Some(buf.freeze())
}

fn decode_assignment(mut data: Bytes) -> Option<ConsumerProtocolAssignment> {
    if data.len() < 2 {
        return None;
    }
    let version = i16::from_be_bytes([data[0], data[1]]);
    bytes::Buf::advance(&mut data, 2);
    ConsumerProtocolAssignment::decode(&mut data, version.min(3)).ok()
}

enum Heard {
    /// Still a member of the current generation.
    Fine,
    /// A rebalance (or our membership ended): commit what we can and join again.
    Rejoin,
    /// The coordinator moved or is unreachable: look for it again.
    Lost,
}

struct Member {
    cfg: Arc<VerifyConfig>,
    group: String,
    process: String,
    router: Router,
    t0: Instant,
    ops: Vec<Op>,
    coordinator: Option<String>,
    member_id: String,
    generation: i32,
}

impl Member {
    fn group(&self) -> GroupId {
        group_id(&self.group)
    }

    async fn find_coordinator(&mut self) -> Option<String> {
        if self.coordinator.is_none() {
            let req = FindCoordinatorRequest::default().with_key(str_bytes(&self.group)).with_key_type(0);
            if let Ok(r) = self.router.call_any(&req, FIND_COORDINATOR_VERSION).await {
                if r.error_code == 0 {
                    self.coordinator = Some(format!("{}:{}", r.host.as_str(), r.port));
                }
            }
        }
        self.coordinator.clone()
    }

    fn lose_coordinator(&mut self) {
        if let Some(c) = self.coordinator.take() {
            self.router.drop_conn(&c);
        }
    }

    /// Joins and syncs; the partitions assigned, or `None` (try again later).
    async fn join(&mut self) -> Option<Vec<i32>> {
        let coordinator = self.find_coordinator().await?;
        let subscription = ConsumerProtocolSubscription::default().with_topics(vec![str_bytes(&self.cfg.topic)]);
        let metadata = encode_versioned(&subscription, 0)?;
        let mut join = None;
        // From v4 a new member is first told its id (MEMBER_ID_REQUIRED) and joins again with it.
        for _ in 0..2 {
            let req = JoinGroupRequest::default()
                .with_group_id(self.group())
                .with_session_timeout_ms(SESSION_TIMEOUT_MS)
                .with_rebalance_timeout_ms(SESSION_TIMEOUT_MS)
                .with_member_id(str_bytes(&self.member_id))
                .with_protocol_type(str_bytes("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(str_bytes("range"))
                    .with_metadata(metadata.clone())]);
            let r = match self.router.call_at(&coordinator, &req, JOIN_GROUP_VERSION).await {
                Ok(r) => r,
                Err(_) => {
                    self.lose_coordinator();
                    return None;
                }
            };
            if r.error_code == ResponseError::MemberIdRequired.code() {
                self.member_id = r.member_id.to_string();
                continue;
            }
            if r.error_code != 0 {
                self.after_error(r.error_code);
                return None;
            }
            join = Some(r);
            break;
        }
        let join = join?;
        self.member_id = join.member_id.to_string();
        self.generation = join.generation_id;
        let mut assignments = Vec::new();
        if join.leader == join.member_id {
            let mut members: Vec<String> = join.members.iter().map(|m| m.member_id.to_string()).collect();
            members.sort();
            let mut plan: BTreeMap<String, Vec<i32>> = members.iter().map(|m| (m.clone(), Vec::new())).collect();
            for p in 0..self.cfg.partitions {
                let m = &members[p as usize % members.len().max(1)];
                plan.entry(m.clone()).or_default().push(p);
            }
            for (m, parts) in plan {
                let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![TopicPartition::default()
                    .with_topic(topic_name(&self.cfg.topic))
                    .with_partitions(parts)]);
                assignments.push(
                    SyncGroupRequestAssignment::default()
                        .with_member_id(str_bytes(&m))
                        .with_assignment(encode_versioned(&a, 0)?),
                );
            }
        }
        let req = SyncGroupRequest::default()
            .with_group_id(self.group())
            .with_generation_id(self.generation)
            .with_member_id(str_bytes(&self.member_id))
            .with_assignments(assignments);
        let r = match self.router.call_at(&coordinator, &req, SYNC_GROUP_VERSION).await {
            Ok(r) => r,
            Err(_) => {
                self.lose_coordinator();
                return None;
            }
        };
        if r.error_code != 0 {
            self.after_error(r.error_code);
            return None;
        }
        let a = decode_assignment(r.assignment)?;
        let mut mine: Vec<i32> = a
            .assigned_partitions
            .iter()
            .filter(|t| t.topic.as_str() == self.cfg.topic)
            .flat_map(|t| t.partitions.iter().copied())
            .collect();
        mine.sort();
        Some(mine)
    }

    fn after_error(&mut self, code: i16) {
        match ResponseError::try_from_code(code) {
            Some(ResponseError::UnknownMemberId | ResponseError::FencedInstanceId) => self.member_id.clear(),
            Some(ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable) => self.lose_coordinator(),
            _ => {}
        }
    }

    /// The committed offsets of `partitions` (0 where nothing is committed), or `None`.
    async fn committed(&mut self, partitions: &[i32]) -> Option<BTreeMap<i32, i64>> {
        let coordinator = self.find_coordinator().await?;
        let req = OffsetFetchRequest::default().with_group_id(self.group()).with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic_name(&self.cfg.topic))
                .with_partition_indexes(partitions.to_vec()),
        ]));
        let r = match self.router.call_at(&coordinator, &req, OFFSET_FETCH_VERSION).await {
            Ok(r) => r,
            Err(_) => {
                self.lose_coordinator();
                return None;
            }
        };
        if r.error_code != 0 {
            self.after_error(r.error_code);
            return None;
        }
        let mut out: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
        for t in &r.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    self.after_error(p.error_code);
                    return None;
                }
                if p.committed_offset >= 0 {
                    out.insert(p.partition_index, p.committed_offset);
                }
            }
        }
        Some(out)
    }

    /// Commits `position`; true when every partition's commit was accepted.
    async fn commit(&mut self, position: &BTreeMap<i32, i64>) -> bool {
        if position.is_empty() {
            return true;
        }
        let Some(coordinator) = self.find_coordinator().await else { return false };
        let req = OffsetCommitRequest::default()
            .with_group_id(self.group())
            .with_generation_id_or_member_epoch(self.generation)
            .with_member_id(str_bytes(&self.member_id))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic_name(&self.cfg.topic))
                .with_partitions(
                    position
                        .iter()
                        .map(|(p, o)| {
                            OffsetCommitRequestPartition::default().with_partition_index(*p).with_committed_offset(*o)
                        })
                        .collect(),
                )]);
        let began = Instant::now();
        let answer = self.router.call_at(&coordinator, &req, OFFSET_COMMIT_VERSION).await;
        let outcome = match &answer {
            Err(_) => Outcome::Unknown,
            Ok(r) => {
                let codes: Vec<i16> = r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect();
                match codes.iter().find(|c| **c != 0) {
                    None => Outcome::Ok,
                    Some(code) => {
                        self.after_error(*code);
                        Outcome::Failed
                    }
                }
            }
        };
        if answer.is_err() {
            self.lose_coordinator();
        }
        self.ops.push(Op {
            kind: OpKind::Commit,
            process: self.process.clone(),
            start_ms: began.duration_since(self.t0).as_millis() as u64,
            latency_ms: began.elapsed().as_millis() as u64,
            outcome,
        });
        outcome == Outcome::Ok
    }

    async fn heartbeat(&mut self) -> Heard {
        let Some(coordinator) = self.find_coordinator().await else { return Heard::Lost };
        let req = HeartbeatRequest::default()
            .with_group_id(self.group())
            .with_generation_id(self.generation)
            .with_member_id(str_bytes(&self.member_id));
        match self.router.call_at(&coordinator, &req, HEARTBEAT_VERSION).await {
            Err(_) => {
                self.lose_coordinator();
                Heard::Lost
            }
            Ok(r) if r.error_code == 0 => Heard::Fine,
            Ok(r) => match ResponseError::try_from_code(r.error_code) {
                Some(ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable) => {
                    self.lose_coordinator();
                    Heard::Lost
                }
                Some(ResponseError::CoordinatorLoadInProgress) => Heard::Lost,
                _ => {
                    self.after_error(r.error_code);
                    Heard::Rejoin
                }
            },
        }
    }

    async fn leave(&mut self) {
        let Some(coordinator) = self.coordinator.clone() else { return };
        if self.member_id.is_empty() {
            return;
        }
        let req = LeaveGroupRequest::default()
            .with_group_id(self.group())
            .with_members(vec![MemberIdentity::default().with_member_id(str_bytes(&self.member_id))]);
        let _ = self.router.call_at(&coordinator, &req, LEAVE_GROUP_VERSION).await;
    }
}

/// What a group member did: its polls, its timeline, the consumer ids it read under, and
/// the bytes it read per broker region.
pub type MemberRun = (Vec<Poll>, Vec<Op>, BTreeSet<usize>, BTreeMap<String, u64>);

/// Member `index` of group `group`, running in `region`: reads its assignments until `stop`
/// (or `deadline`).
pub async fn member(
    cfg: Arc<VerifyConfig>,
    index: usize,
    group: String,
    region: Option<ClientRegion>,
    mut stop: watch::Receiver<bool>,
    t0: Instant,
    deadline: Instant,
) -> MemberRun {
    let process = in_region(format!("group-{index}"), region.as_ref());
    let router = Router::new(&cfg.bootstrap, &cfg.topic, &format!("runnel-verify-{process}"), cfg.request_timeout)
        .in_region(region.as_ref(), &cfg.broker_regions);
    let mut m = Member {
        cfg: cfg.clone(),
        group,
        process: process.clone(),
        router,
        t0,
        ops: Vec::new(),
        coordinator: None,
        member_id: String::new(),
        generation: -1,
    };
    let mut polls = Vec::new();
    let mut ids = BTreeSet::new();
    let mut incarnation = 0usize;
    // `None`: not in a generation (join next).
    let mut position: Option<BTreeMap<i32, i64>> = None;
    let mut consumer = 0usize;
    let mut last_heartbeat = Instant::now();
    let mut last_commit = Instant::now();
    while !*stop.borrow_and_update() && Instant::now() < deadline {
        let Some(pos) = position.as_mut() else {
            let assigned = match m.join().await {
                Some(a) => a,
                None => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            match m.committed(&assigned).await {
                Some(from) => {
                    consumer = GROUP_CONSUMER_BASE + index * 100_000 + incarnation;
                    incarnation += 1;
                    ids.insert(consumer);
                    position = Some(from);
                    last_heartbeat = Instant::now();
                    last_commit = Instant::now();
                }
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
            continue;
        };
        if pos.is_empty() {
            // More members than partitions: nothing to read, only stay in the group.
            tokio::time::sleep(Duration::from_millis(200)).await;
        } else {
            let mut records = Vec::new();
            fetch_round(&mut m.router, &cfg.topic, pos, &mut records, &process, t0, &mut m.ops, cfg.transactional)
                .await;
            if !records.is_empty() {
                polls.push(Poll { consumer, records });
            }
        }
        let snapshot = pos.clone();
        if last_commit.elapsed() >= COMMIT_EVERY {
            last_commit = Instant::now();
            m.commit(&snapshot).await;
        }
        if last_heartbeat.elapsed() >= HEARTBEAT_EVERY {
            last_heartbeat = Instant::now();
            match m.heartbeat().await {
                Heard::Fine | Heard::Lost => {}
                Heard::Rejoin => {
                    // As an eager consumer does before giving up its partitions.
                    m.commit(&snapshot).await;
                    position = None;
                }
            }
        }
    }
    if let Some(pos) = position.clone() {
        m.commit(&pos).await;
    }
    m.leave().await;
    let fetched = m.router.fetched_by_region(&cfg.broker_regions);
    (polls, m.ops, ids, fetched)
}
