//! `runnel bench`: a load generator and benchmark for any Kafka-compatible cluster.
//!
//! It speaks the Kafka protocol itself (through `runnel-client`, the client `runnel verify`
//! uses too), so it measures Runnel and Apache Kafka with exactly the same code: producers
//! (`producer`) batch and pipeline like Kafka's Java producer; consumers (`consumer`) fetch
//! from assigned partitions and measure end-to-end latency; `stats` keeps HdrHistograms and
//! per-second timelines; `report` turns a run into text, JSON and an SVG chart; `scenario`
//! names the published benchmark shapes; `compare` alternates two clusters; `size` turns a
//! measured throughput into a cluster size and cost.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (append, replicate, batched
//! fsync) → commit → response. This crate is the producer at the far end of the first hop.

pub mod compare;
pub mod consumer;
pub mod logins;
pub mod park;
pub mod producer;
pub mod profile;
pub mod report;
pub mod run;
pub mod scenario;
pub mod size;
pub mod stats;

use std::collections::BTreeMap;

use serde::Serialize;

pub use run::run;

/// Everything that shapes a run.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub topic: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub topic_configs: BTreeMap<String, String>,
    /// Use an existing topic as it is (no create, no delete).
    pub existing_topic: bool,
    /// Keep the topic after the run.
    pub keep_topic: bool,
    pub producers: usize,
    pub consumers: usize,
    /// Record value size, uniformly distributed between the two (equal: fixed).
    pub record_bytes: (usize, usize),
    /// Number of distinct keys (None: unkeyed records).
    pub keys: Option<u64>,
    pub compression: String,
    #[serde(skip)]
    pub codec: i16,
    pub acks: i16,
    pub batch_bytes: usize,
    pub linger_ms: u64,
    pub idempotent: bool,
    /// Records per second over all producers (None: as fast as possible).
    pub rate: Option<f64>,
    pub duration_s: f64,
    /// Total records (None: run for the duration).
    pub records: Option<u64>,
    /// Requests in flight per producer connection.
    pub in_flight: usize,
    /// Bytes a producer buffers or has in flight before it waits.
    pub buffer_bytes: usize,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            topic: String::new(),
            partitions: 1,
            replication_factor: 1,
            topic_configs: BTreeMap::new(),
            existing_topic: false,
            keep_topic: false,
            producers: 1,
            consumers: 1,
            record_bytes: (512, 512),
            keys: None,
            compression: "none".into(),
            codec: 0,
            acks: -1,
            batch_bytes: 16384,
            linger_ms: 5,
            idempotent: true,
            rate: None,
            duration_s: 10.0,
            records: None,
            in_flight: 5,
            buffer_bytes: 32 << 20,
        }
    }
}

/// The codec id for a `compression.type` name.
pub fn codec(name: &str) -> Option<i16> {
    Some(match name {
        "none" => 0,
        "gzip" => 1,
        "snappy" => 2,
        "lz4" => 3,
        "zstd" => 4,
        _ => return None,
    })
}
