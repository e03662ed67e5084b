//! ListConfigResources (key 74): the resources DescribeConfigs can be asked about, by type
//! (KIP-1142, v1); v0 was ListClientMetricsResources (KIP-714) and lists client-metrics
//! subscriptions only. Like Kafka, it needs DESCRIBE_CONFIGS on the cluster. Runnel has
//! topic, broker and group configs (groups with configs set are listed); client-metrics
//! subscriptions and broker loggers it has none of, so those types list nothing.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse};
use runnel_security::acl::Operation;

use super::str_bytes;
use crate::broker::Broker;
use crate::config_change::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use crate::ctx::{now, Ctx, Reply};

const RESOURCE_BROKER_LOGGER: i8 = 8;
const RESOURCE_CLIENT_METRICS: i8 = 16;

pub fn handle(b: &Arc<Broker>, r: ListConfigResourcesRequest, v: i16, ctx: &Ctx) -> Reply {
    let resp = ListConfigResourcesResponse::default();
    if !ctx.access.cluster(Operation::DescribeConfigs) {
        return now(resp.with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
    }
    let types: Vec<i8> = match (v, r.resource_types.is_empty()) {
        (0, _) => vec![RESOURCE_CLIENT_METRICS],
        (_, true) => {
            vec![RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP]
        }
        (_, false) => r.resource_types.clone(),
    };
    let mut out = Vec::new();
    for t in types {
        let names: Vec<String> = match t {
            RESOURCE_TOPIC => b.catalog.topics_snapshot().iter().map(|t| t.name.to_string()).collect(),
            RESOURCE_BROKER => b.controller().live_brokers().iter().map(|i| i.id.to_string()).collect(),
            RESOURCE_GROUP => b.controller().groups_with_configs(),
            RESOURCE_BROKER_LOGGER | RESOURCE_CLIENT_METRICS => Vec::new(),
            // A type Kafka does not define.
            _ => return now(resp.with_error_code(ResponseError::InvalidRequest.code())),
        };
        out.extend(
            names
                .into_iter()
                .map(|n| ConfigResource::default().with_resource_name(str_bytes(&n)).with_resource_type(t)),
        );
    }
    now(resp.with_config_resources(out))
}
