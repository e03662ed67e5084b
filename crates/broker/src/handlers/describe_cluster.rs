//! DescribeCluster (key 60): this broker, the cluster id, and who is the controller.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};

pub fn handle(b: &Arc<Broker>, _r: DescribeClusterRequest, v: i16, ctx: &Ctx) -> Reply {
    let cl = b.controller();
    let brokers = super::live_brokers_as(b, &ctx.listener, |id, host, port, rack| {
        DescribeClusterBroker::default().with_broker_id(BrokerId(id)).with_host(host).with_port(port).with_rack(rack)
    });
    let listed: Vec<i32> = brokers.iter().map(|x| x.broker_id.0).collect();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&cl.cluster_id))
        .with_controller_id(BrokerId(super::controller_among(cl.controller(), b.config.node_id, &listed)))
        .with_brokers(brokers);
    if v >= 1 {
        resp.endpoint_type = 1; // brokers
    }
    now(resp)
}
