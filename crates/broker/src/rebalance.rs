//! Automatic preferred-leader election (Kafka's `auto.leader.rebalance.enable`). The first
//! broker of a partition's replica list is its preferred leader, and placement spreads
//! those over the brokers. When a broker dies, its partitions elect other leaders; when it
//! returns, nothing would move them back, and the survivors would keep carrying its load.
//! So every `leader.imbalance.check.interval.seconds` each broker hands every partition it
//! leads, but is not the preferred leader of, to the preferred leader, once that replica is
//! alive and has every entry (a Raft leadership transfer: the transferee campaigns at once,
//! and the old leader refuses new writes only for the moment the transfer takes).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::cluster::Cluster;

/// Transfers leadership of a group this broker leads to `preferred`, if that replica is
/// alive and has every entry (else a transfer would stall writes for an election timeout
/// and fail). Returns whether it started one; the caller kicks the group.
pub(crate) fn hand_over(replica: &runnel_raft::SharedReplica, preferred: i32) -> bool {
    let mut r = runnel_raft::driver::lock(replica);
    let to = preferred as u64 + 1;
    if r.is_leader() && r.id() != to && r.has_everything(to) {
        r.transfer_leader(to);
        true
    } else {
        false
    }
}

pub async fn preferred_leaders(cluster: Arc<Cluster>) {
    loop {
        let (enabled, interval) = match cluster.broker() {
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
        let Some(b) = cluster.broker() else { return };
        let me = b.node_id();
        let mut moved = 0;
        for t in b.catalog.topics_snapshot() {
            for p in &t.partitions {
                let (Some((_, group)), Some(&preferred)) = (p.replica(), p.replicas.first()) else { continue };
                if preferred != me && cluster.elect_here(group, preferred) {
                    moved += 1;
                }
            }
        }
        if moved > 0 {
            info!(partitions = moved, "handing partitions back to their preferred leaders");
        }
    }
}
