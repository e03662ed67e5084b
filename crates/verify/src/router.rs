//! Where to send a request while brokers die, pause and move leaders: a client's view of
//! the cluster (broker addresses and each partition's leader, from Metadata) and one
//! connection per broker. Every network step has a deadline, so a paused or isolated broker
//! costs a timeout, never a hang; a failed connection is dropped and the view refreshed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::MetadataRequest;
use kafka_protocol::protocol::Request;
use runnel_client::{topic_name, Connection, METADATA_VERSION};

use crate::config::ClientRegion;

/// A broker that was cut off never answers a SYN; a client moves on to the next address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

pub struct Router {
    client_id: String,
    topic: String,
    /// Addresses to ask for metadata when no known broker answers.
    bootstrap: Vec<String>,
    /// broker id → "host:port"
    brokers: HashMap<i32, String>,
    /// partition → leader broker id (-1: none known)
    leaders: Vec<i32>,
    conns: HashMap<String, Arc<Connection>>,
    /// When each address last failed us: asked last while the failure is recent.
    failed: HashMap<String, Instant>,
    request_timeout: Duration,
    /// The client's region: `client.rack` in fetches, and the namespace it connects from.
    region: Option<ClientRegion>,
    /// broker id → its Metadata `rack`
    racks: HashMap<i32, String>,
    /// partition → the replica its leader sent us to read from (KIP-392), until when.
    preferred: HashMap<i32, (i32, Instant)>,
    /// Bytes of records read from each broker.
    fetched: BTreeMap<i32, u64>,
    /// Brokers in the client's own region.
    nearby: Vec<i32>,
}

/// How long a preferred read replica is kept before asking the leader again (the Java
/// client's `metadata.max.age.ms`).
const PREFERRED_FOR: Duration = Duration::from_secs(300);

/// How long an address that failed is asked after the others.
const SUSPECT_FOR: Duration = Duration::from_secs(10);

/// Whether an error code is one a Kafka client retries (after looking the leader or the
/// coordinator up again): leadership or coordination moved or is not ready yet, too few
/// replicas are in sync for now, or the request timed out where it was.
pub(crate) fn retriable(code: i16) -> bool {
    matches!(
        ResponseError::try_from_code(code),
        Some(
            ResponseError::NotLeaderOrFollower
                | ResponseError::LeaderNotAvailable
                | ResponseError::RequestTimedOut
                | ResponseError::NotEnoughReplicas
                | ResponseError::NotEnoughReplicasAfterAppend
                | ResponseError::KafkaStorageError
                | ResponseError::UnknownTopicOrPartition
                | ResponseError::CoordinatorLoadInProgress
                | ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::FencedLeaderEpoch
                | ResponseError::UnknownLeaderEpoch
        )
    )
}

impl Router {
    pub fn new(bootstrap: &str, topic: &str, client_id: &str, request_timeout: Duration) -> Router {
        Router {
            client_id: client_id.to_string(),
            topic: topic.to_string(),
            bootstrap: bootstrap.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            brokers: HashMap::new(),
            leaders: Vec::new(),
            conns: HashMap::new(),
            failed: HashMap::new(),
            request_timeout,
            region: None,
            racks: HashMap::new(),
            preferred: HashMap::new(),
            fetched: BTreeMap::new(),
            nearby: Vec::new(),
        }
    }

    /// The same router for a client running in `region` (none: no region); `brokers` gives
    /// the brokers' regions where known, and metadata is asked of those in the client's own
    /// region first (a region cut off costs its clients' neighbours no timeouts).
    pub fn in_region(mut self, region: Option<&ClientRegion>, brokers: &BTreeMap<i32, String>) -> Router {
        self.region = region.cloned();
        if let Some(r) = region {
            self.nearby = brokers.iter().filter(|(_, b)| **b == r.name).map(|(id, _)| *id).collect();
        }
        self
    }

    /// What fetches send as `client.rack`: the region's name, or empty.
    pub fn rack(&self) -> &str {
        self.region.as_ref().map_or("", |r| r.name.as_str())
    }

    /// Where to read `partition` from: the replica its leader preferred for us while that
    /// lasts and the broker is known, else the leader. (broker id, address)
    pub async fn reader(&mut self, partition: i32) -> Option<(i32, String)> {
        if let Some(&(id, until)) = self.preferred.get(&partition) {
            match self.brokers.get(&id) {
                Some(addr) if Instant::now() < until => return Some((id, addr.clone())),
                _ => {
                    self.preferred.remove(&partition);
                }
            }
        }
        let addr = self.leader(partition).await?;
        let id = *self.leaders.get(partition as usize)?;
        Some((id, addr))
    }

    /// The leader sent us to `broker` for `partition`.
    pub fn prefer(&mut self, partition: i32, broker: i32) {
        self.preferred.insert(partition, (broker, Instant::now() + PREFERRED_FOR));
    }

    /// Back to the leader for `partition` (its preferred replica failed us), or for every
    /// partition read from `broker`.
    pub fn unprefer(&mut self, partition: Option<i32>, broker: i32) {
        match partition {
            Some(p) => {
                self.preferred.remove(&p);
            }
            None => self.preferred.retain(|_, (b, _)| *b != broker),
        }
    }

    /// Whether `partition` is read from a follower the leader preferred.
    pub fn reads_from_follower(&self, partition: i32) -> bool {
        self.preferred.contains_key(&partition)
    }

    pub fn count_fetched(&mut self, broker: i32, bytes: usize) {
        *self.fetched.entry(broker).or_default() += bytes as u64;
    }

