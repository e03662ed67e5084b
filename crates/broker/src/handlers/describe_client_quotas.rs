//! DescribeClientQuotas (key 48), which `kafka-configs.sh --entity-type users|clients
//! --describe` asks alongside SCRAM credentials. The filter is checked as Kafka checks it
//! (entity types user, client-id and ip, each once, ip alone; a match for exact matches
//! only); the answer lists the quotas that match, and as Runnel has no way to set client
//! quotas yet (AlterClientQuotas is not served), there are none to list.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

fn check(r: &DescribeClientQuotasRequest) -> Result<(), String> {
    let mut types = HashSet::new();
    for c in &r.components {
        let t = c.entity_type.as_str();
        if !matches!(t, "user" | "client-id" | "ip") {
            return Err(format!("Custom entity type '{t}' not supported"));
        }
        if !types.insert(t) {
            return Err(format!("Duplicate {t} filter component entity type"));
        }
        match (c.match_type, &c._match) {
            (MATCH_EXACT, None) => return Err(format!("Missing match for exact match on {t}")),
            (MATCH_DEFAULT | MATCH_ANY, Some(_)) => return Err(format!("Unexpected match for {t}")),
            (MATCH_EXACT | MATCH_DEFAULT | MATCH_ANY, _) => {}
            (other, _) => return Err(format!("Unknown match type {other}")),
        }
    }
    if types.contains("ip") && types.len() > 1 {
        return Err("Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component.".into());
    }
    Ok(())
}

pub fn handle(_b: &Arc<Broker>, r: DescribeClientQuotasRequest, _v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::DescribeConfigs) {
        return now(DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("Cluster authorization failed."))));
    }
    let resp = match check(&r) {
        Ok(()) => DescribeClientQuotasResponse::default().with_entries(Some(Vec::new())),
        Err(message) => DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(&message))),
    };
    now(resp)
}
