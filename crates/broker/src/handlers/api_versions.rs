//! ApiVersions (key 18): the table in `dispatch::APIS`, nothing else.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::broker::Broker;
use crate::dispatch::{now, Reply, APIS};

fn api_keys() -> Vec<ApiVersion> {
    APIS.iter()
        .map(|(k, min, max)| {
            ApiVersion::default().with_api_key(*k as i16).with_min_version(*min).with_max_version(*max)
        })
        .collect()
}

pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_error_code(ResponseError::UnsupportedVersion.code()).with_api_keys(api_keys())
}

pub fn handle(_b: &Arc<Broker>, _r: ApiVersionsRequest, _v: i16) -> Reply {
    now(ApiVersionsResponse::default().with_api_keys(api_keys()))
}
