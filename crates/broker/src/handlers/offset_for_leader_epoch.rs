//! OffsetForLeaderEpoch (key 23): consumers validate their position after a leader change
//! (KIP-320). A single broker has one leader epoch (0) for every partition, so the end
//! offset of any epoch at or above it is the log end.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: OffsetForLeaderEpochRequest, _v: i16, ctx: &Ctx) -> Reply {
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let allowed = ctx.access.topic(Operation::Describe, &t.topic.0);
            let topic = b.catalog.topic(&t.topic.0).filter(|_| allowed);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut out = EpochEndOffset::default().with_partition(p.partition);
                    let part = topic.as_ref().and_then(|t| t.partitions.get(p.partition as usize));
                    match part {
                        None if !allowed => out.error_code = ResponseError::TopicAuthorizationFailed.code(),
                        None => out.error_code = ResponseError::UnknownTopicOrPartition.code(),
                        Some(part) => {
                            let (_, epoch) = part.leader();
                            if let Some(e) = part.leader_error() {
                                out.error_code = crate::errors::partition(&e).code();
                            } else if p.current_leader_epoch > epoch {
                                out.error_code = ResponseError::UnknownLeaderEpoch.code();
                            } else if p.current_leader_epoch >= 0 && p.current_leader_epoch < epoch {
                                out.error_code = ResponseError::FencedLeaderEpoch.code();
                            } else {
                                let (leader_epoch, end_offset) = part.epoch_end_offset(p.leader_epoch);
                                out.leader_epoch = leader_epoch;
                                out.end_offset = end_offset;
                            }
                        }
                    }
                    out
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(t.topic).with_partitions(partitions)
        })
        .collect();
    now(OffsetForLeaderEpochResponse::default().with_topics(topics))
}
