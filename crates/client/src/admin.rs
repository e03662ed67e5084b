//! The Kafka admin requests `runnel topic`, `runnel group` and `runnel cluster` make, as
//! Kafka's own tools make them (`kafka-topics`, `kafka-configs`, `kafka-consumer-groups`,
//! `kafka-cluster`): topic metadata and configs, groups with their committed offsets and
//! lag, offsets set for an idle group, the cluster's brokers. Any Kafka-compatible cluster
//! answers them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    describe_configs_request::DescribeConfigsResource, BrokerId, DeleteGroupsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, IncrementalAlterConfigsRequest,
    ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::{check, KafkaError};
use crate::connection::Connection;
use crate::{topic_name, Cluster, LIST_OFFSETS_VERSION, METADATA_VERSION};

const DESCRIBE_CONFIGS_VERSION: i16 = 4;
const INCREMENTAL_ALTER_CONFIGS_VERSION: i16 = 1;
const LIST_GROUPS_VERSION: i16 = 5;
const DESCRIBE_GROUPS_VERSION: i16 = 5;
const FIND_COORDINATOR_KEYS_VERSION: i16 = 4;
const OFFSET_FETCH_VERSION: i16 = 8;
const OFFSET_COMMIT_VERSION: i16 = 8;
const DELETE_GROUPS_VERSION: i16 = 2;
const DESCRIBE_CLUSTER_VERSION: i16 = 1;
/// ConfigResource type of a topic.
const TOPIC_RESOURCE: i8 = 2;

/// A topic as Metadata describes it.
#[derive(Debug, Clone)]
pub struct TopicInfo {
    pub name: String,
    pub internal: bool,
    pub partitions: Vec<PartitionInfo>,
}

#[derive(Debug, Clone)]
pub struct PartitionInfo {
    pub partition: i32,
    /// -1 without a leader.
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A config as DescribeConfigs returns it; `source` in Kafka's numbering (1 a topic
/// override, 5 the broker's default, ...).
#[derive(Debug, Clone)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
}

/// A group as ListGroups names it.
#[derive(Debug, Clone)]
pub struct GroupListing {
    pub group: String,
    pub state: String,
    /// `classic` or `consumer`.
    pub kind: String,
}

/// A group member as DescribeGroups names it.
#[derive(Debug, Clone)]
pub struct MemberInfo {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
}

