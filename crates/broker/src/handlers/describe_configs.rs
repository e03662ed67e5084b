//! DescribeConfigs (key 32): topic configs (override, else the broker's value, with where
//! it came from), broker settings and group configs.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::config_change::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::config_view::{broker_entries, topic_config_entries};
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: DescribeConfigsRequest, v: i16, ctx: &Ctx) -> Reply {
    let settings = b.catalog.settings().clone();
    let results = r
        .resources
        .into_iter()
        .map(|res| {
            let keys: Option<Vec<String>> = res.configuration_keys.map(|k| k.iter().map(|s| s.to_string()).collect());
            let out = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name.clone());
            let fail = |out: DescribeConfigsResult, code: ResponseError, msg: String| {
                out.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg)))
            };
            let name = res.resource_name.as_str();
            if let Err((code, msg)) = ctx.access.config_resource(Operation::DescribeConfigs, res.resource_type, name) {
                return fail(out, code, msg);
            }
            match res.resource_type {
                RESOURCE_TOPIC => match b.catalog.topic(name) {
                    Some(t) => out.with_configs(topic_config_entries(
                        &t.configs,
                        &settings,
                        keys.as_deref(),
                        r.include_synonyms,
                        v,
                    )),
                    None => {
                        fail(out, ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))
                    }
                },
                RESOURCE_BROKER if name.is_empty() => out.with_configs(crate::config_view::cluster_default_entries(
                    &b.controller().broker_defaults(),
                    keys.as_deref(),
                    r.include_synonyms,
                    v,
                )),
                RESOURCE_BROKER if b.is_named(name) => out.with_configs(broker_entries(&settings, keys.as_deref(), v)),
                RESOURCE_BROKER => fail(out, ResponseError::InvalidRequest, format!("Unexpected broker id {name}")),
                crate::config_change::RESOURCE_GROUP => out.with_configs(crate::config_view::group_entries(
                    &b.controller().group_configs(name),
                    &settings,
                    keys.as_deref(),
                    r.include_synonyms,
                    v,
                )),
                other => fail(out, ResponseError::InvalidRequest, format!("Unsupported resource type {other}")),
            }
        })
        .collect();
    now(DescribeConfigsResponse::default().with_results(results))
}
