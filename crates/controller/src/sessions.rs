//! Broker sessions: each broker registers at every start (directly on the controller, else
//! through it) and heartbeats to the controller every `broker.heartbeat.interval.ms`; the
//! controller fences a broker it has not heard from within `broker.session.timeout.ms` (no
//! new replicas, not offered to clients) and unfences it when it is heard from again.
//!
//! A broker outside `controller.quorum.voters` (an observer) does not know the controller
//! until the metadata log reaches it, so it registers through every voter. The controller
//! then adds it to the metadata group as a learner: it replicates the log and votes on
//! nothing, so the quorum stays the voters, wherever the other brokers are.

use runnel_sync::LockExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runnel_raft::driver::lock;
use runnel_raft::ConfChangeType;

use crate::controller::Controller;
use crate::records::{raft_id, BrokerInfo, Message, Record, META_GROUP};

impl Controller {
    /// Starts this broker's registration and heartbeats, and (while it is the controller)
    /// the fencing of brokers that stop heartbeating.
    pub(crate) fn start_sessions(self: &Arc<Self>) {
        tokio::spawn(register_loop(self.clone()));
        tokio::spawn(heartbeat_loop(self.clone()));
        tokio::spawn(fence_loop(self.clone()));
    }

    /// Controller: proposes a broker's registration unless it is already applied.
    pub(crate) fn register(&self, info: BrokerInfo) {
        if self.read().brokers.get(&info.id) == Some(&info) {
            return;
        }
        self.propose_now(&[Record::RegisterBroker(info)]);
    }

    /// Controller: adds one registered broker that is neither voter nor learner of the
    /// metadata group to it as a learner (one configuration change at a time, as Raft
    /// allows; the next is proposed once it is applied).
    fn admit_observers(&self) {
        let registered: Vec<u64> = self.read().brokers.keys().map(|id| raft_id(*id)).collect();
        let mut meta = lock(&self.meta);
        if !meta.is_leader() || meta.has_pending_conf() {
            return;
        }
        let (voters, learners, joint) = meta.membership();
        if joint {
            return;
        }
        let Some(new) = registered.into_iter().find(|id| !voters.contains(id) && !learners.contains(id)) else {
            return;
        };
        if meta.propose_membership(&[(ConfChangeType::AddLearnerNode, new)]).is_ok() {
            drop(meta);
            tracing::info!(broker = crate::records::broker_of(new), "metadata observer added");
            self.driver.kick(META_GROUP);
        }
    }

    pub(crate) fn heard(&self, id: i32) {
        self.heard.lock_or_stop().insert(id, Instant::now());
    }

    /// Controller: fences registered brokers not heard from within `session`, and unfences
    /// fenced ones heard from since. `since` is when this broker became the controller: it
    /// gives every broker a full session before fencing it.
    fn check_sessions(&self, since: Instant, session: Duration) {
        let now = Instant::now();
        let heard = self.heard.lock_or_stop().clone();
        let changes: Vec<Record> = {
            let image = self.read();
            image
                .brokers
                .keys()
                .filter(|id| **id != self.node_id)
                .filter_map(|id| {
                    let last = heard.get(id).copied().unwrap_or(since).max(since);
                    let alive = now.duration_since(last) < session;
                    (alive == image.fenced.contains(id)).then_some(Record::FenceBroker { id: *id, fenced: !alive })
                })
                .collect()
        };
        if !changes.is_empty() {
            self.propose_now(&changes);
        }
    }
}

/// Registers this broker in the metadata log, retrying until the registration is applied.
async fn register_loop(c: Arc<Controller>) {
    loop {
        if c.read().brokers.get(&c.node_id) == Some(&c.me) {
            return;
        }
        if c.is_controller() {
            c.register(c.me.clone());
        } else if let Some(controller) = c.controller() {
            c.send(controller, &Message::Register(c.me.clone()));
        } else {
            // Not heard from a leader yet (an observer hears from none before it is added):
            // through every voter, of which the controller acts.
            for voter in c.voters.iter().filter(|v| **v != c.node_id) {
                c.send(*voter, &Message::Register(c.me.clone()));
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Tells the controller every `broker.heartbeat.interval.ms` that this broker is alive.
async fn heartbeat_loop(c: Arc<Controller>) {
    loop {
        let interval = c.host.limits().heartbeat_interval.max(Duration::from_millis(10));
        if let Some(controller) = c.controller().filter(|id| *id != c.node_id) {
            c.send(controller, &Message::Heartbeat { id: c.node_id });
        }
        tokio::time::sleep(interval).await;
    }
}

/// On the controller: fences brokers that stopped heartbeating and unfences those that
/// came back.
///
/// A controller that was not running itself (the process paused or starved for a while)
/// cannot tell which brokers were silent: the heartbeats it missed were sent. So a pass that
/// comes much later than due counts as a new start, and every broker gets a full session
/// again, as when this broker became the controller.
async fn fence_loop(c: Arc<Controller>) {
    const PASS: Duration = Duration::from_millis(200);
    let mut since: Option<Instant> = None;
    let mut last_pass = Instant::now();
    loop {
        tokio::time::sleep(PASS).await;
        let session = c.host.limits().session_timeout.max(Duration::from_millis(1));
        let now = Instant::now();
        let stalled = now.duration_since(last_pass) > PASS + session / 2;
        last_pass = now;
        if !c.is_controller() {
            since = None;
            continue;
        }
        if stalled {
            tracing::info!("controller was not running for a while: every broker gets a full session");
            since = Some(now);
        }
        let since = *since.get_or_insert(now);
        c.check_sessions(since, session);
        c.admit_observers();
    }
}
