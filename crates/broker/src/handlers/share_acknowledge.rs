//! ShareAcknowledge (key 79, KIP-932): a share-group member acknowledges records it was
//! handed (accept, release, reject, gap) without fetching more; each partition's
//! acknowledgements are durable before the answer. Epoch -1 closes the member's share
//! session, and what it still holds goes back to the group.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{BrokerId, ShareAcknowledgeRequest, ShareAcknowledgeResponse};

use super::str_bytes;
use crate::ctx::{now, Ctx, Reply};
use crate::share::{self, acknowledge_all, leader_of, member_of, readable};

pub fn handle(b: &Arc<crate::broker::Broker>, r: ShareAcknowledgeRequest, _v: i16, ctx: &Ctx) -> Reply {
    let top = |code: ResponseError, msg: &str| {
        now(ShareAcknowledgeResponse::default().with_error_code(code.code()).with_error_message(Some(str_bytes(msg))))
    };
    let (group, member) = match member_of(r.group_id.as_ref(), r.member_id.as_ref(), ctx) {
        Ok(ids) => ids,
        Err((code, msg)) => return top(code, msg),
    };
    let epoch = r.share_session_epoch;
    if epoch == 0 {
        return top(ResponseError::InvalidShareSessionEpoch, "A share session cannot start with ShareAcknowledge.");
    }
    let max_sessions = b.config.settings.usize("group.share.max.share.sessions").max(1);
    let view = match b.shares.session(&group, &member, epoch, &[], &[], max_sessions) {
        Ok(view) => view,
        Err(e) => return top(e, e.to_string().as_str()),
    };
    let acks: Vec<_> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|a| (a.first_offset, a.last_offset, a.acknowledge_types.clone()))
                    .collect();
                ((t.topic_id, p.partition_index), batches)
            })
        })
        .map(|(tp, batches)| (tp, readable(b, ctx, &tp).map(|_| batches)))
        .collect();
    let listener = ctx.listener.to_string();
    let b = b.clone();
    Box::pin(async move {
        let codes = acknowledge_all(&b, &group, &member, acks).await;
        if epoch == -1 {
            share::close_session(&b, &group, &member, &view.parts).await;
        }
        let mut topics: BTreeMap<uuid::Uuid, Vec<PartitionData>> = BTreeMap::new();
        let mut endpoints: BTreeMap<i32, NodeEndpoint> = BTreeMap::new();
        for (tp, code) in codes {
            let (leader, leader_epoch, endpoint) = leader_of(&b, &tp, &listener);
            if let (Some((host, port)), true) = (endpoint, code == ResponseError::NotLeaderOrFollower.code()) {
                endpoints.insert(
                    leader,
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(leader))
                        .with_host(str_bytes(&host))
                        .with_port(port as i32),
                );
            }
            topics.entry(tp.0).or_default().push(
                PartitionData::default().with_partition_index(tp.1).with_error_code(code).with_current_leader(
                    LeaderIdAndEpoch::default().with_leader_id(leader).with_leader_epoch(leader_epoch),
                ),
            );
        }
        let responses = topics
            .into_iter()
            .map(|(id, partitions)| {
                ShareAcknowledgeTopicResponse::default().with_topic_id(id).with_partitions(partitions)
            })
            .collect();
        Some(
            ShareAcknowledgeResponse::default()
                .with_responses(responses)
                .with_node_endpoints(endpoints.into_values().collect())
                .into(),
        )
    })
}
