//! A broker's dynamic settings, written and read over the Kafka protocol
//! (IncrementalAlterConfigs, DescribeConfigs on the broker resource): how `runnel chaos`
//! turns the storage layer's fault hooks on and off.

use anyhow::{bail, Result};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use runnel_verify::router::Router;

/// Sets (`Some`) or removes (`None`) a dynamic setting of broker `id`, asking that broker.
pub async fn set_broker_config(router: &mut Router, addr: &str, id: u16, key: &str, value: Option<&str>) -> Result<()> {
    let op = if value.is_some() { 0 } else { 1 };
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(4)
        .with_resource_name(StrBytes::from_string(id.to_string()))
        .with_configs(vec![AlterableConfig::default()
            .with_name(StrBytes::from_string(key.to_string()))
            .with_config_operation(op)
            .with_value(value.map(|v| StrBytes::from_string(v.to_string())))])]);
    let resp = router.call_at(addr, &req, 1).await?;
    match resp.responses.first().map(|r| r.error_code) {
        Some(0) => Ok(()),
        code => bail!("setting {key} on broker {id}: error code {code:?}"),
    }
}

/// Whether broker `id` has the setting `key`: a disk fault needs Runnel's fault hooks
/// (Apache Kafka would accept `fault.disk.*` as a custom setting and do nothing with it).
pub async fn has_broker_setting(router: &mut Router, addr: &str, id: u16, key: &str) -> Result<bool> {
    let req = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(4)
        .with_resource_name(StrBytes::from_string(id.to_string()))
        .with_configuration_keys(Some(vec![StrBytes::from_string(key.to_string())]))]);
    let resp = router.call_at(addr, &req, 1).await?;
    Ok(resp.results.iter().any(|r| r.error_code == 0 && r.configs.iter().any(|c| c.name.as_str() == key)))
}
