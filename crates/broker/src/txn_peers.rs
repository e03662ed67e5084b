//! What brokers send each other about transactions and share-group state (to the share
//! coordinator of a key, `share_state`) over the Raft transport's `T` channel
//! (mutual TLS when the internal listener has it), and the requests waiting for answers.
//! Delivery is best effort: a request not answered in time counts as failed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use runnel_raft::Driver;
use runnel_sync::LockExt;
use runnel_txn::Tp;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// First byte of what brokers send each other about transactions.
pub const TXN_CHANNEL: u8 = b'T';

#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "type")]
pub enum TxnMessage {
    /// Write these markers (the receiver leads the partitions) and answer which failed.
    WriteMarkers {
        req: u64,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        partitions: Vec<Tp>,
    },
    MarkersWritten {
        req: u64,
        failed: Vec<(Tp, String)>,
    },
    /// Is the partition in the producer's open transaction? (The receiver coordinates it.)
    Verify {
        req: u64,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partition: Tp,
    },
    /// Add these partitions to the producer's open transaction (transactions version 2;
    /// the receiver coordinates it). Answered with `Verified`.
    Add {
        req: u64,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<Tp>,
    },
    /// The answer to `Verify` and `Add`: 0, or the coordinator's error code.
    Verified {
        req: u64,
        error: i16,
    },
    /// Read a share-partition's state (the receiver is its share coordinator).
    ShareRead {
        req: u64,
        key: String,
    },
    /// Replace a share-partition's state (answered once durable).
    ShareWrite {
        req: u64,
        key: String,
        state: Vec<u8>,
    },
    /// Delete a share-partition's state (answered once durable).
    ShareDelete {
        req: u64,
        key: String,
    },
    /// The answer to `ShareRead`, `ShareWrite` and `ShareDelete`: 0 and the state read (if
    /// any), or an error code.
    ShareState {
        req: u64,
        error: i16,
        state: Option<Vec<u8>>,
    },
}

impl TxnMessage {
    pub fn reply_to(&self) -> Option<u64> {
        match self {
            TxnMessage::MarkersWritten { req, .. }
            | TxnMessage::Verified { req, .. }
            | TxnMessage::ShareState { req, .. } => Some(*req),
            _ => None,
        }
    }
}

/// Requests to peers waiting for their answers.
pub struct TxnPeers {
    /// Starts at a random number, so that an answer meant for this broker's previous run
    /// (asked just before a crash, answered after the restart) matches no request of
    /// this one.
    next_req: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<TxnMessage>>>,
}

impl Default for TxnPeers {
    fn default() -> Self {
        TxnPeers { next_req: AtomicU64::new(runnel_controller::first_request_id()), waiting: Mutex::default() }
    }
}

impl TxnPeers {
    /// Sends `make(req)` to broker `to` and waits (at most `timeout`) for its answer.
    pub async fn ask(
        &self,
        driver: &Driver,
        to: i32,
        timeout: Duration,
        make: impl FnOnce(u64) -> TxnMessage,
    ) -> Option<TxnMessage> {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock_or_stop().insert(req, tx);
        send(driver, to, &make(req));
        let answer = tokio::time::timeout(timeout, rx).await;
        self.waiting.lock_or_stop().remove(&req);
        answer.ok().and_then(Result::ok)
    }

    /// Hands an answer to the request waiting for it; false when none is (it timed out).
    pub fn answer(&self, msg: TxnMessage) -> bool {
        let Some(req) = msg.reply_to() else { return false };
        match self.waiting.lock_or_stop().remove(&req) {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        }
    }
}

/// The inbox of what peers send on the `T` channel: (sender's Raft id, message).
pub type Inbox = tokio::sync::mpsc::Receiver<(u64, Vec<u8>)>;

pub fn send(driver: &Driver, to: i32, msg: &TxnMessage) {
    runnel_controller::send_on_channel(driver, to, TXN_CHANNEL, msg);
}
