//! What every handler gets besides its request, and what it gives back: the context of
//! the request (who sent it) and the [`Reply`]. Handlers depend on this module, the broker
//! and the seams (partition, controller, coordinator), never on `dispatch` or each other.

use std::future::Future;
use std::pin::Pin;

use kafka_protocol::messages::ResponseKind;

/// A handler's answer: a future so that produce (waiting for fsync) and fetch (long
/// polling) can finish later, while the connection keeps reading and answers in order.
/// `None` means no response is sent (produce with acks=0).
pub type Reply = Pin<Box<dyn Future<Output = Option<ResponseKind>> + Send>>;

/// Who sent a request: what JoinGroup records as a member's client id and host, the
/// listener it came through (whose advertised addresses Metadata answers with), and what
/// its principal may do.
#[derive(Clone)]
pub struct Ctx {
    pub client_id: String,
    pub peer: std::net::SocketAddr,
    pub listener: std::sync::Arc<str>,
    pub access: crate::authz::Access,
    /// The connection's mute, which a client over its quota is put under.
    pub mute: std::sync::Arc<crate::quota::Mute>,
    /// The client quotas as they were when the request arrived (read once per request).
    pub quotas: std::sync::Arc<runnel_security::quota::Table>,
    /// The connection's produce requests whose appends wait in their replies.
    pub deferred: std::sync::Arc<Deferred>,
    /// Where a Fetch answer lists the records it sends from files (`sendfile.rs`); `None`
    /// when the connection cannot (TLS).
    pub files: Option<std::sync::Arc<crate::sendfile::FileRecords>>,
}

/// Produce requests of one connection append in the order they arrived, as an idempotent
/// producer's sequence numbers need. One normally appends as it is handled; one that must
/// first wait (a KIP-890 check with a transaction coordinator) appends in its reply, and
/// replies run one after another in arrival order. While such appends are outstanding,
/// later produce requests append in their replies too, so none overtakes them.
#[derive(Debug, Default)]
pub struct Deferred(std::sync::atomic::AtomicUsize);

impl Deferred {
    /// Whether an append of this connection is waiting in a reply now.
    pub fn busy(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// Counts one more append waiting in a reply until the guard is dropped (once that
    /// append has run, or the reply was abandoned).
    pub fn hold(self: &std::sync::Arc<Self>) -> DeferredGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        DeferredGuard(self.clone())
    }
}

pub struct DeferredGuard(std::sync::Arc<Deferred>);

impl Drop for DeferredGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Ctx {
    /// Who the client is for quotas: its principal's name and its client id.
    pub fn quota_client(&self) -> runnel_security::quota::Client {
        let p = &*self.access.principal;
        let user = p.split_once(':').map_or(p, |(_, name)| name);
        runnel_security::quota::Client { user: user.to_string(), client_id: self.client_id.clone() }
    }
}

/// What a connection knows of its client: where it is, the listener it came through, its
/// principal, and its mute.
pub struct Session {
    pub peer: std::net::SocketAddr,
    pub listener: std::sync::Arc<str>,
    pub principal: std::sync::Arc<str>,
    pub mute: std::sync::Arc<crate::quota::Mute>,
    pub deferred: std::sync::Arc<Deferred>,
    /// Records may go from files to the socket (a plaintext connection).
    pub sendfile: bool,
}

/// A reply that is ready now.
pub fn now(resp: impl Into<ResponseKind>) -> Reply {
    let resp = resp.into();
    Box::pin(std::future::ready(Some(resp)))
}
