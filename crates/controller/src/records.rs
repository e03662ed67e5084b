//! What the metadata log holds (JSON records, one per Kafka record of a batch) and what
//! brokers send the controller over the Raft transport.

use runnel_security::acl::AclBinding;
use runnel_security::quota;
use runnel_security::{ScramCredential, ScramMechanism};
use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Names the Raft group that replicates one partition (not a consumer group).
pub type RaftGroupId = u64;

/// The metadata log's own Raft group.
pub const META_GROUP: RaftGroupId = 0;

/// Raft group of partition `p` of the topic with sequence number `seq`.
pub fn raft_group(seq: u64, p: i32) -> RaftGroupId {
    (seq << 24) | p as u64
}

/// A broker's Raft id: its node id plus one (Raft reserves 0).
pub fn raft_id(broker: i32) -> u64 {
    broker as u64 + 1
}

/// Sends `msg` (as JSON) to broker `to` on `channel`, one of the channels that share the
/// driver's forwarding (the controller's, the replica manager's): best effort, as Raft
/// messages are.
pub fn send_on_channel(driver: &runnel_raft::Driver, to: i32, channel: u8, msg: &impl Serialize) {
    match serde_json::to_vec(msg) {
        Ok(json) => {
            let mut data = Vec::with_capacity(json.len() + 1);
            data.push(channel);
            data.extend_from_slice(&json);
            driver.forward(raft_id(to), data);
        }
        Err(e) => tracing::warn!(error = %e, channel, "encoding a message to a peer"),
    }
}

/// Where a broker's ids for the requests it sends its peers start: random, so that a reply
/// to a request of the broker's previous run (asked before a crash, answered after the
/// restart) does not match a request of this run.
pub fn first_request_id() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// The broker with Raft id `raft_id`.
pub fn broker_of(raft_id: u64) -> i32 {
    raft_id as i32 - 1
}

/// A broker as registered in the metadata log.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: u16,
    /// Failure-domain labels, outermost first, e.g. [("region","us-east1"),("zone","b")].
    pub location: Vec<(String, String)>,
    /// New at every start, so that each start registers again and the broker can tell
    /// when it has replayed the metadata log that far (`until_registered`).
    #[serde(default)]
    pub incarnation: u64,
    /// Every client listener's advertised address, by listener name (`host`/`port` are
    /// the first one's).
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// Where peers reach its Raft listener (`host:port`; empty in a cluster of one and in
    /// registrations from before brokers outside the voters could join).
    #[serde(default)]
    pub raft: String,
    /// Its admin API, `http://host:port` (empty without `admin.listeners`).
    #[serde(default)]
    pub admin: String,
}

/// Why a broker's leaderships are moved away from it: an operator's maintenance mode,
/// which lasts until undone, or a controlled shutdown, which ends when the broker registers
/// again at its next start.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    Maintenance,
    Shutdown,
}

/// A listener's advertised address.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl BrokerInfo {
    /// A broker known only by its id and location (`region=..,zone=..`), as placement and
    /// replica selection see it.
    pub fn located(id: i32, location: &str) -> Result<BrokerInfo> {
        Ok(BrokerInfo {
            id,
            host: String::new(),
            port: 0,
            location: parse_location(location)?,
            incarnation: 0,
            endpoints: vec![],
            raft: String::new(),
            admin: String::new(),
        })
    }

    /// Where a client that connected through listener `name` reaches this broker: the
    /// advertised address of its listener of that name, None when it has none (Kafka
    /// leaves such a broker out of the answer). A broker registered before listeners were
    /// named has one address, for every listener.
    pub fn endpoint(&self, name: &str) -> Option<(&str, u16)> {
        if self.endpoints.is_empty() {
            return Some((&self.host, self.port));
        }
        self.endpoints.iter().find(|e| e.name == name).map(|e| (e.host.as_str(), e.port))
    }

    /// The Metadata `rack` clients match `client.rack` against: the zone when the location
    /// names one, else its innermost label.
    pub fn rack(&self) -> Option<String> {
        let zone = self.location.iter().find(|(k, _)| k == "zone");
        zone.or(self.location.last()).map(|(_, v)| v.clone())
    }
}

/// A partition moving to new replicas (AlterPartitionReassignments).
#[derive(Clone, Debug)]
pub struct Moving {
    /// The replicas before the move (what a cancellation returns to).
    pub original: Vec<i32>,
    pub target: Vec<i32>,
}

impl Moving {
    /// What Metadata lists while the move runs: the target, then the replicas leaving.
    pub fn listed(&self) -> Vec<i32> {
        let mut all = self.target.clone();
        all.extend(self.original.iter().filter(|b| !self.target.contains(b)));
        all
    }
}

