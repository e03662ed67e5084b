//! The admin API's write side: maintenance mode (drain a broker's leaderships away and let
//! them back), decommission (move its replicas away) with progress, leadership transfer of
//! one partition, and the log filter at run time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use runnel_broker::broker::Broker;
use runnel_broker::drain::eligible;
use runnel_controller::{replace_broker, Assignment, Drain};
use serde::Serialize;

/// Reads (None) or sets (Some, `RUNNEL_LOG` syntax such as `info,runnel_raft=debug`) the
/// process's log filter; answers the filter in force, or why the new one is refused.
pub type LogFilter = Arc<dyn Fn(Option<&str>) -> Result<String, String> + Send + Sync>;

/// A refusal: HTTP status and why.
pub struct Refused(pub u16, pub String);

/// A broker's drain as `/v1/brokers/{id}/drain` shows it.
#[derive(Serialize)]
pub struct DrainView {
    pub broker: i32,
    /// `maintenance` (until undrained), `shutdown` (until it starts again), or null.
    pub draining: Option<&'static str>,
    /// Partitions it leads, as this broker knows them.
    pub leaders: usize,
    /// Of those, the ones another replica that may lead could take.
    pub movable: usize,
    /// Drained and nothing left to move.
    pub done: bool,
}

pub(crate) fn drain_name(d: Drain) -> &'static str {
    match d {
        Drain::Maintenance => "maintenance",
        Drain::Shutdown => "shutdown",
    }
}

pub fn drain_view(b: &Broker, id: i32) -> Result<DrainView, Refused> {
    if !b.controller().brokers().iter().any(|i| i.id == id) {
        return Err(Refused(404, format!("broker {id} is not registered")));
    }
    let draining = b.controller().draining().get(&id).copied();
    let may_lead = eligible(b);
    let (mut leaders, mut movable) = (0, 0);
    for t in b.catalog.topics_snapshot() {
        for p in &t.partitions {
            if b.partition_leader(p).0 != id {
                continue;
            }
            leaders += 1;
            if p.replicas.iter().any(|r| *r != id && may_lead.contains(r)) {
                movable += 1;
            }
        }
    }
    Ok(DrainView {
        broker: id,
        draining: draining.map(drain_name),
        leaders,
        movable,
        done: draining.is_some() && movable == 0,
    })
}

/// Starts (`drain`) or ends maintenance mode for broker `id`, committed by the controller.
pub async fn set_drain(b: &Broker, id: i32, drain: bool) -> Result<DrainView, Refused> {
    let to = drain.then_some(Drain::Maintenance);
    b.controller().set_drain(id, to).await.map_err(|(code, msg)| match code {
        ResponseError::BrokerNotAvailable => Refused(404, msg),
        _ => Refused(503, msg),
    })?;
    drain_view(b, id)
}

/// How long a leadership transfer is waited for.
const TRANSFER_WAIT: Duration = Duration::from_secs(10);

/// The partition's leadership after a transfer.
#[derive(Serialize)]
pub struct LeaderView {
    pub topic: String,
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// Moves a partition's leadership to replica `to` (a Raft leadership transfer, asked of the
/// current leader until it is done, for at most `TRANSFER_WAIT`).
pub async fn transfer_leader(b: &Broker, topic: &str, partition: i32, to: i32) -> Result<LeaderView, Refused> {
    let Some(t) = b.catalog.topic(topic) else {
        return Err(Refused(404, format!("topic {topic} does not exist")));
    };
    let Some(p) = t.partitions.get(usize::try_from(partition).unwrap_or(usize::MAX)).cloned() else {
        return Err(Refused(404, format!("{topic} has no partition {partition}")));
    };
    if !p.replicas.contains(&to) {
        return Err(Refused(400, format!("broker {to} is not a replica of {topic}-{partition}: {:?}", p.replicas)));
    }
    if !eligible(b).contains(&to) {
        return Err(Refused(409, format!("broker {to} is fenced or drained: it may not lead")));
    }
    let Some(group) = b.controller().group_of(topic, partition) else {
        return Err(Refused(404, format!("topic {topic} does not exist")));
    };
    let deadline = Instant::now() + TRANSFER_WAIT;
    loop {
        let (leader, leader_epoch) = b.partition_leader(&p);
        if leader == to {
            return Ok(LeaderView { topic: topic.to_string(), partition, leader, leader_epoch });
        }
        if Instant::now() >= deadline {
            return Err(Refused(
                504,
                format!("{topic}-{partition} is still led by {leader}: broker {to} did not catch up in time"),
            ));
        }
        if leader >= 0 {
            b.replicas.ask_to_elect(leader, group, to);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A broker's decommission as `/v1/brokers/{id}/decommission` shows it.
#[derive(Serialize)]
pub struct DecommissionView {
    pub broker: i32,
    /// Moves asked for by this call (POST only).
    pub started: usize,
    /// Partitions that still list the broker as a replica.
    pub remaining: usize,
    /// Of those, the ones moving now.
    pub moving: usize,
    /// It holds no replica and none is moving: it can be stopped for good.
    pub done: bool,
}

pub fn decommission_view(b: &Broker, id: i32) -> Result<DecommissionView, Refused> {
    if !b.controller().brokers().iter().any(|i| i.id == id) {
        return Err(Refused(404, format!("broker {id} is not registered")));
    }
    let moving = b.controller().reassignments();
    let (mut remaining, mut under_way) = (0, 0);
    for t in b.catalog.topics_snapshot() {
        for p in t.partitions.iter().filter(|p| p.replicas.contains(&id)) {
            remaining += 1;
            if moving.contains_key(&(t.name.to_string(), p.index)) {
                under_way += 1;
            }
        }
    }
    Ok(DecommissionView { broker: id, started: 0, remaining, moving: under_way, done: remaining == 0 })
}

/// Moves every replica off broker `id` (the plan `runnel admin decommission` makes, see
/// `runnel_controller::replace_broker`): one reassignment per partition, committed by the
/// controller; the partitions' leaders then carry them out. Partitions already moving are
/// left to their move.
pub async fn decommission(b: &Broker, id: i32) -> Result<DecommissionView, Refused> {
    decommission_view(b, id)?;
    let racks: BTreeMap<i32, Option<String>> =
        b.controller().live_brokers().into_iter().map(|i| (i.id, i.rack())).collect();
    let moving = b.controller().reassignments();
    let mut assignment = Assignment::new();
    for t in b.catalog.topics_snapshot() {
        for p in &t.partitions {
            let key = (t.name.to_string(), p.index);
            if !moving.contains_key(&key) {
                assignment.insert(key, p.replicas.clone());
            }
        }
    }
    let moves = replace_broker(&racks, &assignment, id).map_err(|e| Refused(409, e))?;
    for ((topic, partition), target) in &moves {
        b.controller().reassign(topic, *partition, Some(target.clone()), false).await.map_err(|(code, msg)| {
            Refused(503, format!("moving {topic}-{partition} to {target:?}: {code:?}: {msg}"))
        })?;
    }
    tracing::info!(broker = id, moves = moves.len(), "decommission: replicas moving off the broker");
    Ok(DecommissionView { started: moves.len(), ..decommission_view(b, id)? })
}
