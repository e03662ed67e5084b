//! One file per Kafka API. Each handler takes the decoded request and its version and
//! returns a [`Reply`](crate::ctx::Reply); errors become Kafka codes through
//! `crate::errors`, never panics.

pub mod acls;
pub mod alter_configs;
pub mod client_quotas;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_quorum;
pub mod describe_share_group_offsets;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod partition_reassignments;
pub mod produce;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod share_group_offsets;
pub mod sync_group;
pub mod txn;
pub mod txn_admin;
pub mod txn_offset_commit;
pub mod user_scram_credentials;
pub mod write_txn_markers;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// Partitions grouped by topic id, as assignments are sent.
pub(crate) fn by_topic(
    tps: impl IntoIterator<Item = (uuid::Uuid, i32)>,
) -> std::collections::BTreeMap<uuid::Uuid, Vec<i32>> {
    let mut out: std::collections::BTreeMap<uuid::Uuid, Vec<i32>> = std::collections::BTreeMap::new();
    for (id, p) in tps {
        out.entry(id).or_default().push(p);
    }
    out
}

/// Partitions grouped by topic, with each topic's name (empty if it is gone), as group
/// descriptions list them.
pub(crate) fn by_named_topic(
    b: &crate::broker::Broker,
    tps: &[(uuid::Uuid, i32)],
) -> Vec<(uuid::Uuid, TopicName, Vec<i32>)> {
    by_topic(tps.iter().copied())
        .into_iter()
        .map(|(id, parts)| {
            let name = b.catalog.topic_by_id(id).map(|t| t.name.to_string()).unwrap_or_default();
            (id, topic_name(&name), parts)
        })
        .collect()
}

/// The live brokers at the addresses of the listener a client came through (one without
/// that listener is left out), each made into a response's entry by `entry` from its id,
/// host, port and rack: what Metadata and DescribeCluster list.
pub(crate) fn live_brokers_as<T>(
    b: &crate::broker::Broker,
    listener: &str,
    entry: impl Fn(i32, StrBytes, i32, Option<StrBytes>) -> T,
) -> Vec<T> {
    let brokers = b.controller().live_brokers();
    brokers
        .iter()
        .filter_map(|info| {
            let (host, port) = info.endpoint(listener)?;
            Some(entry(info.id, str_bytes(host), port as i32, info.rack().map(|r| str_bytes(&r))))
        })
        .collect()
}

/// The controller id a Metadata or DescribeCluster response names: the metadata leader
/// when the response lists it, else this broker, else the first broker listed, else -1.
/// Clients send admin requests to the broker of that id among those listed, and any broker
/// takes them to the controller (KIP-590), so naming one the response leaves out (the
/// leader, before its registration reached this broker's image) only strands the client:
/// librdkafka waits for it until the request times out.
pub(crate) fn controller_among(leader: Option<i32>, me: i32, listed: &[i32]) -> i32 {
    leader
        .filter(|id| listed.contains(id))
        .or_else(|| listed.contains(&me).then_some(me))
        .or_else(|| listed.first().copied())
        .unwrap_or(-1)
}

#[cfg(test)]
mod controller_among_tests {
    use super::controller_among;

    #[test]
    fn names_a_listed_broker_or_none() {
        assert_eq!(controller_among(Some(0), 1, &[1, 2, 0]), 0, "the leader, listed");
        assert_eq!(controller_among(Some(0), 1, &[1, 2]), 1, "not listed: this broker");
        assert_eq!(controller_among(None, 1, &[1, 2]), 1, "no leader known");
        assert_eq!(controller_among(Some(0), 5, &[2, 1]), 2, "this broker not listed either");
        assert_eq!(controller_among(Some(0), 5, &[]), -1);
    }
}
