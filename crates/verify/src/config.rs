//! What shapes a `runnel verify` run: the cluster, the topic, how many producers and
//! consumers of each kind, how fast, for how long, and how patient each request is.

use std::collections::BTreeMap;
use std::time::Duration;

use runnel_client::Netns;

/// Where some of the workload's clients run: a region's name, which they send as
/// `client.rack` (so they read from replicas in it, KIP-392), and the network namespace
/// they connect from, if any (the region's client namespace of `runnel chaos --regions`).
#[derive(Debug, Clone)]
pub struct ClientRegion {
    pub name: String,
    pub netns: Option<Netns>,
}

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
    /// Client regions. With R of them, producer, consumer and group member `i` run in
    /// region `i % R`, and each region has a consumer group of its own (`group` followed by
    /// `-` and the region's name) with `group_consumers` members. Empty: no regions.
    pub regions: Vec<ClientRegion>,
    /// Each broker's region, as whoever laid the cluster out knows it, for counting the
    /// bytes consumers read across regions; a broker not listed is taken to be in the
    /// region its Metadata `rack` names.
    pub broker_regions: BTreeMap<i32, String>,
}

impl VerifyConfig {
    /// The region process `i` (a producer, consumer or group member) runs in.
    pub fn region_of(&self, i: usize) -> Option<&ClientRegion> {
        (!self.regions.is_empty()).then(|| &self.regions[i % self.regions.len()])
    }
}
