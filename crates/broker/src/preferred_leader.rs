//! Automatic preferred-leader election (Kafka's `auto.leader.rebalance.enable`). The first
//! broker of a partition's replica list is its preferred leader, and placement spreads
//! those over the brokers. When a broker dies, its partitions elect other leaders; when it
//! returns, nothing would move them back, and the survivors would keep carrying its load.
//! So every `leader.imbalance.check.interval.seconds` each broker hands every partition it
//! leads, but is not the preferred leader of, to the preferred leader, once that replica is
//! alive and has every entry (a Raft leadership transfer: the transferee campaigns at once,
//! and the old leader refuses new writes only for the moment the transfer takes).

use std::sync::Weak;
use std::time::Duration;

use tracing::info;

use crate::broker::Broker;

/// Runs while the broker does; the transfer itself is `ReplicaManager::elect_here`.
pub async fn elect_preferred_leaders(broker: Weak<Broker>) {
    loop {
        let (enabled, interval) = match broker.upgrade() {
            Some(b) => {
                let s = b.catalog.settings();
                (s.bool("auto.leader.rebalance.enable"), s.i64("leader.imbalance.check.interval.seconds").max(1))
            }
            None => return,
        };
        tokio::time::sleep(Duration::from_secs(interval as u64)).await;
        if !enabled {
            continue;
        }
        let Some(b) = broker.upgrade() else { return };
        let me = b.node_id();
        let mut moved = 0;
        for t in b.catalog.topics_snapshot() {
            for p in &t.partitions {
                let (Some((_, group)), Some(&preferred)) = (p.replica(), p.replicas.first()) else { continue };
                if preferred != me && b.replicas.elect_here(group, preferred) {
                    moved += 1;
                }
            }
        }
        if moved > 0 {
            info!(partitions = moved, "handing partitions back to their preferred leaders");
        }
    }
}
