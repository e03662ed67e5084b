//! The admin listener (`admin.listeners`, e.g. `http://127.0.0.1:9644`): HTTP, apart from
//! the Kafka listeners, loopback unless configured otherwise. It serves `/metrics`, the
//! broker's metrics in the Prometheus text format (`docs/metrics.md`), and the admin API
//! (`docs/admin.md`): `/health`, `/ready`, `/v1/brokers`, `/v1/partitions`.

mod api;

use std::sync::{Arc, Weak};

use anyhow::{bail, Context, Result};
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
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

/// Serves the bound listeners while the broker runs.
pub fn serve(listeners: Vec<TcpListener>, broker: &Arc<Broker>) {
    let weak: Weak<Broker> = Arc::downgrade(broker);
    for listener in listeners {
        let app = router(weak.clone());
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "admin listener: /metrics, /health, /ready, /v1/brokers, /v1/partitions");
        }
        let bounded = Bounded { listener, permits: Arc::new(Semaphore::new(CONNECTIONS_MAX)) };
        tokio::spawn(async move {
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

fn router(broker: Weak<Broker>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/v1/brokers", get(brokers))
        .route("/v1/partitions", get(partitions))
        .with_state(broker)
}

type Shared = State<Weak<Broker>>;

fn gone() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "the broker has stopped\n").into_response()
}

/// Live: the process answers and its broker has not stopped.
async fn health(State(b): Shared) -> Response {
    match b.upgrade() {
        Some(_) => (StatusCode::OK, "ok\n").into_response(),
        None => gone(),
    }
}

/// Ready (200) or not (503), with what it waits for.
async fn ready(State(b): Shared) -> Response {
    let Some(b) = b.upgrade() else { return gone() };
    let r = api::readiness(&b);
    let status = if r.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(r)).into_response()
}

async fn brokers(State(b): Shared) -> Response {
    let Some(b) = b.upgrade() else { return gone() };
    Json(api::brokers(&b)).into_response()
}

#[derive(serde::Deserialize)]
struct PartitionsQuery {
    topic: Option<String>,
}

async fn partitions(State(b): Shared, Query(q): Query<PartitionsQuery>) -> Response {
    let Some(b) = b.upgrade() else { return gone() };
    Json(api::partitions(&b, q.topic.as_deref())).into_response()
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
