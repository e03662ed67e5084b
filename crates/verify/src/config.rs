//! What shapes a `runnel verify` run: the cluster, the topic, how many producers and
//! consumers of each kind, how fast, for how long, and how patient each request is.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct VerifyConfig {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub producers: usize,
    /// Consumers with assigned partitions (no group).
    pub consumers: usize,
    /// Consumers in one consumer group, subscribed to the topic.
    pub group_consumers: usize,
    /// The group's id.
    pub group: String,
    /// Values per produce request.
    pub batch: usize,
    /// Requests per second per producer.
    pub rate: f64,
    pub duration: Duration,
    /// How long one request is retried before its outcome is called unknown.
    pub retry_for: Duration,
    /// How long one attempt waits for an answer before the connection is given up.
    pub request_timeout: Duration,
    /// The transactional workload: producers write in transactions (some aborted) and
    /// every reader reads with `read_committed` (`txn`).
    pub transactional: bool,
}
