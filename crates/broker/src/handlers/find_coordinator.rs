//! FindCoordinator (key 10): a group's coordinator is the leader of its
//! `__consumer_offsets` partition, a transactional id's the leader of its
//! `__transaction_state` partition, a share-partition's state's the leader of its
//! `__share_group_state` partition (`coordinators::locate`; a single broker leads them
//! all). v4+ asks for many keys at once.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinators::Kind;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;
/// A share-partition's state: `group:topicId:partition` (KIP-932).
const KEY_SHARE: i8 = 2;

/// (node id, host, port) of the coordinator of one key.
fn lookup(
    b: &Broker,
    key_type: i8,
    key: &str,
    ctx: &Ctx,
) -> Result<(BrokerId, StrBytes, i32), (ResponseError, String)> {
    let listener = &*ctx.listener;
    let kind = match key_type {
        KEY_GROUP if !ctx.access.group(Operation::Describe, key) => {
            return Err((ResponseError::GroupAuthorizationFailed, "Group authorization failed.".into()));
        }
        KEY_GROUP => Kind::Groups,
        KEY_TRANSACTION if !ctx.access.transactional_id(Operation::Describe, key) => {
            return Err((
                ResponseError::TransactionalIdAuthorizationFailed,
                "Transactional Id authorization failed.".into(),
            ));
        }
        KEY_TRANSACTION => Kind::Transactions,
        // Brokers ask for it; as Kafka, only the cluster may.
        KEY_SHARE if !ctx.access.cluster(Operation::ClusterAction) => {
            return Err((ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed.".into()));
        }
        KEY_SHARE => Kind::ShareState,
        _ => return Err((ResponseError::InvalidRequest, format!("unknown coordinator key type {key_type}"))),
    };
    let info = crate::coordinators::locate(b, kind, key)?;
    let (host, port) = info.endpoint(listener).ok_or_else(|| {
        (ResponseError::CoordinatorNotAvailable, format!("broker {} has no listener named {listener}", info.id))
    })?;
    Ok((BrokerId(info.id), str_bytes(host), port as i32))
}

pub fn handle(b: &Arc<Broker>, r: FindCoordinatorRequest, v: i16, ctx: &Ctx) -> Reply {
    if v >= 4 {
        let coordinators = r
            .coordinator_keys
            .into_iter()
            .map(|key: StrBytes| {
                let found = lookup(b, r.key_type, &key, ctx);
                let out = Coordinator::default().with_key(key);
                match found {
                    Ok((node, host, port)) => out.with_node_id(node).with_host(host).with_port(port),
                    Err((code, msg)) => out
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(code.code())
                        .with_error_message(Some(str_bytes(&msg))),
                }
            })
            .collect();
        return now(FindCoordinatorResponse::default().with_coordinators(coordinators));
    }
    let resp = FindCoordinatorResponse::default();
    now(match lookup(b, if v >= 1 { r.key_type } else { KEY_GROUP }, &r.key, ctx) {
        Ok((node, host, port)) => resp.with_node_id(node).with_host(host).with_port(port),
        Err((code, msg)) => {
            let resp = resp.with_node_id(BrokerId(-1)).with_port(-1).with_error_code(code.code());
            if v >= 1 {
                resp.with_error_message(Some(str_bytes(&msg)))
            } else {
                resp
            }
        }
    })
}
