//! ListGroups (key 16): every group, filtered by state (v4+) and type (v5+: "classic" or
//! "consumer" for KIP-848 groups).

use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: ListGroupsRequest, v: i16, ctx: &Ctx) -> Reply {
    // As Kafka: DESCRIBE on the cluster lists every group, else those the client may describe.
    let every = ctx.access.cluster(Operation::Describe);
    let states: Vec<String> = r.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = r.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let groups = b
        .group_coordinator
        .list()
        .into_iter()
        .filter(|g| every || ctx.access.group(Operation::Describe, &g.group_id))
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .map(|g| {
            let mut out = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&g.group_id)))
                .with_protocol_type(str_bytes(&g.protocol_type));
            if v >= 4 {
                out.group_state = str_bytes(g.state);
            }
            if v >= 5 {
                out.group_type = str_bytes(g.group_type);
            }
            out
        })
        .collect();
    now(ListGroupsResponse::default().with_groups(groups))
}
