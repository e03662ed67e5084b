//! Moving leaderships off a broker. An operator drains a broker for maintenance (admin API
//! or `runnel admin drain`) until it is undrained; a broker told to stop (SIGTERM) drains
//! itself first, as Kafka's controlled shutdown does, so its partitions change leader by a
//! Raft leadership transfer (a moment) instead of an election after it is gone (an election
//! timeout, and a metadata session timeout before clients are told).
//!
//! The drain is a metadata record, so every broker knows it: a drained broker hands each
//! partition it leads to the best-ranked other replica that is alive, not drained and caught
//! up (`leader.preference` order, else replica order), and no broker hands leadership to a
//! drained one. A drain for shutdown ends when the broker registers at its next start; then
//! preferred leaders return as after any broker's return (`preferred_leader`).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use runnel_controller::{leader_preference, Drain, RaftGroupId};
use tracing::{info, warn};

use crate::broker::Broker;
use crate::replica_manager::Handing;
use crate::topic_config;

/// Brokers that may take leadership: registered, not fenced, not drained.
pub fn eligible(b: &Broker) -> BTreeSet<i32> {
    let draining = b.controller().draining();
    b.controller().live_brokers().into_iter().map(|info| info.id).filter(|id| !draining.contains_key(id)).collect()
}

/// What one pass over the partitions this broker leads found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Moves {
    /// Partitions led here.
    pub led: usize,
    /// Partitions led here that an eligible replica that answers could take: the drain
    /// waits for these.
    pub movable: usize,
    /// Leadership transfers started (to replicas caught up now).
    pub started: usize,
}

/// Hands each partition this broker leads to the best-ranked eligible replica that has
/// every entry.
pub fn move_leaders(b: &Broker, eligible: &BTreeSet<i32>) -> Moves {
    let me = b.node_id();
    let mut moves = Moves::default();
    for_each_led(b, true, |group, order| {
        moves.led += 1;
        let candidates: Vec<i32> = order.into_iter().filter(|c| *c != me && eligible.contains(c)).collect();
        if candidates.is_empty() {
            return;
        }
        match b.replicas.hand_to_any(group, &candidates) {
            Handing::Started => {
                moves.started += 1;
                moves.movable += 1;
            }
            Handing::CatchingUp => moves.movable += 1,
            Handing::Nobody | Handing::NotLeader => {}
        }
    });
    moves
}

/// How often a stopping broker looks again at what it still leads.
const SHUTDOWN_PASS: Duration = Duration::from_millis(100);
/// At most this long to have the drain committed before moving leaders regardless.
const SHUTDOWN_RECORD_WAIT: Duration = Duration::from_secs(3);

/// Controlled shutdown: before a broker of a cluster stops, its leaderships move to other
/// replicas, then the metadata quorum's leadership if it holds it; at most
/// `controlled.shutdown.timeout.ms`. Serving goes on meanwhile, so clients follow the
/// leaders as they move.
pub async fn controlled_shutdown(b: &Broker) {
    let (enabled, timeout_ms) = {
        let s = b.catalog.settings();
        (s.bool("controlled.shutdown.enable"), s.i64("controlled.shutdown.timeout.ms").max(0))
    };
    if !enabled || b.controller().brokers().len() < 2 {
        return;
    }
    let me = b.node_id();
    let started = Instant::now();
    let deadline = started + Duration::from_millis(timeout_ms as u64);
    if !b.controller().draining().contains_key(&me) {
        let wait = SHUTDOWN_RECORD_WAIT.min(deadline.saturating_duration_since(Instant::now()));
        match tokio::time::timeout(wait, b.controller().set_drain(me, Some(Drain::Shutdown))).await {
            Ok(Ok(())) => {}
            Ok(Err((code, msg))) => warn!(?code, %msg, "controlled shutdown: the drain was not recorded"),
            Err(_) => warn!("controlled shutdown: the drain was not recorded in time; moving leaders regardless"),
        }
    }
    let mut led_at_start = None;
    let last = loop {
        let moves = move_leaders(b, &eligible(b));
        led_at_start.get_or_insert(moves.led);
        if moves.movable == 0 || Instant::now() >= deadline {
            break moves;
        }
        tokio::time::sleep(SHUTDOWN_PASS).await;
    };
    // The metadata quorum's leader goes last: leader moves above were decided without it.
    while b.controller().is_controller() && Instant::now() < deadline {
        if !b.controller().hand_over(&eligible(b)) {
            break;
        }
        tokio::time::sleep(SHUTDOWN_PASS).await;
    }
    info!(
        led_before = led_at_start.unwrap_or_default(),
        led_after = last.led,
        movable_after = last.movable,
        ms = started.elapsed().as_millis() as u64,
        "controlled shutdown: leaderships moved"
    );
}

/// Calls `f` with each Raft group this broker leads and its replicas in the order they
/// should lead: by the topic's `leader.preference`, or the first replica alone (the
/// preferred leader, as Kafka has it) without one when `all` is false, every replica in
/// listed order when it is true.
pub(crate) fn for_each_led(b: &Broker, all: bool, mut f: impl FnMut(RaftGroupId, Vec<i32>)) {
    let me = b.node_id();
    let mut locations: Option<HashMap<i32, Vec<(String, String)>>> = None;
    for t in b.catalog.topics_snapshot() {
        let preference = {
            let settings = b.catalog.settings();
            leader_preference::parse(topic_config::effective("leader.preference", &t.configs, &settings))
                .unwrap_or_default()
        };
        let locations = locations
            .get_or_insert_with(|| b.controller().brokers().into_iter().map(|info| (info.id, info.location)).collect());
        for p in &t.partitions {
            let Some((_, group)) = p.replica() else { continue };
            if p.leader().0 != me {
                continue;
            }
            let order = if !preference.is_empty() {
                leader_preference::ranked(&p.replicas, &preference, locations)
            } else if all {
                p.replicas.clone()
            } else {
                p.replicas.first().copied().into_iter().collect()
            };
            f(group, order);
        }
    }
}