/// A topic config change as the request states it, so that the controller applies it to
/// the current overrides (two incremental changes sent to different brokers both count).
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct TopicConfigChange {
    /// AlterConfigs: the operations replace every override.
    pub replace: bool,
    /// (name, operation as IncrementalAlterConfigs numbers it, value).
    pub ops: Vec<(String, i8, Option<String>)>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(tag = "type")]
pub(crate) enum Record {
    RegisterBroker(BrokerInfo),
    CreateTopic {
        name: String,
        id: Uuid,
        seq: u64,
        replicas: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
        id: Uuid,
    },
    /// CreatePartitions: the replica lists of the topic's new partitions `first..`. Applied
    /// only while the topic has `first` partitions, so two racing requests add once.
    AddPartitions {
        name: String,
        id: Uuid,
        first: usize,
        replicas: Vec<Vec<i32>>,
    },
    /// AlterPartitionReassignments: the partition moves to `target` (its original replicas
    /// when a move is cancelled). The partition's leader carries the move out.
    Reassign {
        name: String,
        id: Uuid,
        partition: i32,
        target: Vec<i32>,
    },
    /// The partition's Raft group now has exactly these voters: the move is over.
    Reassigned {
        name: String,
        id: Uuid,
        partition: i32,
        replicas: Vec<i32>,
    },
    /// A topic's config overrides, whole (AlterConfigs, IncrementalAlterConfigs), and the
    /// id of the change that produced them.
    TopicConfigs {
        name: String,
        id: Uuid,
        configs: BTreeMap<String, String>,
        #[serde(default)]
        change_id: Uuid,
    },
    /// The controller has not heard from the broker within `broker.session.timeout.ms`
    /// (fenced), or hears from it again (not fenced).
    FenceBroker {
        id: i32,
        fenced: bool,
    },
    /// A broker's leaderships move away (`Some`, see [`Drain`]) or may come back (`None`).
    Drain {
        id: i32,
        drain: Option<Drain>,
    },
    /// The cluster-wide dynamic broker configs (`kafka-configs --entity-type brokers
    /// --entity-default`), whole: every broker takes them below its own dynamic configs.
    BrokerDefaults {
        configs: BTreeMap<String, String>,
        change_id: Uuid,
    },
    /// A group's dynamic configs (`kafka-configs --entity-type groups`), whole; an empty
    /// map removes them.
    GroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
        change_id: Uuid,
    },
    /// DeleteRecords: every replica of the partition moves its log start to `offset` (at
    /// most the high watermark when it was asked). Kept out of the partition's own log,
    /// where an entry would take an offset that Kafka's DeleteRecords does not.
    DeleteRecords {
        name: String,
        id: Uuid,
        partition: i32,
        offset: i64,
    },
    /// AlterUserScramCredentials: credentials set (salt, iterations and the keys derived
    /// from the salted password; never the password) and removed, by (user, mechanism).
    ScramCredentials {
        upserts: Vec<(String, ScramMechanism, ScramCredential)>,
        deletes: Vec<(String, ScramMechanism)>,
        change_id: Uuid,
    },
    /// CreateAcls and DeleteAcls: bindings added and removed (those that exist).
    Acls {
        creates: Vec<AclBinding>,
        deletes: Vec<AclBinding>,
        change_id: Uuid,
    },
    /// AlterClientQuotas: (entity, key, the new value or None to remove it).
    ClientQuotas {
        changes: Vec<(quota::Entity, String, Option<f64>)>,
        change_id: Uuid,
    },
}

/// What a broker sends the controller (and the controller's answers) over the Raft
/// transport, on the controller's channel.
#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "type")]
pub(crate) enum Message {
    Register(BrokerInfo),
    /// Every `broker.heartbeat.interval.ms`, to the controller: this broker is alive.
    Heartbeat {
        id: i32,
    },
    /// A change the controller decides on and answers with a `Reply`.
    Call {
        req: u64,
        call: Call,
    },
    /// The controller's answer to a call: its error code and message, or none when it
    /// succeeded.
    Reply {
        req: u64,
        error: Option<(i16, String)>,
    },
    /// DescribeQuorum, asked of the metadata leader, which answers with `Quorum` (no state:
    /// it no longer leads).
    DescribeQuorum {
        req: u64,
    },
    Quorum {
        req: u64,
        state: Option<QuorumState>,
    },
}

