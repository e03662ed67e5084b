//! DescribeCluster (key 60): this broker, the cluster id, and who is the controller.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};

pub fn handle(b: &Arc<Broker>, _r: DescribeClusterRequest, v: i16, ctx: &Ctx) -> Reply {
    let cl = b.controller();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&cl.cluster_id))
        .with_controller_id(BrokerId(cl.controller().unwrap_or(-1)))
        .with_brokers(
            cl.live_brokers()
                .into_iter()
                .filter_map(|info| {
                    let (host, port) = info.endpoint(&ctx.listener)?;
                    Some(
                        DescribeClusterBroker::default()
                            .with_broker_id(BrokerId(info.id))
                            .with_host(str_bytes(host))
                            .with_port(port as i32)
                            .with_rack(info.rack().map(|r| str_bytes(&r))),
                    )
                })
                .collect(),
        );
    if v >= 1 {
        resp.endpoint_type = 1; // brokers
    }
    now(resp)
}
