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