/// The metadata quorum as its leader sees it (DescribeQuorum; offsets count entries).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct QuorumState {
    pub leader: i32,
    pub epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumMember>,
    pub observers: Vec<QuorumMember>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct QuorumMember {
    pub id: i32,
    pub log_end_offset: i64,
    /// Wall-clock milliseconds when the leader last heard from it, and when it last had
    /// every committed entry; -1 when not since the leader was elected.
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
}

fn yes() -> bool {
    true
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "call")]
pub(crate) enum Call {
    CreateTopic {
        name: String,
        partitions: i32,
        replication_factor: i16,
        /// Manual replica lists by partition; placed over failure domains when absent.
        assignment: Option<Vec<Vec<i32>>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    DeleteTopic {
        name: String,
    },
    /// Moves a partition to `target` replicas, or cancels its move (None).
    Reassign {
        name: String,
        partition: i32,
        target: Option<Vec<i32>>,
        /// False: refuse a target whose size differs from the current replica count.
        #[serde(default = "yes")]
        allow_rf_change: bool,
    },
    /// From the partition's leader: its group's voters are the move's target.
    FinishReassign {
        name: String,
        partition: i32,
        replicas: Vec<i32>,
    },
    /// A topic config change, applied by the controller to its copy of the overrides;
    /// `change_id` tells the requesting broker when its change is applied.
    AlterTopicConfigs {
        name: String,
        change: TopicConfigChange,
        change_id: Uuid,
    },
    CreatePartitions {
        name: String,
        /// The new partition count.
        count: i32,
        /// Manual replica lists of the new partitions.
        assignment: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    },
    /// DeleteRecords, from the partition's leader, which checked the offset.
    DeleteRecords {
        name: String,
        partition: i32,
        offset: i64,
    },
    /// AlterUserScramCredentials, checked by the broker that took it.
    AlterScram {
        upserts: Vec<(String, ScramMechanism, ScramCredential)>,
        deletes: Vec<(String, ScramMechanism)>,
        change_id: Uuid,
    },
    /// CreateAcls (checked by the broker that took it) and DeleteAcls (its filters
    /// resolved to bindings by that broker).
    AlterAcls {
        creates: Vec<AclBinding>,
        deletes: Vec<AclBinding>,
        change_id: Uuid,
    },
    /// Drains a broker's leaderships (`Some`) or ends its drain (`None`).
    Drain {
        id: i32,
        drain: Option<Drain>,
    },
    /// AlterClientQuotas, checked by the broker that took it.
    AlterClientQuotas {
        changes: Vec<(quota::Entity, String, Option<f64>)>,
        change_id: Uuid,
    },
    /// New cluster-wide dynamic broker configs, whole, checked by the broker that took them.
    AlterBrokerDefaults {
        configs: BTreeMap<String, String>,
        change_id: Uuid,
    },
    /// A group's new dynamic configs, whole, checked by the broker that took them.
    AlterGroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
        change_id: Uuid,
    },
}

/// Parses `controller.quorum.voters`: `id@host:port,...`.
pub fn parse_voters(s: &str) -> Result<Vec<(i32, String)>> {
    let mut out = Vec::new();
    for v in s.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let (id, addr) = v.split_once('@').with_context(|| format!("voter {v}: expected id@host:port"))?;
        let id: i32 = id.parse().with_context(|| format!("voter {v}: bad id"))?;
        if id < 0 {
            bail!("voter {v}: ids are 0 or more");
        }
        out.push((id, addr.to_string()));
    }
    Ok(out)
}

/// Parses `broker.location`: `region=us-east1,zone=us-east1-b,rack=r7`.
pub fn parse_location(s: &str) -> Result<Vec<(String, String)>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').with_context(|| format!("location part {p}: expected key=value"))?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: i32, loc: &str) -> BrokerInfo {
        BrokerInfo::located(id, loc).expect("location")
    }

    #[test]
    fn voters_and_locations_parse() {
        let v = parse_voters("0@127.0.0.1:19093, 1@127.0.0.1:19094").expect("voters");
        assert_eq!(v, vec![(0, "127.0.0.1:19093".to_string()), (1, "127.0.0.1:19094".to_string())]);
        assert!(parse_voters("x@y").is_err());
        assert_eq!(b(1, "region=r,zone=z,rack=k").rack().as_deref(), Some("z"));
        assert_eq!(b(1, "rack=k").rack().as_deref(), Some("k"));
        assert_eq!(b(1, "").rack(), None);
    }

    #[test]
    fn raft_ids_and_groups_round_trip() {
        assert_eq!(broker_of(raft_id(7)), 7);
        assert_eq!(raft_group(2, 5), (2 << 24) | 5);
    }
}