    /// Bytes read per broker region (a broker's region from `known`, else its Metadata
    /// rack, else `?`), for a client in the router's region.
    pub fn fetched_by_region(&self, known: &BTreeMap<i32, String>) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (id, bytes) in &self.fetched {
            let region = known.get(id).or_else(|| self.racks.get(id)).cloned().unwrap_or_else(|| "?".into());
            *out.entry(region).or_default() += bytes;
        }
        out
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    async fn conn(&mut self, addr: &str) -> Option<Arc<Connection>> {
        if let Some(c) = self.conns.get(addr) {
            return Some(c.clone());
        }
        let netns = self.region.as_ref().and_then(|r| r.netns.as_ref());
        let connect = Connection::connect_from(netns, addr, &self.client_id, 4);
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(c)) => {
                self.conns.insert(addr.to_string(), c.clone());
                Some(c)
            }
            _ => None,
        }
    }

    /// Forgets the connection to `addr` (it failed or timed out): the next call dials again.
    pub fn drop_conn(&mut self, addr: &str) {
        self.conns.remove(addr);
        self.failed.insert(addr.to_string(), Instant::now());
    }

    /// Every address worth trying: known brokers first, and those that failed recently last.
    fn candidates(&self) -> Vec<String> {
        let mut all: Vec<String> = self.brokers.values().cloned().collect();
        all.sort();
        for b in &self.bootstrap {
            if !all.contains(b) {
                all.push(b.clone());
            }
        }
        let suspect = |a: &String| self.failed.get(a).is_some_and(|t| t.elapsed() < SUSPECT_FOR);
        let near: Vec<&String> = self.nearby.iter().filter_map(|id| self.brokers.get(id)).collect();
        all.sort_by_key(|a| (suspect(a), !near.contains(&a)));
        all
    }

    /// Calls `req` on `addr` within the request timeout; a failure drops the connection.
    pub async fn call_at<R: Request>(&mut self, addr: &str, req: &R, version: i16) -> Result<R::Response> {
        let Some(conn) = self.conn(addr).await else {
            self.failed.insert(addr.to_string(), Instant::now());
            bail!("cannot connect to {addr}");
        };
        match tokio::time::timeout(self.request_timeout, conn.call(req, version)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.drop_conn(addr);
                Err(e)
            }
            Err(_) => {
                self.drop_conn(addr);
                Err(anyhow!("request to {addr} timed out"))
            }
        }
    }

    /// Calls `req` on the first broker that answers.
    pub async fn call_any<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        let mut last = anyhow!("no broker address known");
        for addr in self.candidates() {
            match self.call_at(&addr, req, version).await {
                Ok(r) => return Ok(r),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Asks any broker for the brokers and the topic's leaders.
    pub async fn refresh(&mut self) -> Result<()> {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(&self.topic)))]))
            .with_allow_auto_topic_creation(false);
        let resp = self.call_any(&req, METADATA_VERSION).await.context("metadata")?;
        if !resp.brokers.is_empty() {
            self.brokers =
                resp.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port))).collect();
            self.racks =
                resp.brokers.iter().filter_map(|b| b.rack.as_ref().map(|r| (b.node_id.0, r.to_string()))).collect();
        }
        if let Some(t) = resp.topics.iter().find(|t| t.error_code == 0) {
            let mut leaders = vec![-1; t.partitions.len()];
            for p in &t.partitions {
                if let Some(slot) = leaders.get_mut(p.partition_index as usize) {
                    *slot = p.leader_id.0;
                }
            }
            self.leaders = leaders;
        }
        Ok(())
    }

    /// Every partition of the topic: (leader, replicas), asked of any broker now.
    pub async fn replicas(&mut self) -> Result<Vec<(i32, Vec<i32>)>> {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(&self.topic)))]))
            .with_allow_auto_topic_creation(false);
        let resp = self.call_any(&req, METADATA_VERSION).await.context("metadata")?;
        let t = resp.topics.iter().find(|t| t.error_code == 0).ok_or_else(|| anyhow!("topic not found"))?;
        let mut out: Vec<(i32, i32, Vec<i32>)> = t
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.leader_id.0, p.replica_nodes.iter().map(|b| b.0).collect()))
            .collect();
        out.sort_by_key(|p| p.0);
        Ok(out.into_iter().map(|(_, l, r)| (l, r)).collect())
    }

    /// The address of `partition`'s leader as last seen, refreshing once if none is known.
    pub async fn leader(&mut self, partition: i32) -> Option<String> {
        if self.address_of_leader(partition).is_none() {
            let _ = self.refresh().await;
        }
        self.address_of_leader(partition)
    }

    fn address_of_leader(&self, partition: i32) -> Option<String> {
        let leader = *self.leaders.get(partition as usize)?;
        self.brokers.get(&leader).cloned()
    }

    /// A leader is gone or moved: forget what we knew of it and look again.
    pub async fn leader_moved(&mut self, addr: Option<&str>) {
        if let Some(a) = addr {
            self.drop_conn(a);
        }
        self.leaders.clear();
        let _ = self.refresh().await;
    }

    /// How many brokers the last metadata listed.
    pub fn broker_count(&self) -> usize {
        self.brokers.len()
    }

    /// Every broker the last metadata listed: id and address, by id.
    pub fn brokers(&self) -> Vec<(i32, String)> {
        let mut all: Vec<(i32, String)> = self.brokers.iter().map(|(id, a)| (*id, a.clone())).collect();
        all.sort();
        all
    }
}
