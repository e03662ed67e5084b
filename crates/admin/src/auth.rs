//! Who may use the admin API. With `admin.authentication=basic`, every path but the probes
//! and the metrics (`/health`, `/ready`, `/metrics`) asks for HTTP Basic credentials: a
//! user and password that the cluster's SCRAM credentials verify (the users made with
//! `kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]'`, either mechanism).
//! The user is then the principal `User:NAME`, authorized as Kafka authorizes a request on
//! the cluster resource: reading (GET) needs DESCRIBE, changing (POST, PUT, DELETE) needs
//! ALTER; with no `authorizer.class.name`, every user that logs in may do both, as in Kafka.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use runnel_broker::broker::Broker;
use runnel_security::acl::{Operation, ResourceType, CLUSTER_NAME};
use runnel_security::ScramMechanism;

use crate::{Peer, Shared};

/// Paths open without credentials: liveness and readiness probes, and Prometheus.
const OPEN: &[&str] = &["/health", "/ready", "/metrics"];

/// `admin.authentication`'s values.
pub const MODES: &[&str] = &["none", "basic"];

/// Longest Authorization header read.
const HEADER_MAX: usize = 1024;

pub(crate) async fn guard(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if OPEN.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let Some(b) = s.broker.upgrade() else { return next.run(req).await };
    if b.catalog.settings().get("admin.authentication").trim() != "basic" {
        return next.run(req).await;
    }
    let Some((user, password)) = credentials(&req) else { return challenge("credentials required") };
    let host = req.extensions().get::<ConnectInfo<Peer>>().map(|c| c.0 .0.ip().to_string());
    let checked = {
        let b = b.clone();
        let user = user.clone();
        // PBKDF2 over thousands of rounds: not on a runtime worker.
        tokio::task::spawn_blocking(move || verify(&b, &user, &password)).await.unwrap_or(false)
    };
    if !checked {
        tracing::info!(%user, "admin API: failed authentication");
        return challenge("bad user or password");
    }
    let op = if req.method() == Method::GET || req.method() == Method::HEAD {
        Operation::Describe
    } else {
        Operation::Alter
    };
    let principal: Arc<str> = format!("User:{user}").into();
    let allowed = b.authorizer.as_ref().is_none_or(|p| {
        p.authorize(
            &b.controller().acls(),
            &principal,
            host.as_deref().unwrap_or(""),
            op,
            ResourceType::Cluster,
            CLUSTER_NAME,
        )
    });
    if !allowed {
        let msg = format!("{principal} may not {op:?} the cluster");
        return (StatusCode::FORBIDDEN, axum::Json(serde_json::json!({ "error": msg }))).into_response();
    }
    next.run(req).await
}

fn challenge(why: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"runnel\", charset=\"UTF-8\"")],
        axum::Json(serde_json::json!({ "error": why })),
    )
        .into_response()
}

/// (user, password) of a `Basic` Authorization header.
fn credentials(req: &Request) -> Option<(String, String)> {
    let value = req.headers().get(header::AUTHORIZATION)?;
    if value.len() > HEADER_MAX {
        return None;
    }
    let encoded = value.to_str().ok()?.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// The password checked against the user's SCRAM credentials (the stronger first).
fn verify(b: &Broker, user: &str, password: &str) -> bool {
    [ScramMechanism::Sha512, ScramMechanism::Sha256]
        .into_iter()
        .any(|m| b.controller().scram_credential(user, m).is_some_and(|c| c.verifies(m, password.as_bytes())))
}
