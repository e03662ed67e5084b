//! The narrow trait through which the controller reaches the broker it runs in: the
//! effects of committed metadata on this broker's replicas, and the few settings and
//! checks the controller needs. The controller never holds the broker itself.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use crate::records::{RaftGroupId, TopicConfigChange};

/// What a committed metadata record asks of this broker, in log order.
#[derive(Debug, Clone)]
pub enum Effect {
    /// A new topic: open this broker's replicas of its partitions (each a Raft group whose
    /// first voters are its replicas) and list the rest as remote.
    CreateTopic { name: String, id: Uuid, seq: u64, replicas: Vec<Vec<i32>>, configs: BTreeMap<String, String> },
    /// New partitions `first..` of a topic (CreatePartitions).
    AddPartitions { name: String, id: Uuid, seq: u64, first: i32, replicas: Vec<Vec<i32>> },
    /// A partition's replica list changed (a reassignment started or finished): what
    /// Metadata lists, whether this broker now holds a replica, and the group's first
    /// voters, from which a replica added here starts before it replays the group's changes.
    Relist {
        name: String,
        id: Uuid,
        partition: i32,
        group: RaftGroupId,
        listed: Vec<i32>,
        host: bool,
        initial: Vec<i32>,
    },
    /// A topic's config overrides, whole.
    TopicConfigs { name: String, id: Uuid, configs: BTreeMap<String, String> },
    /// The cluster-wide dynamic broker configs, whole.
    BrokerDefaults { configs: BTreeMap<String, String> },
    /// Every replica of the partition moves its log start up to `offset` (DeleteRecords).
    DeleteRecords { name: String, id: Uuid, partition: i32, offset: i64 },
    /// The topic is gone: close this broker's replicas and delete their data.
    DeleteTopic { name: String, id: Uuid, seq: u64, partitions: usize },
}

/// The broker settings the controller reads, as they are now (some are dynamic).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `max.broker.partitions`.
    pub broker_partitions_max: usize,
    /// `broker.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `broker.session.timeout.ms`.
    pub session_timeout: Duration,
}

pub trait Host: Send + Sync + 'static {
    /// Carries out a committed record's effect on this broker. Called off the async
    /// workers (it opens files and deletes directories), one effect at a time, in log
    /// order. An error stops the broker: the metadata log is the truth, and a broker that
    /// cannot open its replica must not go on as if it had it.
    fn apply(&self, effect: Effect) -> anyhow::Result<()>;

    fn limits(&self) -> Limits;

    /// Whether a topic with these overrides (or the broker's default) sets
    /// `placement.unsafe.allow`.
    fn placement_unsafe_allowed(&self, topic_configs: &BTreeMap<String, String>) -> bool;

    /// A topic's overrides after `change`, validated.
    fn configs_after(
        &self,
        current: &BTreeMap<String, String>,
        change: &TopicConfigChange,
    ) -> Result<BTreeMap<String, String>, (ResponseError, String)>;
}
