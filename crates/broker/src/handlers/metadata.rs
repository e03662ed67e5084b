//! Metadata (key 3): this broker, and for each topic asked for (or all) its partitions,
//! all led by this broker. Unknown topics are created when the request and the broker
//! both allow it, as Kafka does.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::catalog::{validate_topic_name, Topic};
use crate::dispatch::{now, Reply};

pub fn topic_entry(b: &Broker, t: &Topic, v: i16) -> MetadataResponseTopic {
    let me = BrokerId(b.node_id());
    let partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut e = MetadataResponsePartition::default()
                .with_partition_index(p.index)
                .with_leader_id(me)
                .with_replica_nodes(vec![me])
                .with_isr_nodes(vec![me]);
            if v >= 7 {
                e.leader_epoch = 0;
            }
            e
        })
        .collect();
    let mut topic = MetadataResponseTopic::default()
        .with_name(Some(topic_name(&t.name)))
        .with_partitions(partitions)
        .with_is_internal(v >= 1 && &*t.name == crate::offsets_log::OFFSETS_TOPIC);
    if v >= 10 {
        topic.topic_id = t.id;
    }
    topic
}

fn error_entry(name: Option<&str>, id: uuid::Uuid, code: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default().with_name(name.map(topic_name)).with_topic_id(id).with_error_code(code.code())
}

pub fn handle(b: &Arc<Broker>, r: MetadataRequest, v: i16) -> Reply {
    let all = match &r.topics {
        None => true,
        Some(list) => v == 0 && list.is_empty(),
    };
    // Before v4 there was no switch: requests could always auto-create.
    let may_create = v < 4 || r.allow_auto_topic_creation;
    let topics: Vec<MetadataResponseTopic> = if all {
        b.catalog.topics_snapshot().iter().map(|t| topic_entry(b, t, v)).collect()
    } else {
        r.topics
            .unwrap_or_default()
            .into_iter()
            // A topic asked for by id carries a null name, or the empty default some clients
            // leave in it.
            .map(|req| {
                match req.name.as_ref().map(|n| n.0.as_str()).filter(|n| !n.is_empty() || req.topic_id.is_nil()) {
                    Some(name) => match b.catalog.topic(name) {
                        Some(t) => topic_entry(b, &t, v),
                        None if validate_topic_name(name).is_err() => {
                            error_entry(Some(name), uuid::Uuid::nil(), ResponseError::InvalidTopicException)
                        }
                        None => match may_create.then(|| b.auto_create(name)).flatten() {
                            Some(t) => topic_entry(b, &t, v),
                            None => error_entry(Some(name), uuid::Uuid::nil(), ResponseError::UnknownTopicOrPartition),
                        },
                    },
                    None => match b.catalog.topic_by_id(req.topic_id) {
                        Some(t) => topic_entry(b, &t, v),
                        None => error_entry(None, req.topic_id, ResponseError::UnknownTopicId),
                    },
                }
            })
            .collect()
    };
    let c = &b.config;
    let me = MetadataResponseBroker::default()
        .with_node_id(BrokerId(c.node_id))
        .with_host(str_bytes(&c.advertised_host))
        .with_port(c.advertised_port as i32);
    let mut resp = MetadataResponse::default().with_brokers(vec![me]).with_topics(topics);
    if v >= 1 {
        resp.controller_id = BrokerId(c.node_id);
    }
    if v >= 2 {
        resp.cluster_id = Some(str_bytes(&b.catalog.cluster_id));
    }
    now(resp)
}
