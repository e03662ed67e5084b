//! The admin listener (`admin.listeners`, e.g. `http://127.0.0.1:9644`): HTTP, apart from
//! the Kafka listeners, loopback unless configured otherwise. It serves `/metrics`, the
//! broker's metrics in the Prometheus text format (`docs/metrics.md`), and the admin API
//! (`docs/admin.md`): `/health`, `/ready`, `/v1/brokers`, `/v1/partitions`, a broker's
//! drain (maintenance mode), a partition's leader, the log filter.

mod api;
mod auth;
mod console;
pub mod http;
mod ops;

pub use ops::LogFilter;

use std::sync::{Arc, Weak};

use anyhow::{bail, Context, Result};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use axum::Router;
use runnel_broker::broker::Broker;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The addresses `admin.listeners` names (`http://host:port` entries, comma-separated), as
/// `host:port`.
pub fn addresses(setting: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in setting.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some(address) = entry.strip_prefix("http://") else {
            bail!("admin.listeners: '{entry}' is not http://host:port");
        };
        let address = address.trim_end_matches('/');
        let port = address.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
        if port.and_then(|p| p.parse::<u16>().ok()).is_none() {
            bail!("admin.listeners: '{entry}' is not http://host:port");
        }
        out.push(address.to_string());
    }
    Ok(out)
}

/// Checks `admin.authentication` (one of [`auth::MODES`]).
pub fn check_authentication(setting: &str) -> Result<()> {
    if !auth::MODES.contains(&setting.trim()) {
        bail!("admin.authentication: '{setting}' is not one of {}", auth::MODES.join(", "));
    }
    Ok(())
}

/// Binds every admin listener, so that a port in use stops the broker before it starts.
pub async fn bind(setting: &str) -> Result<Vec<TcpListener>> {
    let mut listeners = Vec::new();
    for addr in addresses(setting)? {
        listeners.push(TcpListener::bind(&addr).await.with_context(|| format!("binding admin listener {addr}"))?);
    }
    Ok(listeners)
}

/// Open connections per admin listener at most; more wait to be accepted.
pub const CONNECTIONS_MAX: usize = 64;

/// Serves the bound listeners while the broker runs; `log` changes the process's log
/// filter (none: `/v1/log-level` is not offered).
pub fn serve(listeners: Vec<TcpListener>, broker: &Arc<Broker>, log: Option<LogFilter>) {
    let state = Shared { broker: Arc::downgrade(broker), log };
    for listener in listeners {
        let app = router(state.clone());
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "admin listener: /metrics, /health, /ready, /v1/...");
        }
        let bounded = Bounded { listener, permits: Arc::new(Semaphore::new(CONNECTIONS_MAX)) };
        tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<Peer>();
            if let Err(e) = axum::serve(bounded, app).await {
                tracing::warn!(error = %e, "admin listener stopped");
            }
        });
    }
}

/// A listener that holds at most [`CONNECTIONS_MAX`] connections open: each carries a
/// permit until it closes.
struct Bounded {
    listener: TcpListener,
    permits: Arc<Semaphore>,
}

impl axum::serve::Listener for Bounded {
    type Io = Counted;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Counted, std::net::SocketAddr) {
        loop {
            // The semaphore is never closed; were it, nothing more would be accepted.
            let permit = match self.permits.clone().acquire_owned().await {
                Ok(permit) => permit,
                Err(_) => std::future::pending().await,
            };
            match self.listener.accept().await {
                Ok((stream, addr)) => return (Counted { stream, _permit: permit }, addr),
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin.
                    tracing::warn!(error = %e, "admin listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }
}

/// The address an admin request came from (for ACLs that name hosts).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub(crate) std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Bounded>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Bounded>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// An admin connection with its permit.
struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

fn router(state: Shared) -> Router {
    console::routes(Router::new())
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/v1/brokers", get(brokers))
        .route("/v1/brokers/{id}/drain", get(drain_status).post(drain).delete(undrain))
        .route("/v1/brokers/{id}/decommission", get(decommission_status).post(decommission))
        .route("/v1/partitions", get(partitions))
        .route("/v1/groups", get(groups))
        .route("/v1/partitions/{topic}/{partition}/leader", post(transfer_leader))
        .route("/v1/log-level", get(log_level).put(set_log_level))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::guard))
        .with_state(state)
}

#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) broker: Weak<Broker>,
    log: Option<LogFilter>,
}

/// A handler's answer; the error side is the answer of a broker that has stopped.
type Answer = Result<Response, Gone>;

/// The broker has stopped: 503.
struct Gone;

impl IntoResponse for Gone {
    fn into_response(self) -> Response {
        (StatusCode::SERVICE_UNAVAILABLE, "the broker has stopped\n").into_response()
    }
}

impl Shared {
    fn broker(&self) -> Result<Arc<Broker>, Gone> {
        self.broker.upgrade().ok_or(Gone)
    }
}

/// A JSON answer, or the refusal as `{"error": ...}` with its status.
fn answer<T: serde::Serialize>(r: Result<T, ops::Refused>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(ops::Refused(status, error)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, Json(serde_json::json!({ "error": error }))).into_response()
        }
    }
}

/// Live: the process answers and its broker has not stopped.
async fn health(State(s): State<Shared>) -> Answer {
    s.broker()?;
    Ok((StatusCode::OK, "ok\n").into_response())
}

