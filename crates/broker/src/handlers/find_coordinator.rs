//! FindCoordinator (key 10): this broker coordinates every group (it leads every partition
//! of `__consumer_offsets`). v4+ asks for many keys at once. Transactions are not built
//! yet, so transaction coordinators are refused.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::dispatch::{now, Reply};

const KEY_GROUP: i8 = 0;

fn lookup(key_type: i8) -> Result<(), (ResponseError, &'static str)> {
    match key_type {
        KEY_GROUP => Ok(()),
        _ => Err((ResponseError::CoordinatorNotAvailable, "only consumer-group coordinators are available")),
    }
}

pub fn handle(b: &Arc<Broker>, r: FindCoordinatorRequest, v: i16) -> Reply {
    let c = &b.config;
    let (mut node, mut host, mut port) = (BrokerId(c.node_id), str_bytes(&c.advertised_host), c.advertised_port as i32);
    // Cluster mode: group state is not replicated yet, so one broker (the lowest id)
    // coordinates every group, and all clients agree on which.
    if let Some(first) = b.cluster.get().and_then(|cl| cl.brokers().into_iter().next()) {
        (node, host, port) = (BrokerId(first.id), str_bytes(&first.host), first.port as i32);
    }
    if v >= 4 {
        let coordinators = r
            .coordinator_keys
            .into_iter()
            .map(|key: StrBytes| {
                let out = Coordinator::default().with_key(key);
                match lookup(r.key_type) {
                    Ok(()) => out.with_node_id(node).with_host(host.clone()).with_port(port),
                    Err((code, msg)) => out
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(code.code())
                        .with_error_message(Some(str_bytes(msg))),
                }
            })
            .collect();
        return now(FindCoordinatorResponse::default().with_coordinators(coordinators));
    }
    let resp = FindCoordinatorResponse::default();
    now(match lookup(if v >= 1 { r.key_type } else { KEY_GROUP }) {
        Ok(()) => resp.with_node_id(node).with_host(host).with_port(port),
        Err((code, msg)) => {
            let resp = resp.with_node_id(BrokerId(-1)).with_port(-1).with_error_code(code.code());
            if v >= 1 {
                resp.with_error_message(Some(str_bytes(msg)))
            } else {
                resp
            }
        }
    })
}
