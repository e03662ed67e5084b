//! Reading and writing a share-partition's state wherever its share coordinator is: this
//! broker's [`StateStore`](runnel_share::StateStore) when it leads the key's partition of
//! `__share_group_state`, else the broker that does, asked over the peers' channel. The
//! first use creates the topic (`coordinators::locate`); while it is created, loaded or
//! moving, the call retries until the write timeout.

use std::time::Duration;

use kafka_protocol::error::ResponseError as E;
use runnel_share::Snapshot;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::coordinators::{locate, Kind};
use crate::txn_peers::TxnMessage;

/// Errors worth another try: the coordinator is being created, loaded or moved.
fn transient(e: E) -> bool {
    matches!(e, E::CoordinatorNotAvailable | E::CoordinatorLoadInProgress | E::NotCoordinator | E::RequestTimedOut)
}

enum Op {
    Read,
    Write(Snapshot),
    Delete,
}

async fn call(b: &Broker, key: &str, op: &Op, timeout: Duration) -> Result<Option<Snapshot>, E> {
    let deadline = Instant::now() + timeout;
    loop {
        let result = once(b, key, op, deadline).await;
        match result {
            Err(e) if transient(e) && Instant::now() + Duration::from_millis(50) < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) if transient(e) => return Err(E::CoordinatorNotAvailable),
            other => return other,
        }
    }
}

async fn once(b: &Broker, key: &str, op: &Op, deadline: Instant) -> Result<Option<Snapshot>, E> {
    let leader = locate(b, Kind::ShareState, key).map_err(|(e, _)| e)?;
    if leader.id == b.node_id() {
        return match op {
            Op::Read => b.share_state.read(key),
            Op::Write(_) | Op::Delete => {
                let written = match op {
                    Op::Write(s) => b.share_state.write(key, s.clone())?,
                    _ => b.share_state.delete(key)?,
                };
                match tokio::time::timeout_at(deadline, written).await {
                    Ok(Ok(())) => Ok(None),
                    Ok(Err(e)) => {
                        tracing::debug!(key, error = %e, "share state not durable");
                        Err(E::NotCoordinator)
                    }
                    Err(_) => Err(E::RequestTimedOut),
                }
            }
        };
    }
    let wait = deadline.saturating_duration_since(Instant::now());
    let asked = b
        .txn_peers
        .ask(b.replicas.driver(), leader.id, wait, |req| match op {
            Op::Read => TxnMessage::ShareRead { req, key: key.to_string() },
            Op::Write(s) => TxnMessage::ShareWrite { req, key: key.to_string(), state: s.encode().to_vec() },
            Op::Delete => TxnMessage::ShareDelete { req, key: key.to_string() },
        })
        .await;
    match asked {
        Some(TxnMessage::ShareState { error: 0, state, .. }) => {
            state.map(|s| Snapshot::decode(&s).map_err(|_| E::UnknownServerError)).transpose()
        }
        Some(TxnMessage::ShareState { error, .. }) => Err(E::try_from_code(error).unwrap_or(E::UnknownServerError)),
        _ => Err(E::RequestTimedOut),
    }
}

/// How long a read or write of share state may take, retries included
/// (`share.coordinator.write.timeout.ms`).
fn timeout(b: &Broker) -> Duration {
    Duration::from_millis(b.config.settings.i64("share.coordinator.write.timeout.ms").max(1) as u64)
}

/// The state of `key`, if it has one.
pub async fn read(b: &Broker, key: &str) -> Result<Option<Snapshot>, E> {
    call(b, key, &Op::Read, timeout(b)).await
}

/// Replaces the state of `key`; durable when it returns Ok.
pub async fn write(b: &Broker, key: &str, snapshot: Snapshot) -> Result<(), E> {
    call(b, key, &Op::Write(snapshot), timeout(b)).await.map(|_| ())
}

/// Deletes the state of `key`; durable when it returns Ok.
pub async fn delete(b: &Broker, key: &str) -> Result<(), E> {
    call(b, key, &Op::Delete, timeout(b)).await.map(|_| ())
}

/// A peer's `ShareRead`, answered from this broker's store.
pub fn answer_read(b: &Broker, req: u64, key: &str) -> TxnMessage {
    match b.share_state.read(key) {
        Ok(state) => TxnMessage::ShareState { req, error: 0, state: state.map(|s| s.encode().to_vec()) },
        Err(e) => TxnMessage::ShareState { req, error: e.code(), state: None },
    }
}

/// A peer's `ShareWrite` (a state) or `ShareDelete` (none), answered once durable here.
pub async fn answer_write(b: &Broker, req: u64, key: &str, state: Option<&[u8]>) -> TxnMessage {
    let written = match state.map(Snapshot::decode) {
        None => b.share_state.delete(key).map_err(Some),
        Some(Err(_)) => Err(None),
        Some(Ok(s)) => b.share_state.write(key, s).map_err(Some),
    };
    let error = match written {
        Err(None) => E::InvalidRequest,
        Err(Some(e)) => e,
        Ok(written) => match written.await {
            Ok(()) => return TxnMessage::ShareState { req, error: 0, state: None },
            Err(_) => E::NotCoordinator,
        },
    };
    TxnMessage::ShareState { req, error: error.code(), state: None }
}
