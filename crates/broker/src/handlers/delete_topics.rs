//! DeleteTopics (key 20): by name, or (v6+) by topic id.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: DeleteTopicsRequest, v: i16, ctx: &Ctx) -> Reply {
    let b = b.clone();
    let access = ctx.access.clone();
    Box::pin(async move {
        let enabled = b.catalog.settings().bool("delete.topic.enable");
        let controller = b.controller().clone();
        // v6 moved the names into `topics`, which may name a topic by id instead.
        let wanted: Vec<(Option<String>, uuid::Uuid)> = if v >= 6 {
            r.topics.into_iter().map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id)).collect()
        } else {
            r.topic_names.into_iter().map(|n| (Some(n.0.to_string()), uuid::Uuid::nil())).collect()
        };
        let mut responses = Vec::with_capacity(wanted.len());
        for (name, id) in wanted {
            let topic = match &name {
                Some(n) => b.catalog.topic(n),
                None => b.catalog.topic_by_id(id),
            };
            let mut res = DeletableTopicResult::default().with_name(name.as_deref().map(topic_name));
            let named = name.clone().or_else(|| topic.as_ref().map(|t| t.name.to_string()));
            let allowed = named.as_ref().is_none_or(|n| access.topic(Operation::Delete, n));
            let outcome = match topic {
                _ if !allowed => Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".to_string())),
                None => {
                    let code = if name.is_some() {
                        ResponseError::UnknownTopicOrPartition
                    } else {
                        ResponseError::UnknownTopicId
                    };
                    Err((code, "This server does not host this topic.".to_string()))
                }
                Some(topic) => {
                    if v >= 6 {
                        res.topic_id = topic.id;
                        res.name = Some(topic_name(&topic.name));
                    }
                    if !enabled {
                        Err((ResponseError::TopicDeletionDisabled, "Topic deletion is disabled.".to_string()))
                    } else {
                        controller.delete_topic(&topic.name).await
                    }
                }
            };
            if let Err((code, msg)) = outcome {
                res.error_code = code.code();
                if v >= 5 {
                    res.error_message = Some(str_bytes(&msg));
                }
            }
            responses.push(res);
        }
        Some(DeleteTopicsResponse::default().with_responses(responses).into())
    })
}
