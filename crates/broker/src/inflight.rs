//! The requests in flight on every client connection, kept for the watchdog's report of
//! what is stuck (see `watchdog.rs`).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kafka_protocol::messages::ApiKey;
use runnel_sync::LockExt;

/// The requests in flight on every connection, for the watchdog's report. Each connection
/// registers once; a request is pushed when it is read and popped when its response is
/// written (responses go out in request order), under that connection's own lock.
#[derive(Default)]
pub struct Requests {
    next: AtomicU64,
    connections: Mutex<HashMap<u64, Arc<Connection>>>,
}

pub struct Connection {
    peer: SocketAddr,
    pending: Mutex<VecDeque<Pending>>,
}

struct Pending {
    key: i16,
    version: i16,
    correlation_id: i32,
    since: Instant,
}

/// A connection's registration; dropping it removes the connection.
pub struct Registered<'a> {
    requests: &'a Requests,
    id: u64,
    pub connection: Arc<Connection>,
}

impl Requests {
    pub fn register(&self, peer: SocketAddr) -> Registered<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection { peer, pending: Mutex::new(VecDeque::new()) });
        self.connections.lock_or_stop().insert(id, connection.clone());
        Registered { requests: self, id, connection }
    }

    /// The oldest requests in flight, oldest first, as lines for the report.
    pub fn oldest(&self, max: usize) -> Vec<String> {
        let connections: Vec<Arc<Connection>> = self.connections.lock_or_stop().values().cloned().collect();
        let mut all: Vec<(Instant, String)> = Vec::new();
        for c in connections {
            for p in c.pending.lock_or_stop().iter() {
                let api = ApiKey::try_from(p.key).map_or_else(|_| format!("api {}", p.key), |k| format!("{k:?}"));
                all.push((
                    p.since,
                    format!(
                        "{api} v{} correlation id {} from {}, {} ms",
                        p.version,
                        p.correlation_id,
                        c.peer,
                        p.since.elapsed().as_millis()
                    ),
                ));
            }
        }
        all.sort_by_key(|(since, _)| *since);
        all.into_iter().take(max).map(|(_, line)| line).collect()
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.requests.connections.lock_or_stop().remove(&self.id);
    }
}

impl Connection {
    pub fn started(&self, key: i16, version: i16, correlation_id: i32) {
        self.pending.lock_or_stop().push_back(Pending { key, version, correlation_id, since: Instant::now() });
    }

    pub fn answered(&self) {
        self.pending.lock_or_stop().pop_front();
    }
}