/// A broker as DescribeCluster names it.
#[derive(Debug, Clone)]
pub struct BrokerInfo {
    pub id: i32,
    pub address: String,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// (topic, partition).
pub type Tp = (String, i32);

/// Coordinator errors that pass: the coordinator moved, is loading its groups, or is not
/// elected yet (a new `__consumer_offsets`).
const COORDINATOR_RETRIABLE: [i16; 3] = [14, 15, 16];
/// How long those are retried.
const COORDINATOR_WAIT: Duration = Duration::from_secs(30);

fn coordinator_retriable(e: &anyhow::Error) -> bool {
    e.downcast_ref::<KafkaError>().is_some_and(|k| COORDINATOR_RETRIABLE.contains(&k.code))
}

impl Cluster {
    /// Runs `f` against the group's coordinator, found again and retried (bounded) while
    /// it answers that it is moving, loading or not there yet, as Kafka's admin client does.
    async fn at_coordinator<T, Fut>(&self, group: &str, f: impl Fn(Arc<Connection>) -> Fut) -> Result<T>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + COORDINATOR_WAIT;
        loop {
            let result = match self.coordinator(group).await {
                Ok(conn) => f(conn).await,
                Err(e) => Err(e),
            };
            match result {
                Err(e) if coordinator_retriable(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }

    /// Every topic (internal ones too), or those named; sorted by name.
    pub async fn topics(&self, names: Option<&[String]>) -> Result<Vec<TopicInfo>> {
        let topics = names.map(|ns| {
            ns.iter().map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n)))).collect::<Vec<_>>()
        });
        let req = MetadataRequest::default().with_topics(topics).with_allow_auto_topic_creation(false);
        let resp = self.admin.call(&req, METADATA_VERSION).await.context("metadata")?;
        let mut out = Vec::new();
        for t in resp.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            check(t.error_code, &format!("topic {name}"))?;
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            out.push(TopicInfo { name, internal: t.is_internal, partitions });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// A topic's configs with their sources.
    pub async fn topic_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        let req = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(None)]);
        let resp = self.admin.call(&req, DESCRIBE_CONFIGS_VERSION).await.context("describe configs")?;
        let mut out = Vec::new();
        for r in resp.results {
            check(r.error_code, &format!("configs of {topic}"))?;
            out.extend(r.configs.into_iter().map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                source: c.config_source,
            }));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Sets and removes a topic's config overrides (IncrementalAlterConfigs: SET, DELETE).
    pub async fn alter_topic_configs(&self, topic: &str, set: &[(String, String)], delete: &[String]) -> Result<()> {
        let mut configs: Vec<AlterableConfig> = set
            .iter()
            .map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(v.clone())))
            })
            .collect();
        configs.extend(
            delete.iter().map(|k| {
                AlterableConfig::default().with_name(StrBytes::from_string(k.clone())).with_config_operation(1)
            }),
        );
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(configs)]);
        let resp = self.admin.call(&req, INCREMENTAL_ALTER_CONFIGS_VERSION).await.context("alter configs")?;
        for r in resp.responses {
            if r.error_code != 0 {
                let msg = r.error_message.map(|m| m.to_string()).unwrap_or_default();
                check(r.error_code, &format!("configs of {topic}: {msg}"))?;
            }
        }
        Ok(())
    }

    /// Every group, from every broker (each lists the groups it coordinates).
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let mut out = Vec::new();
        let mut brokers: Vec<(&i32, &String)> = self.brokers.iter().collect();
        brokers.sort();
        for (id, address) in brokers {
            let conn = Connection::connect(address, &self.client_id, 1).await?;
            let resp = conn.call(&ListGroupsRequest::default(), LIST_GROUPS_VERSION).await.context("list groups")?;
            check(resp.error_code, &format!("groups of broker {id}"))?;
            out.extend(resp.groups.into_iter().map(|g| GroupListing {
                group: g.group_id.0.to_string(),
                state: g.group_state.to_string(),
                kind: g.group_type.to_string(),
            }));
        }
        out.sort_by(|a, b| a.group.cmp(&b.group));
        Ok(out)
    }

    /// A connection to the group's coordinator (FindCoordinator).
    async fn coordinator(&self, group: &str) -> Result<Arc<Connection>> {
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
        let resp = self.admin.call(&req, FIND_COORDINATOR_KEYS_VERSION).await.context("find coordinator")?;
        let Some(c) = resp.coordinators.into_iter().next() else { bail!("no coordinator for group {group}") };
        check(c.error_code, &format!("coordinator of group {group}"))?;
        Connection::connect(&format!("{}:{}", c.host.as_str(), c.port), &self.client_id, 1).await
    }

    /// The group's state and members (DescribeGroups).
    pub async fn describe_group(&self, group: &str) -> Result<(String, Vec<MemberInfo>)> {
        let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
        let g = self
            .at_coordinator(group, |conn| {
                let req = &req;
                async move {
                    let resp = conn.call(req, DESCRIBE_GROUPS_VERSION).await.context("describe groups")?;
                    let Some(g) = resp.groups.into_iter().next() else { bail!("group {group} was not described") };
                    check(g.error_code, &format!("group {group}"))?;
                    Ok(g)
                }
            })
            .await?;
        let members = g
            .members
            .into_iter()
            .map(|m| MemberInfo {
                member_id: m.member_id.to_string(),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
            })
            .collect();
        Ok((g.group_state.to_string(), members))
    }

    /// The group's committed offsets (OffsetFetch of every partition).
    pub async fn committed(&self, group: &str) -> Result<BTreeMap<Tp, i64>> {
        let req = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(None)]);
        let groups = self
            .at_coordinator(group, |conn| {
                let req = &req;
                async move {
                    let resp = conn.call(req, OFFSET_FETCH_VERSION).await.context("offset fetch")?;
                    for g in &resp.groups {
                        check(g.error_code, &format!("offsets of group {group}"))?;
                    }
                    Ok(resp.groups)
                }
            })
            .await?;
        let mut out = BTreeMap::new();
        for g in groups {
            for t in g.topics {
                for p in t.partitions {
                    if p.error_code == 0 && p.committed_offset >= 0 {
                        out.insert((t.name.0.to_string(), p.partition_index), p.committed_offset);
                    }
                }
            }
        }
        Ok(out)
    }

    /// ListOffsets at `timestamp` (-1 latest, -2 earliest, else the first offset at or after
    /// that time) of each partition, asked of its leader.
    pub async fn offsets_at(&self, partitions: &[Tp], timestamp: i64) -> Result<BTreeMap<Tp, i64>> {
        let names: Vec<String> =
            partitions.iter().map(|(t, _)| t.clone()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let layout = self.topics(Some(&names)).await?;
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
        for (topic, p) in partitions {
            let leader = layout
                .iter()
                .find(|t| &t.name == topic)
                .and_then(|t| t.partitions.iter().find(|q| q.partition == *p))
                .map(|q| q.leader)
                .filter(|l| *l >= 0)
                .with_context(|| format!("{topic}-{p} has no leader"))?;
            by_leader.entry(leader).or_default().entry(topic.clone()).or_default().push(*p);
        }
        let mut out = BTreeMap::new();
        for (leader, topics) in by_leader {
            let conn = Connection::connect(self.address(leader)?, &self.client_id, 1).await?;
            let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(
                topics
                    .iter()
                    .map(|(t, ps)| {
                        ListOffsetsTopic::default().with_name(topic_name(t)).with_partitions(
                            ps.iter()
                                .map(|p| {
                                    ListOffsetsPartition::default().with_partition_index(*p).with_timestamp(timestamp)
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            );
            let resp = conn.call(&req, LIST_OFFSETS_VERSION).await.context("list offsets")?;
            for t in resp.topics {
                for p in t.partitions {
                    check(p.error_code, &format!("offsets of {}-{}", t.name.0.as_str(), p.partition_index))?;
                    out.insert((t.name.0.to_string(), p.partition_index), p.offset);
                }
            }
        }
        Ok(out)
    }

    /// Commits offsets for a group that has no members (as `kafka-consumer-groups
    /// --reset-offsets` does: generation -1, no member id); a group with members refuses.
    pub async fn commit_offsets(&self, group: &str, offsets: &BTreeMap<Tp, i64>) -> Result<()> {
        let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for ((t, p), offset) in offsets {
            topics.entry(t).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*p)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1),
            );
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(StrBytes::from_static_str(""))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| OffsetCommitRequestTopic::default().with_name(topic_name(t)).with_partitions(ps))
                    .collect(),
            );
        self.at_coordinator(group, |conn| {
            let req = &req;
            async move {
                let resp = conn.call(req, OFFSET_COMMIT_VERSION).await.context("offset commit")?;
                for t in resp.topics {
                    for p in t.partitions {
                        let what = format!("committing {}-{} for group {group}", t.name.0.as_str(), p.partition_index);
                        check(p.error_code, &what)?;
                    }
                }
                Ok(())
            }
        })
        .await
    }

    /// DeleteGroups: the group and its offsets go (it must have no members).
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let req =
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(StrBytes::from_string(group.to_string()))]);
        self.at_coordinator(group, |conn| {
            let req = &req;
            async move {
                let resp = conn.call(req, DELETE_GROUPS_VERSION).await.context("delete groups")?;
                for r in resp.results {
                    check(r.error_code, &format!("deleting group {group}"))?;
                }
                Ok(())
            }
        })
        .await
    }

    /// The cluster id, the controller and every broker (fenced ones too).
    pub async fn describe_cluster(&self) -> Result<(String, i32, Vec<BrokerInfo>)> {
        let req = DescribeClusterRequest::default();
        let resp = self.admin.call(&req, DESCRIBE_CLUSTER_VERSION).await.context("describe cluster")?;
        check(resp.error_code, "describe cluster")?;
        let mut brokers: Vec<BrokerInfo> = resp
            .brokers
            .into_iter()
            .map(|b| BrokerInfo {
                id: b.broker_id.0,
                address: format!("{}:{}", b.host.as_str(), b.port),
                rack: b.rack.map(|r| r.to_string()),
                fenced: b.is_fenced,
            })
            .collect();
        brokers.sort_by_key(|b| b.id);
        Ok((resp.cluster_id.to_string(), resp.controller_id.0, brokers))
    }
}
