//! What a tool needs from a cluster besides producing and fetching: broker addresses and
//! partition leaders (Metadata), creating and deleting a topic, the log-end offsets
//! (ListOffsets) that `runnel bench`'s consumers start from and its runs are checked by,
//! and a producer id for an idempotent producer (InitProducerId).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DeleteTopicsRequest, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::Connection;
use crate::{
    topic_name, CREATE_TOPICS_VERSION, DELETE_TOPICS_VERSION, INIT_PRODUCER_ID_VERSION, LIST_OFFSETS_VERSION,
    METADATA_VERSION,
};

/// InitProducerId for an idempotent producer (no transactional id): (error code, producer
/// id, epoch). Callers decide which error codes to retry.
pub async fn init_producer_id(conn: &Connection) -> Result<(i16, i64, i16)> {
    let req = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(-1);
    let resp = conn.call(&req, INIT_PRODUCER_ID_VERSION).await.context("InitProducerId")?;
    Ok((resp.error_code, resp.producer_id.0, resp.producer_epoch))
}

/// A topic's partitions and who leads each.
#[derive(Debug, Clone)]
pub struct TopicLayout {
    pub name: String,
    /// partition index → leader broker id
    pub leaders: Vec<i32>,
}

/// An admin's view of a cluster: its brokers, and one connection for Metadata,
/// CreateTopics and DeleteTopics.
pub struct Cluster {
    pub bootstrap: String,
    /// broker id → "host:port"
    pub brokers: HashMap<i32, String>,
    pub(crate) admin: Arc<Connection>,
    /// The client id of every connection this opens.
    pub(crate) client_id: String,
}

/// A Kafka error code in an answer, with what was asked.
#[derive(Debug)]
pub struct KafkaError {
    pub code: i16,
    pub what: String,
}

impl std::fmt::Display for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match ResponseError::try_from_code(self.code) {
            Some(e) => write!(f, "{}: {e:?}", self.what),
            None => write!(f, "{}: error code {}", self.what, self.code),
        }
    }
}

impl std::error::Error for KafkaError {}

pub(crate) fn check(code: i16, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    Err(KafkaError { code, what: what.to_string() }.into())
}

impl Cluster {
    /// Connects to `bootstrap` (host:port, or a comma-separated list: the first that
    /// answers) as `client_id` and reads the broker list.
    pub async fn connect(bootstrap: &str, client_id: &str) -> Result<Cluster> {
        let admin = Connection::connect_any(bootstrap, client_id, 8).await?;
        let mut c = Cluster {
            bootstrap: bootstrap.to_string(),
            brokers: HashMap::new(),
            admin,
            client_id: client_id.to_string(),
        };
        c.refresh_brokers().await?;
        Ok(c)
    }

    async fn refresh_brokers(&mut self) -> Result<()> {
        let req = MetadataRequest::default().with_topics(Some(vec![]));
        let resp = self.admin.call(&req, METADATA_VERSION).await.context("metadata")?;
        self.brokers = resp.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port))).collect();
        Ok(())
    }

    pub fn address(&self, broker: i32) -> Result<&str> {
        self.brokers.get(&broker).map(String::as_str).ok_or_else(|| anyhow!("broker {broker} is not in the metadata"))
    }

    /// The topic's layout once every partition has a leader (waits up to 30 s).
    pub async fn layout(&mut self, topic: &str) -> Result<TopicLayout> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let req = MetadataRequest::default()
                .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(topic)))]))
                .with_allow_auto_topic_creation(false);
            let resp = self.admin.call(&req, METADATA_VERSION).await.context("metadata")?;
            self.brokers =
                resp.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port))).collect();
            if let Some(t) = resp.topics.iter().find(|t| t.error_code == 0) {
                let mut leaders = vec![-1; t.partitions.len()];
                for p in &t.partitions {
                    if let Some(slot) = leaders.get_mut(p.partition_index as usize) {
                        *slot = p.leader_id.0;
                    }
                }
                if !leaders.is_empty() && leaders.iter().all(|l| *l >= 0 && self.brokers.contains_key(l)) {
                    return Ok(TopicLayout { name: topic.to_string(), leaders });
                }
            }
            if Instant::now() > deadline {
                bail!("topic {topic} has no leader for every partition after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<()> {
        let t = CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.clone()))
                            .with_value(Some(StrBytes::from_string(v.clone())))
                    })
                    .collect(),
            );
        let req = CreateTopicsRequest::default().with_topics(vec![t]).with_timeout_ms(30_000);
        let resp = self.admin.call(&req, CREATE_TOPICS_VERSION).await.context("create topics")?;
        for t in &resp.topics {
            check(t.error_code, &format!("creating topic {topic}"))?;
        }
        Ok(())
    }

    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        let req = DeleteTopicsRequest::default().with_topic_names(vec![topic_name(topic)]).with_timeout_ms(30_000);
        let resp = self.admin.call(&req, DELETE_TOPICS_VERSION).await.context("delete topics")?;
        for r in &resp.responses {
            check(r.error_code, &format!("deleting topic {topic}"))?;
        }
        Ok(())
    }

    /// Log-end offset (ListOffsets latest) of every partition, asked of each leader. A new
    /// topic's leaders may answer NOT_LEADER_OR_FOLLOWER for a moment: retried for 30 s.
    pub async fn end_offsets(&self, layout: &TopicLayout) -> Result<Vec<i64>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.try_end_offsets(layout).await {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "retrying ListOffsets");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_end_offsets(&self, layout: &TopicLayout) -> Result<Vec<i64>> {
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (p, leader) in layout.leaders.iter().enumerate() {
            by_leader.entry(*leader).or_default().push(p as i32);
        }
        let mut out = vec![-1; layout.leaders.len()];
        for (leader, parts) in by_leader {
            let conn = Connection::connect(self.address(leader)?, &self.client_id, 1).await?;
            let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
                ListOffsetsTopic::default().with_name(topic_name(&layout.name)).with_partitions(
                    parts
                        .iter()
                        .map(|p| ListOffsetsPartition::default().with_partition_index(*p).with_timestamp(-1))
                        .collect(),
                ),
            ]);
            let resp = conn.call(&req, LIST_OFFSETS_VERSION).await.context("list offsets")?;
            for t in &resp.topics {
                for p in &t.partitions {
                    check(p.error_code, &format!("offsets of {}-{}", layout.name, p.partition_index))?;
                    if let Some(slot) = out.get_mut(p.partition_index as usize) {
                        *slot = p.offset;
                    }
                }
            }
        }
        Ok(out)
    }
}
