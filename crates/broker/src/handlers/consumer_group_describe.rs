//! ConsumerGroupDescribe (key 69, KIP-848): epochs, assignor, and each member's current
//! and target assignment.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse};
use runnel_coordinator::Tp;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

fn assignment(b: &Broker, tps: &[Tp]) -> Assignment {
    Assignment::default().with_topic_partitions(
        super::by_named_topic(b, tps)
            .into_iter()
            .map(|(id, name, parts)| {
                TopicPartitions::default().with_topic_id(id).with_topic_name(name).with_partitions(parts)
            })
            .collect(),
    )
}

pub fn handle(b: &Arc<Broker>, r: ConsumerGroupDescribeRequest, v: i16, ctx: &Ctx) -> Reply {
    let groups = r
        .group_ids
        .into_iter()
        .map(|id| {
            let out = DescribedGroup::default().with_group_id(id.clone());
            if !ctx.access.group(Operation::Describe, &id.0) {
                return out.with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            let found = match b.group_coordinator.describe_consumer(&id.0) {
                Ok(found) => found,
                Err(e) => return out.with_error_code(e.code()),
            };
            let Some(g) = found else {
                return out
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(&format!("Group {} not found.", id.0.as_str()))));
            };
            let members = g
                .members
                .iter()
                .map(|s| {
                    let mut m = Member::default()
                        .with_member_id(str_bytes(&s.member_id))
                        .with_instance_id(s.instance_id.as_deref().map(str_bytes))
                        .with_rack_id(s.rack_id.as_deref().map(str_bytes))
                        .with_member_epoch(s.epoch)
                        .with_client_id(str_bytes(&s.client_id))
                        .with_client_host(str_bytes(&s.client_host))
                        .with_subscribed_topic_names(s.subscribed.iter().map(|t| topic_name(t)).collect())
                        .with_subscribed_topic_regex(s.regex.as_deref().map(str_bytes))
                        .with_assignment(assignment(b, &s.assigned))
                        .with_target_assignment(assignment(b, &s.target));
                    if v >= 1 {
                        m.member_type = 1; // a KIP-848 consumer
                    }
                    m
                })
                .collect();
            out.with_group_state(str_bytes(g.state))
                .with_group_epoch(g.group_epoch)
                .with_assignment_epoch(g.assignment_epoch)
                .with_assignor_name(str_bytes(&g.assignor))
                .with_members(members)
        })
        .collect();
    now(ConsumerGroupDescribeResponse::default().with_groups(groups))
}
