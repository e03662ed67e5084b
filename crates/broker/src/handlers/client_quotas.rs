//! AlterClientQuotas (key 49) and DescribeClientQuotas (key 48): client quotas in the
//! metadata log, what `kafka-configs.sh --entity-type users|clients --alter --add-config
//! producer_byte_rate=...` and `--describe` use. Entities, keys and values are checked as
//! Kafka checks them; a DescribeClientQuotas filter too (entity types user, client-id and
//! ip, each once, ip alone; a match for exact matches only). Changing quotas takes
//! ALTER_CONFIGS on the cluster and listing them DESCRIBE_CONFIGS.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest, AlterClientQuotasResponse,
    DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use runnel_security::quota::{Entity, Name};

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

pub fn describe(b: &Arc<Broker>, r: DescribeClientQuotasRequest, _v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::DescribeConfigs) {
        return now(DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("Cluster authorization failed."))));
    }
    if let Err(message) = check(&r) {
        return now(DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(&message))));
    }
    use describe_client_quotas_response::{EntityData, EntryData, ValueData};
    let entries = b
        .controller()
        .client_quotas()
        .iter()
        .filter(|(entity, _)| matches(&r, entity))
        .map(|(entity, values)| {
            let entity = entity
                .components()
                .into_iter()
                .map(|(t, n)| EntityData::default().with_entity_type(str_bytes(t)).with_entity_name(n.map(str_bytes)))
                .collect();
            let values =
                values.iter().map(|(k, v)| ValueData::default().with_key(str_bytes(k)).with_value(*v)).collect();
            EntryData::default().with_entity(entity).with_values(values)
        })
        .collect();
    now(DescribeClientQuotasResponse::default().with_entries(Some(entries)))
}

/// Whether `entity` passes the (checked) filter: each component names a type the entity
/// has, matching (a name, the default, or any); strict, it has no other type.
fn matches(r: &DescribeClientQuotasRequest, entity: &Entity) -> bool {
    let slot = |t: &str| match t {
        "user" => &entity.user,
        "client-id" => &entity.client_id,
        _ => &entity.ip,
    };
    let each = r.components.iter().all(|c| match (slot(&c.entity_type), c.match_type) {
        (None, _) => false,
        (Some(n), MATCH_EXACT) => n.wire() == c._match.as_deref(),
        (Some(n), MATCH_DEFAULT) => *n == Name::Default,
        (Some(_), _) => true,
    });
    each && (!r.strict || entity.components().len() == r.components.len())
}

pub fn alter(b: &Arc<Broker>, r: AlterClientQuotasRequest, _v: i16, ctx: &Ctx) -> Reply {
    let allowed = ctx.access.cluster(Operation::AlterConfigs);
    // Each entry's entity as the request gave it, and its changes or why it is refused.
    type Changes = Vec<(Entity, String, Option<f64>)>;
    let checked: Vec<(_, Result<Changes, (ResponseError, String)>)> = r
        .entries
        .iter()
        .map(|e| {
            let given: Vec<(String, Option<String>)> = e
                .entity
                .iter()
                .map(|c| (c.entity_type.to_string(), c.entity_name.as_ref().map(|n| n.to_string())))
                .collect();
            let outcome = (|| {
                if !allowed {
                    return Err((ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed.".into()));
                }
                let entity =
                    Entity::from_components(e.entity.iter().map(|c| (&*c.entity_type, c.entity_name.as_deref())))
                        .map_err(|m| (ResponseError::InvalidRequest, m))?;
                let mut seen = HashSet::new();
                e.ops
                    .iter()
                    .map(|op| {
                        if !seen.insert(op.key.as_str()) {
                            return Err((
                                ResponseError::InvalidRequest,
                                format!("Duplicate quota key {}", op.key.as_str()),
                            ));
                        }
                        if op.remove {
                            let known = entity.check(&op.key, 1.0).map_err(|m| (ResponseError::InvalidRequest, m));
                            return known.map(|_| (entity.clone(), op.key.to_string(), None));
                        }
                        entity.check(&op.key, op.value).map_err(|m| (ResponseError::InvalidRequest, m))?;
                        Ok((entity.clone(), op.key.to_string(), Some(op.value)))
                    })
                    .collect()
            })();
            (given, outcome)
        })
        .collect();
    let changes: Changes = checked.iter().filter_map(|(_, c)| c.as_ref().ok()).flatten().cloned().collect();
    let (b, validate_only) = (b.clone(), r.validate_only);
    Box::pin(async move {
        let outcome = match changes.is_empty() || validate_only {
            true => Ok(()),
            false => b.controller().alter_client_quotas(changes).await,
        };
        use alter_client_quotas_response::{EntityData, EntryData};
        let entries = checked
            .into_iter()
            .map(|(given, checked)| {
                let entity = given
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(str_bytes(t))
                            .with_entity_name(n.as_deref().map(str_bytes))
                    })
                    .collect();
                let (code, message) = match (checked, &outcome) {
                    (Err((e, m)), _) => (e.code(), Some(m)),
                    (Ok(_), Err((e, m))) => (e.code(), Some(m.clone())),
                    (Ok(_), Ok(())) => (0, None),
                };
                EntryData::default()
                    .with_entity(entity)
                    .with_error_code(code)
                    .with_error_message(message.map(|m| str_bytes(&m)))
            })
            .collect();
        Some(AlterClientQuotasResponse::default().with_entries(entries).into())
    })
}
