//! Partition reassignment (AlterPartitionReassignments), carried out by each moving
//! partition's leader as a sequence of Raft configuration changes:
//!
//! 1. the replicas being added join as learners (they receive the log but do not vote);
//! 2. once every target replica is within `CAUGHT_UP_LAG` entries, one joint-consensus change
//!    makes them voters and removes the replicas leaving (Raft's C_old,new, left
//!    automatically), so a majority of the old and of the new set both agree throughout;
//! 3. a leader that is itself leaving first promotes the learners without removing anyone,
//!    then hands leadership to a caught-up target replica, which removes the rest;
//! 4. when the voters are exactly the target, the leader tells the controller, which
//!    records the move as finished: brokers no longer in the list delete their replica.
//!
//! A cancelled move has the original replicas as its target, so the same steps undo it.
//! Every step waits for the previous change to be applied (one change at a time).

use runnel_sync::LockExt;
use std::collections::HashSet;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use runnel_raft::ConfChangeType;
use tracing::info;

use crate::broker::Broker;

/// How often leaders look at their moving partitions.
const INTERVAL: Duration = Duration::from_millis(300);
/// A learner this close to the leader's last entry may become a voter.
const CAUGHT_UP_LAG: u64 = 64;
/// How long a leader waits before reporting the same finished move again.
const REPORT_AGAIN: Duration = Duration::from_secs(3);

pub(crate) async fn carry_out(broker: Weak<Broker>) {
    let reported: Mutex<HashSet<(String, i32)>> = Mutex::new(HashSet::new());
    let mut last_report = Instant::now();
    loop {
        tokio::time::sleep(INTERVAL).await;
        let Some(broker) = broker.upgrade() else { return };
        if last_report.elapsed() > REPORT_AGAIN {
            reported.lock_or_stop().clear();
            last_report = Instant::now();
        }
        for ((name, p), moving) in broker.controller.reassignments() {
            let Some(part) = broker.catalog.topic(&name).and_then(|t| t.partitions.get(p as usize).cloned()) else {
                continue;
            };
            let Some((replica, group)) = part.replica() else { continue };
            let step = {
                let mut r = runnel_raft::driver::lock(replica);
                if !r.is_leader() || r.has_pending_conf() {
                    continue;
                }
                next_step(&mut r, &moving.target)
            };
            match step {
                Step::Wait => {}
                Step::Changed(what) => {
                    info!(topic = %name, partition = p, target = ?moving.target, "reassignment: {what}");
                    broker.replicas.kick(group);
                }
                Step::Done => {
                    if reported.lock_or_stop().insert((name.clone(), p)) {
                        broker.controller.finish_reassignment(name, p, moving.target.clone());
                    }
                }
            }
        }
    }
}

enum Step {
    Wait,
    Changed(&'static str),
    Done,
}

/// The next configuration change toward `target` (broker ids), proposed by the leader.
fn next_step(r: &mut runnel_raft::Replica, target: &[i32]) -> Step {
    use ConfChangeType::{AddLearnerNode, AddNode, RemoveNode};
    let (voters, learners, joint) = r.membership();
    if joint {
        return Step::Wait;
    }
    let target: Vec<u64> = target.iter().map(|b| *b as u64 + 1).collect();
    let me = r.id();
    let missing: Vec<u64> = target.iter().copied().filter(|t| !voters.contains(t) && !learners.contains(t)).collect();
    let joining: Vec<u64> = learners.iter().copied().filter(|l| target.contains(l)).collect();
    let leaving: Vec<u64> = voters.iter().copied().filter(|v| !target.contains(v)).collect();
    let stray: Vec<u64> = learners.iter().copied().filter(|l| !target.contains(l)).collect();
    let propose = |r: &mut runnel_raft::Replica, changes: Vec<(ConfChangeType, u64)>, what| match r
        .propose_membership(&changes)
    {
        Ok(()) => Step::Changed(what),
        Err(_) => Step::Wait,
    };
    if !missing.is_empty() {
        return propose(r, missing.iter().map(|id| (AddLearnerNode, *id)).collect(), "adding learners");
    }
    // Nothing is promoted or removed until every other target replica has caught up: the
    // new configuration's majority must be able to take writes at once.
    let ready = target.iter().filter(|t| **t != me).all(|t| r.caught_up(*t, CAUGHT_UP_LAG));
    if !joining.is_empty() {
        if !ready {
            return Step::Wait;
        }
        let mut changes: Vec<(ConfChangeType, u64)> = joining.iter().map(|l| (AddNode, *l)).collect();
        if target.contains(&me) {
            changes.extend(leaving.iter().map(|v| (RemoveNode, *v)));
            return propose(r, changes, "joint change: learners become voters, leaving replicas go");
        }
        return propose(r, changes, "learners become voters");
    }
    if !leaving.is_empty() {
        if !target.contains(&me) {
            // Leaving itself: hand the group to a target replica that has everything.
            if let Some(to) = target.iter().copied().find(|t| r.has_everything(*t, 0)) {
                r.transfer_leader(to);
                return Step::Changed("handing leadership to a target replica");
            }
            return Step::Wait;
        }
        if !ready {
            return Step::Wait;
        }
        return propose(r, leaving.iter().map(|v| (RemoveNode, *v)).collect(), "removing leaving replicas");
    }
    if !stray.is_empty() {
        return propose(r, stray.iter().map(|l| (RemoveNode, *l)).collect(), "removing learners not in the target");
    }
    Step::Done
}
