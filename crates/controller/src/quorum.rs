//! The metadata quorum as DescribeQuorum shows it (`kafka-metadata-quorum.sh describe`):
//! the leader, its epoch and high watermark, and every voter and observer with how far it
//! has replicated. Only the leader knows the others' progress, so another broker asks it.
//! Offsets here count the metadata log's entries (entry index N is offset N-1).

use runnel_sync::LockExt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use runnel_raft::driver::{lock, TICK};
use tokio::sync::oneshot;

use crate::controller::Controller;
use crate::records::{broker_of, Message, QuorumMember, QuorumState};

/// How long a broker waits for the controller's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

impl Controller {
    /// The quorum as the metadata leader sees it; None on any other broker.
    fn quorum_here(&self) -> Option<QuorumState> {
        let now = (self.now_ms)();
        let meta = lock(&self.meta);
        let members = meta.members();
        if members.is_empty() {
            return None;
        }
        let at = |ticks: Option<u64>| ticks.map_or(-1, |t| now - (t as i64) * TICK.as_millis() as i64);
        let (mut voters, mut observers) = (Vec::new(), Vec::new());
        for m in members {
            let member = QuorumMember {
                id: broker_of(m.id),
                log_end_offset: m.matched as i64,
                last_fetch_ms: at(m.heard_ticks_ago),
                last_caught_up_ms: at(m.caught_up_ticks_ago),
            };
            if m.voter {
                voters.push(member);
            } else {
                observers.push(member);
            }
        }
        Some(QuorumState {
            leader: self.node_id,
            epoch: meta.term() as i32,
            high_watermark: meta.committed_index() as i64,
            voters,
            observers,
        })
    }

    /// DescribeQuorum: answered here on the controller, else asked of it.
    pub async fn describe_quorum(&self) -> Result<QuorumState, (ResponseError, String)> {
        if let Some(state) = self.quorum_here() {
            return Ok(state);
        }
        let Some(controller) = self.controller().filter(|c| *c != self.node_id) else {
            return Err((ResponseError::NotLeaderOrFollower, "no metadata leader is elected yet".into()));
        };
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.quorum_asked.lock_or_stop().insert(req, tx);
        self.send(controller, &Message::DescribeQuorum { req });
        let answer = tokio::time::timeout(ASK_TIMEOUT, rx).await;
        self.quorum_asked.lock_or_stop().remove(&req);
        match answer {
            Ok(Ok(Some(state))) => Ok(state),
            Ok(Ok(None)) => Err((ResponseError::NotLeaderOrFollower, "the metadata leader changed".into())),
            _ => Err((ResponseError::RequestTimedOut, "the metadata leader did not answer in time".into())),
        }
    }

    /// A peer asks for the quorum (`DescribeQuorum`) or answers (`Quorum`).
    pub(crate) fn on_quorum_message(&self, from: u64, msg: Message) {
        match msg {
            Message::DescribeQuorum { req } => {
                self.send(broker_of(from), &Message::Quorum { req, state: self.quorum_here() });
            }
            Message::Quorum { req, state } => {
                if let Some(tx) = self.quorum_asked.lock_or_stop().remove(&req) {
                    let _ = tx.send(state);
                }
            }
            _ => {}
        }
    }
}
