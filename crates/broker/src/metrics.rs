//! What the broker adds to `runnel_metrics` beyond the counts its handlers keep: the error
//! codes in each response (Kafka's `ErrorsPerSec`, by request and error name), and the
//! gauges of its state (partitions, leaders, under-replicated, ...), computed at each scrape.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ResponseKind;
use runnel_metrics::{ApiHandles, LagLabels, Metrics};
use runnel_raft::driver::lock;

use crate::broker::Broker;
use crate::replica_manager::isr_lag_ticks;

/// Counts the error codes in a response: each partition's, topic's, member's or group's,
/// as Kafka's responses list them (`errorCounts`), for the APIs clients use most; the
/// other APIs' top-level code. No error (0) is not counted.
pub fn count_errors(api: &ApiHandles, resp: &ResponseKind) {
    let metrics = runnel_metrics::get();
    each_code(resp, &mut |code| {
        if code != 0 {
            metrics.error(api, &error_name(code));
        }
    });
}

fn each_code(resp: &ResponseKind, f: &mut impl FnMut(i16)) {
    match resp {
        ResponseKind::Produce(r) => {
            r.responses.iter().flat_map(|t| &t.partition_responses).for_each(|p| f(p.error_code))
        }
        ResponseKind::Fetch(r) => {
            f(r.error_code);
            r.responses.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        }
        ResponseKind::Metadata(r) => r.topics.iter().for_each(|t| f(t.error_code)),
        ResponseKind::ListOffsets(r) => r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code)),
        ResponseKind::OffsetCommit(r) => r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code)),
        ResponseKind::TxnOffsetCommit(r) => r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            f(r.error_code);
            r.groups.iter().for_each(|g| f(g.error_code));
        }
        ResponseKind::FindCoordinator(r) => {
            f(r.error_code);
            r.coordinators.iter().for_each(|c| f(c.error_code));
        }
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| f(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| f(t.error_code)),
        ResponseKind::JoinGroup(r) => f(r.error_code),
        ResponseKind::SyncGroup(r) => f(r.error_code),
        ResponseKind::Heartbeat(r) => f(r.error_code),
        ResponseKind::LeaveGroup(r) => {
            f(r.error_code);
            r.members.iter().for_each(|m| f(m.error_code));
        }
        ResponseKind::ConsumerGroupHeartbeat(r) => f(r.error_code),
        ResponseKind::InitProducerId(r) => f(r.error_code),
        ResponseKind::AddPartitionsToTxn(r) => f(r.error_code),
        ResponseKind::EndTxn(r) => f(r.error_code),
        _ => {}
    }
}

/// Kafka's name for an error code (`NOT_LEADER_OR_FOLLOWER`).
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(code)) => format!("UNKNOWN_{code}"),
        Some(e) => {
            let camel = e.to_string();
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_uppercase());
            }
            out
        }
    }
}

/// Registers the scrape hook that sets the broker's state gauges.
pub fn install(broker: &Arc<Broker>) {
    let weak = Arc::downgrade(broker);
    runnel_metrics::get().on_scrape(move |m| {
        if let Some(b) = weak.upgrade() {
            state_gauges(&b, m);
            group_lag(&b, m);
        }
    });
}

/// Partitions with a replica here, those led here, those led here with a replica out of
/// the in-sync set (as Metadata's ISR), those whose replica here knows no leader, and the
/// entries appended but not committed over the partitions led here. Each replica is locked
/// alone and briefly.
fn state_gauges(b: &Broker, m: &Metrics) {
    let lag_ticks = isr_lag_ticks(&b.catalog.settings());
    let (mut partitions, mut leaders, mut under, mut offline, mut commit_lag) = (0i64, 0i64, 0i64, 0i64, 0i64);
    for t in b.catalog.topics_snapshot() {
        for p in &t.partitions {
            let Some((replica, _)) = p.replica() else { continue };
            partitions += 1;
            let r = lock(replica);
            if r.is_leader() {
                leaders += 1;
                if r.in_sync(lag_ticks).len() < p.replicas.len() {
                    under += 1;
                }
                commit_lag += r.store().last().saturating_sub(r.committed_index()) as i64;
            } else if r.leader().is_none() {
                offline += 1;
            }
        }
    }
    m.partitions.set(partitions);
    m.leaders.set(leaders);
    m.under_replicated.set(under);
    m.offline.set(offline);
    m.commit_lag.set(commit_lag);
    m.active_controller.set(i64::from(b.controller().is_controller()));
}

/// Each group coordinated here: per partition it committed an offset for, the records
/// between that offset and the partition's high watermark, for partitions with a replica
/// on this broker (a follower's high watermark is the commit it has heard of). Series of
/// groups, offsets or partitions that went are dropped.
fn group_lag(b: &Broker, m: &Metrics) {
    let mut lags = Vec::new();
    for g in b.group_coordinator.list() {
        let Ok(offsets) = b.group_coordinator.fetch(&g.group_id, None) else { continue };
        for ((topic, partition), committed) in offsets {
            let Some(committed) = committed else { continue };
            let Some(t) = b.catalog.topic(&topic) else { continue };
            let Some(p) = t.partitions.get(partition.max(0) as usize).filter(|p| p.replica().is_some()) else {
                continue;
            };
            let lag = (p.high_watermark() - committed.offset).max(0);
            lags.push((LagLabels { group: g.group_id.clone(), topic, partition: partition.to_string() }, lag));
        }
    }
    m.group_lag.clear();
    for (labels, lag) in lags {
        m.group_lag.get_or_create(&labels).set(lag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(error_name(6), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(9999), "UNKNOWN_9999");
    }
}
