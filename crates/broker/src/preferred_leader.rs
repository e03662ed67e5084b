//! Automatic preferred-leader election (Kafka's `auto.leader.rebalance.enable`). The first
//! broker of a partition's replica list is its preferred leader, and placement spreads
//! those over the brokers. When a broker dies, its partitions elect other leaders; when it
//! returns, nothing would move them back, and the survivors would keep carrying its load.
//! So every `leader.imbalance.check.interval.seconds` each broker hands every partition it
//! leads, but is not the preferred leader of, to the preferred leader, once that replica is
//! alive and has every entry (a Raft leadership transfer: the transferee campaigns at once,
//! and the old leader refuses new writes only for the moment the transfer takes).
//!
//! A broker that comes back (unfenced after a pause or a network cut, or registered again
//! after a restart) need not wait for the next periodic check: for a while after any broker
//! returns, every broker checks each second, so leadership goes back as soon as the returning
//! replica has caught up.
//!
//! A topic with a `leader.preference` (failure domains in order, see
//! `runnel_controller::leader_preference`) ranks its replicas by it instead: leadership
//! goes to the best-ranked replica that is alive and caught up, so it stays in the first
//! listed domain while a replica there is healthy, falls back to the next, and comes back
//! once the better one returns.

use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::{Duration, Instant};

use tracing::info;

use crate::broker::Broker;
use crate::replica_manager::Handing;

/// How often brokers check while one has just come back, and for how long after.
const RETURN_PASS: Duration = Duration::from_secs(1);
const RETURN_WINDOW: Duration = Duration::from_secs(30);

/// Runs while the broker does; the transfer itself is `ReplicaManager::elect_here`.
pub async fn elect_preferred_leaders(broker: Weak<Broker>) {
    let mut live: BTreeSet<i32> = BTreeSet::new();
    let mut returned_until: Option<Instant> = None;
    let mut next_check: Option<Instant> = None;
    loop {
        tokio::time::sleep(RETURN_PASS).await;
        let Some(b) = broker.upgrade() else { return };
        let (enabled, interval) = {
            let s = b.catalog.settings();
            (s.bool("auto.leader.rebalance.enable"), s.i64("leader.imbalance.check.interval.seconds").max(1))
        };
        let now = Instant::now();
        // A broker coming back from a drain counts as returning too.
        let now_live = crate::drain::eligible(&b);
        if !live.is_empty() && !now_live.is_subset(&live) {
            returned_until = Some(now + RETURN_WINDOW);
        }
        live = now_live;
        let period = Duration::from_secs(interval as u64);
        let due = *next_check.get_or_insert(now + period);
        let periodic = now >= due;
        if periodic {
            next_check = Some(now + period);
        }
        let returning = returned_until.is_some_and(|until| now < until);
        if b.controller().draining().contains_key(&b.node_id()) {
            let moves = crate::drain::move_leaders(&b, &live);
            if moves.started > 0 {
                info!(partitions = moves.started, "draining: handing partitions to other replicas");
            }
            continue;
        }
        if !enabled || !(periodic || returning) {
            continue;
        }
        let moved = rebalance(&b, &live);
        if moved > 0 {
            info!(partitions = moved, "handing partitions back to their preferred leaders");
        }
    }
}

/// One pass over the partitions this broker leads; returns how many transfers started.
fn rebalance(b: &Broker, eligible: &BTreeSet<i32>) -> usize {
    let me = b.node_id();
    let mut moved = 0;
    crate::drain::for_each_led(b, false, |group, order| {
        // The replicas ranked above this one that may lead, best first.
        let better: Vec<i32> = order.into_iter().take_while(|c| *c != me).filter(|c| eligible.contains(c)).collect();
        if !better.is_empty() && b.replicas.hand_to_any(group, &better) == Handing::Started {
            moved += 1;
        }
    });
    moved
}
