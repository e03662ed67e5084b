//! ListGroups (key 16): every group, filtered by state (v4+) and type (v5+; all groups
//! here are "classic").

use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::dispatch::{now, Reply};

pub fn handle(b: &Arc<Broker>, r: ListGroupsRequest, v: i16) -> Reply {
    let states: Vec<String> = r.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = r.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let groups = b
        .groups
        .list()
        .into_iter()
        .filter(|(_, _, state)| states.is_empty() || states.contains(&state.to_lowercase()))
        .filter(|_| types.is_empty() || types.iter().any(|t| t == "classic"))
        .map(|(id, protocol_type, state)| {
            let mut g = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&id)))
                .with_protocol_type(str_bytes(&protocol_type));
            if v >= 4 {
                g.group_state = str_bytes(state);
            }
            if v >= 5 {
                g.group_type = str_bytes("classic");
            }
            g
        })
        .collect();
    now(ListGroupsResponse::default().with_groups(groups))
}
