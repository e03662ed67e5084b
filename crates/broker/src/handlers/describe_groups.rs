//! DescribeGroups (key 15): state, protocol and members (with their subscription and
//! assignment once the group is stable). An unknown group is reported as Dead, as Kafka
//! does for these versions.

use std::sync::Arc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: DescribeGroupsRequest, v: i16, ctx: &Ctx) -> Reply {
    let groups = r
        .groups
        .into_iter()
        .map(|id| {
            let out = DescribedGroup::default().with_group_id(id.clone());
            if !ctx.access.group(Operation::Describe, &id.0) {
                return out.with_error_code(kafka_protocol::error::ResponseError::GroupAuthorizationFailed.code());
            }
            match b.group_coordinator.describe(&id.0) {
                Err(e) => out.with_error_code(e.code()),
                Ok(None) => out.with_group_state(str_bytes("Dead")),
                Ok(Some(g)) => {
                    let members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(str_bytes(&m.member_id))
                                .with_group_instance_id(if v >= 4 {
                                    m.instance_id.as_deref().map(str_bytes)
                                } else {
                                    None
                                })
                                .with_client_id(str_bytes(&m.client_id))
                                .with_client_host(str_bytes(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect();
                    out.with_group_state(str_bytes(g.state))
                        .with_protocol_type(str_bytes(&g.protocol_type))
                        .with_protocol_data(str_bytes(&g.protocol))
                        .with_members(members)
                }
            }
        })
        .collect();
    now(DescribeGroupsResponse::default().with_groups(groups))
}
