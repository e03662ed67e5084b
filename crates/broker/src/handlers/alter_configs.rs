//! IncrementalAlterConfigs (key 44: SET, DELETE, APPEND, SUBTRACT per config) and the
//! older AlterConfigs (key 33: replace every override of a resource), for topics and for
//! the broker's dynamic settings, and for groups' configs (`group_configs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use super::str_bytes;
use crate::authz::Access;
use crate::broker::Broker;
use crate::config_change::{apply, validate, Outcome, OP_SET};
use crate::config_change::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use crate::ctx::{Ctx, Reply};
use crate::errors;
use runnel_controller::TopicConfigChange as TopicChange;
use runnel_security::acl::Operation;

type Decided = Result<Altered, (ResponseError, String)>;

/// What became of a resource's change.
enum Altered {
    Done,
    /// A topic's change, for the controller to apply to its copy and commit.
    Topic(String, TopicChange),
    /// This broker's new dynamic settings, to persist and apply.
    Broker(BTreeMap<String, String>),
    /// New cluster-wide dynamic settings, for the controller to commit.
    Defaults(BTreeMap<String, String>),
    /// A group's new configs, for the controller to commit.
    Group(String, BTreeMap<String, String>),
}

/// Computes the new override map for a resource with `change`, validates it and, unless
/// `validate_only`, returns it to apply (a topic's through the controller).
fn alter(
    b: &Broker,
    access: &Access,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    stated: TopicChange,
    change: impl FnOnce(&mut BTreeMap<String, String>) -> Outcome,
) -> Decided {
    access.config_resource(Operation::AlterConfigs, resource_type, name)?;
    match resource_type {
        RESOURCE_TOPIC => {
            let topic = b
                .catalog
                .topic(name)
                .ok_or_else(|| (ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")))?;
            let mut map = topic.configs.clone();
            change(&mut map)?;
            validate(resource_type, &map)?;
            if validate_only {
                return Ok(Altered::Done);
            }
            // Checked here against this broker's copy; applied by the controller to its own.
            Ok(Altered::Topic(name.to_string(), stated))
        }
        RESOURCE_BROKER if name.is_empty() => {
            let mut map = b.controller().broker_defaults();
            change(&mut map)?;
            validate(resource_type, &map)?;
            // As Kafka: what only one broker can have (its TLS stores, and here the fault
            // hooks) is not set for every broker at once.
            let own: Vec<&str> = map
                .keys()
                .map(String::as_str)
                .filter(|k| k.starts_with("fault.") || crate::config::dynamic_listener_ssl(k).is_some())
                .collect();
            if !own.is_empty() {
                let msg = format!(
                    "Cannot update these configs at default cluster level, broker id must be specified: {}",
                    own.join(", ")
                );
                return Err((ResponseError::InvalidRequest, msg));
            }
            Ok(if validate_only { Altered::Done } else { Altered::Defaults(map) })
        }
        RESOURCE_BROKER if b.is_named(name) => {
            let mut map = b.catalog.settings().dynamic().clone();
            change(&mut map)?;
            validate(resource_type, &map)?;
            Ok(if validate_only { Altered::Done } else { Altered::Broker(map) })
        }
        RESOURCE_BROKER => Err((ResponseError::InvalidRequest, format!("Unexpected broker id {name}"))),
        RESOURCE_GROUP if name.is_empty() => {
            Err((ResponseError::InvalidRequest, "Group name must not be empty".into()))
        }
        RESOURCE_GROUP => {
            let mut map = b.controller().group_configs(name);
            change(&mut map)?;
            crate::group_configs::validate(&map, &b.catalog.settings())
                .map_err(|msg| (ResponseError::InvalidConfig, msg))?;
            Ok(if validate_only { Altered::Done } else { Altered::Group(name.to_string(), map) })
        }
        other => Err((ResponseError::InvalidRequest, format!("Unsupported resource type {other}"))),
    }
}

pub fn incremental(b: &Arc<Broker>, r: IncrementalAlterConfigsRequest, _v: i16, ctx: &Ctx) -> Reply {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as Res;
    let items = r
        .resources
        .into_iter()
        .map(|res| {
            let stated = TopicChange {
                replace: false,
                ops: res
                    .configs
                    .iter()
                    .map(|c| (c.name.to_string(), c.config_operation, c.value.as_ref().map(|v| v.to_string())))
                    .collect(),
            };
            let outcome =
                alter(b, &ctx.access, res.resource_type, res.resource_name.as_str(), r.validate_only, stated, |map| {
                    for c in &res.configs {
                        apply(
                            map,
                            res.resource_type,
                            c.name.as_str(),
                            c.config_operation,
                            c.value.as_ref().map(|v| v.as_str()),
                        )?;
                    }
                    Ok(())
                });
            (Res::default().with_resource_type(res.resource_type).with_resource_name(res.resource_name), outcome)
        })
        .collect();
    finish(
        b,
        items,
        |out: Res, code, msg| out.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
        |all| IncrementalAlterConfigsResponse::default().with_responses(all).into(),
    )
}

pub fn legacy(b: &Arc<Broker>, r: AlterConfigsRequest, _v: i16, ctx: &Ctx) -> Reply {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as Res;
    let items = r
        .resources
        .into_iter()
        .map(|res| {
            let stated = TopicChange {
                replace: true,
                ops: res
                    .configs
                    .iter()
                    .map(|c| (c.name.to_string(), OP_SET, c.value.as_ref().map(|v| v.to_string())))
                    .collect(),
            };
            let outcome =
                alter(b, &ctx.access, res.resource_type, res.resource_name.as_str(), r.validate_only, stated, |map| {
                    map.clear();
                    for c in &res.configs {
                        apply(map, res.resource_type, c.name.as_str(), OP_SET, c.value.as_ref().map(|v| v.as_str()))?;
                    }
                    Ok(())
                });
            (Res::default().with_resource_type(res.resource_type).with_resource_name(res.resource_name), outcome)
        })
        .collect();
    finish(
        b,
        items,
        |out: Res, code, msg| out.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
        |all| AlterConfigsResponse::default().with_responses(all).into(),
    )
}

/// Persists and applies this broker's new dynamic settings. A change to a TLS listener's
/// stores (`listener.name.<l>.ssl.*`) is refused unless they load, as Kafka refuses it;
/// once persisted, new connections on that listener get them.
async fn set_broker_configs(b: &Arc<Broker>, map: BTreeMap<String, String>) -> Result<(), (ResponseError, String)> {
    let before = b.catalog.settings().dynamic().clone();
    let tls_of = |m: &BTreeMap<String, String>, listener: &str| -> BTreeMap<String, String> {
        let own = |k: &String| crate::config::dynamic_listener_ssl(k).is_some_and(|(l, _)| l == listener);
        m.iter().filter(|(k, _)| own(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let listeners = b.listener_tls.get().cloned().unwrap_or_default();
    let changed: Vec<_> = listeners
        .into_iter()
        .filter(|(name, _)| tls_of(&before, &name.to_ascii_lowercase()) != tls_of(&map, &name.to_ascii_lowercase()))
        .collect();
    let mut next = b.catalog.settings().clone();
    next.set_dynamic(map.clone());
    if !changed.is_empty() {
        let (check, settings) = (changed.clone(), next.clone());
        let checked = tokio::task::spawn_blocking(move || {
            check.iter().try_for_each(|(name, _)| {
                runnel_security::ServerTls::check(&|k: &str| settings.for_listener(name, k).to_string())
                    .map_err(|e| format!("listener {name}: {e:#}"))
            })
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        if let Err(e) = checked {
            return Err((
                ResponseError::InvalidConfig,
                format!("Validation of dynamic config update of SSLFactory failed: {e}"),
            ));
        }
    }
    b.catalog.set_broker_configs(map).await.map_err(|e| (errors::catalog(&e), e.to_string()))?;
    if !changed.is_empty() {
        let done = tokio::task::spawn_blocking(move || {
            for (name, tls) in changed {
                let (settings, l) = (next.clone(), name.clone());
                match tls.reconfigure(Box::new(move |k: &str| settings.for_listener(&l, k).to_string())) {
                    Ok(()) => {
                        tracing::info!(listener = %name, "TLS stores changed by a dynamic config: new connections use them")
                    }
                    Err(e) => {
                        tracing::warn!(listener = %name, error = %format!("{e:#}"), "dynamic TLS stores did not load")
                    }
                }
            }
        });
        let _ = done.await;
    }
    Ok(())
}

/// Answers once every topic change that the controller must commit is applied here, and
/// every broker change is persisted; everything else was decided already.
fn finish<R: Send + 'static>(
    b: &Arc<Broker>,
    items: Vec<(R, Decided)>,
    fail: fn(R, ResponseError, String) -> R,
    build: fn(Vec<R>) -> kafka_protocol::messages::ResponseKind,
) -> Reply {
    let b = b.clone();
    Box::pin(async move {
        let mut out = Vec::with_capacity(items.len());
        for (res, outcome) in items {
            let outcome = match outcome {
                Ok(Altered::Topic(name, change)) => b.controller().alter_topic_configs(&name, change).await,
                Ok(Altered::Broker(map)) => set_broker_configs(&b, map).await,
                Ok(Altered::Defaults(map)) => b.controller().alter_broker_defaults(map).await,
                Ok(Altered::Group(group, map)) => b.controller().alter_group_configs(group, map).await,
                Ok(Altered::Done) => Ok(()),
                Err(e) => Err(e),
            };
            out.push(match outcome {
                Ok(()) => res,
                Err((code, msg)) => fail(res, code, msg),
            });
        }
        Some(build(out))
    })
}