/// Ready (200) or not (503), with what it waits for.
async fn ready(State(s): State<Shared>) -> Answer {
    let b = s.broker()?;
    let r = api::readiness(&b);
    let status = if r.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    Ok((status, Json(r)).into_response())
}

async fn brokers(State(s): State<Shared>) -> Answer {
    let b = s.broker()?;
    Ok(Json(api::brokers(&b)).into_response())
}

async fn drain_status(State(s): State<Shared>, Path(id): Path<i32>) -> Answer {
    let b = s.broker()?;
    Ok(answer(ops::drain_view(&b, id)))
}

async fn drain(State(s): State<Shared>, Path(id): Path<i32>) -> Answer {
    let b = s.broker()?;
    Ok(answer(ops::set_drain(&b, id, true).await))
}

async fn undrain(State(s): State<Shared>, Path(id): Path<i32>) -> Answer {
    let b = s.broker()?;
    Ok(answer(ops::set_drain(&b, id, false).await))
}

async fn decommission_status(State(s): State<Shared>, Path(id): Path<i32>) -> Answer {
    let b = s.broker()?;
    Ok(answer(ops::decommission_view(&b, id)))
}

async fn decommission(State(s): State<Shared>, Path(id): Path<i32>) -> Answer {
    let b = s.broker()?;
    Ok(answer(ops::decommission(&b, id).await))
}

#[derive(serde::Deserialize)]
struct TransferBody {
    broker: i32,
}

async fn transfer_leader(
    State(s): State<Shared>,
    Path((topic, partition)): Path<(String, i32)>,
    Json(body): Json<TransferBody>,
) -> Answer {
    let b = s.broker()?;
    Ok(answer(ops::transfer_leader(&b, &topic, partition, body.broker).await))
}

#[derive(serde::Deserialize)]
struct LogLevelBody {
    filter: String,
}

fn log_filter(s: &Shared, new: Option<&str>) -> Response {
    let Some(log) = &s.log else {
        return answer::<()>(Err(ops::Refused(404, "the log filter cannot be changed in this process".into())));
    };
    answer(log(new).map(|filter| serde_json::json!({ "filter": filter })).map_err(|e| ops::Refused(400, e)))
}

async fn log_level(State(s): State<Shared>) -> Response {
    log_filter(&s, None)
}

async fn set_log_level(State(s): State<Shared>, Json(body): Json<LogLevelBody>) -> Response {
    log_filter(&s, Some(&body.filter))
}

#[derive(serde::Deserialize)]
struct PartitionsQuery {
    topic: Option<String>,
}

async fn partitions(State(s): State<Shared>, Query(q): Query<PartitionsQuery>) -> Answer {
    let b = s.broker()?;
    Ok(Json(api::partitions(&b, q.topic.as_deref())).into_response())
}

#[derive(serde::Deserialize)]
struct GroupsQuery {
    /// `local`: only the groups this broker coordinates; else every broker's.
    scope: Option<String>,
}

/// How long a peer's groups are waited for.
const PEER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The consumer groups with their lag: this broker's, and, unless `scope=local`, those
/// every other live broker coordinates (asked of its admin API, concurrently; the brokers
/// that did not answer in time are listed as `unreachable`).
async fn groups(State(s): State<Shared>, Query(q): Query<GroupsQuery>, headers: axum::http::HeaderMap) -> Answer {
    let b = s.broker()?;
    // The caller's credentials, for peers that ask for them too (admin.authentication).
    let authorization: Option<Arc<str>> =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(Arc::from);
    let mut all = api::Groups { groups: api::local_groups(&b), unreachable: Vec::new() };
    if q.scope.as_deref() != Some("local") {
        let me = b.node_id();
        let mut asked = tokio::task::JoinSet::new();
        for peer in b.controller().live_brokers().into_iter().filter(|i| i.id != me) {
            let authorization = authorization.clone();
            asked.spawn(async move {
                let got = match peer.admin.is_empty() {
                    true => Err(anyhow::anyhow!("no admin listener")),
                    false => http::get(&peer.admin, "/v1/groups?scope=local", authorization.as_deref(), PEER_WAIT)
                        .await
                        .and_then(|body| Ok(serde_json::from_slice::<api::Groups>(&body)?)),
                };
                (peer.id, got)
            });
        }
        while let Some(done) = asked.join_next().await {
            let Ok((id, got)) = done else { continue };
            match got {
                Ok(theirs) => all.groups.extend(theirs.groups),
                Err(e) => {
                    tracing::debug!(broker = id, error = %e, "admin: a peer's groups");
                    all.unreachable.push(id);
                }
            }
        }
        all.groups.sort_by(|x, y| x.group.cmp(&y.group));
        all.unreachable.sort();
    }
    Ok(Json(all).into_response())
}

async fn metrics() -> impl IntoResponse {
    // Rendering locks replicas briefly and touches no file: fine on a runtime worker.
    let text = runnel_metrics::get().render();
    (StatusCode::OK, [(header::CONTENT_TYPE, runnel_metrics::CONTENT_TYPE)], text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_listeners_are_http_addresses() {
        let a = addresses("http://127.0.0.1:9644, http://[::1]:9645/,http://localhost:9646").unwrap();
        assert_eq!(a, ["127.0.0.1:9644", "[::1]:9645", "localhost:9646"]);
        assert!(addresses("").unwrap().is_empty());
        for bad in ["https://127.0.0.1:9644", "127.0.0.1:9644", "http://:9644", "http://h:port", "http://h:70000"] {
            assert!(addresses(bad).is_err(), "{bad}");
        }
    }
}
