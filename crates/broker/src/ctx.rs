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
}

/// A reply that is ready now.
pub fn now(resp: impl Into<ResponseKind>) -> Reply {
    let resp = resp.into();
    Box::pin(std::future::ready(Some(resp)))
}
