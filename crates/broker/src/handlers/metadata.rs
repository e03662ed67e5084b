//! Metadata (key 3): this broker, and for each topic asked for (or all) its partitions,
//! all led by this broker. Unknown topics are created when the request and the broker
//! both allow it, as Kafka does.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use runnel_security::acl::Operation;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::catalog::{validate_topic_name, Topic};
use crate::ctx::{now, Ctx, Reply};

pub fn topic_entry(b: &Broker, t: &Topic, v: i16) -> MetadataResponseTopic {
    let me = b.node_id();
    let lag_ticks = crate::replica_manager::isr_lag_ticks(&b.catalog.settings());
    let partitions = t
        .partitions
        .iter()
        .map(|p| {
            let (leader, epoch) = b.partition_leader(p);
            let (replicas, isr): (Vec<BrokerId>, Vec<BrokerId>) = if p.replicas.is_empty() {
                (vec![BrokerId(me)], vec![BrokerId(me)])
            } else {
                let isr = b.partition_isr(p, lag_ticks).into_iter().map(BrokerId).collect();
                (p.replicas.iter().map(|r| BrokerId(*r)).collect(), isr)
            };
            let mut e = MetadataResponsePartition::default()
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(leader))
                .with_isr_nodes(isr)
                .with_replica_nodes(replicas);
            if leader < 0 {
                e.error_code = ResponseError::LeaderNotAvailable.code();
            }
            if v >= 7 {
                e.leader_epoch = epoch;
            }
            e
        })
        .collect();
    let mut topic = MetadataResponseTopic::default()
        .with_name(Some(topic_name(&t.name)))
        .with_partitions(partitions)
        .with_is_internal(v >= 1 && crate::offsets_log::is_internal(&t.name));
    if v >= 10 {
        topic.topic_id = t.id;
    }
    topic
}

fn error_entry(name: Option<&str>, id: uuid::Uuid, code: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default().with_name(name.map(topic_name)).with_topic_id(id).with_error_code(code.code())
}

pub fn handle(b: &Arc<Broker>, r: MetadataRequest, v: i16, ctx: &Ctx) -> Reply {
    let all = match &r.topics {
        None => true,
        Some(list) => v == 0 && list.is_empty(),
    };
    // Before v4 there was no switch: requests could always auto-create.
    let may_create = v < 4 || r.allow_auto_topic_creation;
    let auto_create_enabled = b.catalog.settings().bool("auto.create.topics.enable");
    let access = &ctx.access;
    let denied = |name: Option<&str>, id| error_entry(name, id, ResponseError::TopicAuthorizationFailed);
    // As Kafka: every topic means every topic the client may describe; one named that it may
    // not describe (or may not create, when it would be created) is refused by name.
    let topics: Vec<MetadataResponseTopic> = if all {
        b.catalog
            .topics_snapshot()
            .iter()
            .filter(|t| access.topic(Operation::Describe, &t.name))
            .map(|t| topic_entry(b, t, v))
            .collect()
    } else {
        r.topics
            .unwrap_or_default()
            .into_iter()
            // A topic asked for by id carries a null name, or the empty default some clients
            // leave in it.
            .map(|req| {
                match req.name.as_ref().map(|n| n.0.as_str()).filter(|n| !n.is_empty() || req.topic_id.is_nil()) {
                    Some(name) if !access.topic(Operation::Describe, name) => denied(Some(name), uuid::Uuid::nil()),
                    Some(name) => match b.catalog.topic(name) {
                        Some(t) => topic_entry(b, &t, v),
                        None if validate_topic_name(name).is_err() => {
                            error_entry(Some(name), uuid::Uuid::nil(), ResponseError::InvalidTopicException)
                        }
                        None if may_create && auto_create_enabled && !access.create_topic(name) => {
                            denied(Some(name), uuid::Uuid::nil())
                        }
                        // Being created by the controller: clients retry.
                        None if may_create && b.auto_create(name) => {
                            error_entry(Some(name), uuid::Uuid::nil(), ResponseError::LeaderNotAvailable)
                        }
                        None => error_entry(Some(name), uuid::Uuid::nil(), ResponseError::UnknownTopicOrPartition),
                    },
                    None => match b.catalog.topic_by_id(req.topic_id) {
                        Some(t) if !access.topic(Operation::Describe, &t.name) => denied(None, req.topic_id),
                        Some(t) => topic_entry(b, &t, v),
                        None => error_entry(None, req.topic_id, ResponseError::UnknownTopicId),
                    },
                }
            })
            .collect()
    };
    let c = &b.config;
    let cl = b.controller();
    // Each broker at the address of the listener this client came through.
    let mut brokers = super::live_brokers_as(b, &ctx.listener, |id, host, port, rack| {
        MetadataResponseBroker::default().with_node_id(BrokerId(id)).with_host(host).with_port(port).with_rack(rack)
    });
    if !brokers.iter().any(|x| x.node_id.0 == c.node_id) {
        if let Some(l) = c.listeners.iter().find(|l| *l.name == *ctx.listener) {
            brokers.push(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(c.node_id))
                    .with_host(str_bytes(&l.advertised_host))
                    .with_port(l.advertised_port as i32),
            );
        }
    }
    let listed: Vec<i32> = brokers.iter().map(|x| x.node_id.0).collect();
    let (controller, cluster_id) =
        (super::controller_among(cl.controller(), c.node_id, &listed), cl.cluster_id.clone());
    let mut resp = MetadataResponse::default().with_brokers(brokers).with_topics(topics);
    if v >= 1 {
        resp.controller_id = BrokerId(controller);
    }
    if v >= 2 {
        resp.cluster_id = Some(str_bytes(&cluster_id));
    }
    now(resp)
}
