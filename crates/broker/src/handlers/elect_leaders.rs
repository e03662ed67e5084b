//! ElectLeaders (key 43, v0–2): preferred-leader election on demand (`kafka-leader-election
//! --election-type preferred`). For each partition (all of them when the list is null), the
//! broker leading it hands it to the preferred leader (first replica) once that replica is
//! alive and at most a few entries behind (asked again every half second), and the answer
//! waits (until just before `timeout_ms`) until Metadata here names the preferred leader. Unclean elections are never run: a Raft group elects only
//! replicas that have every committed entry.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use runnel_controller::RaftGroupId;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use crate::partition::Partition;
use runnel_security::acl::Operation;

const UNCLEAN: i8 = 1;
/// A partition whose preferred leader was asked to take over: (topic row, partition row),
/// the partition, its Raft group, the preferred leader.
type Waiting = ((usize, usize), Arc<Partition>, RaftGroupId, i32);

/// How often a preferred leader that has not taken over is asked again.
const ASK_AGAIN: Duration = Duration::from_millis(500);
/// How much before the request's timeout_ms the answer goes out.
const ANSWER_MARGIN: Duration = Duration::from_millis(200);
/// Longest wait for the preferred leaders to take over, whatever the request asks.
const WAIT_MAX_MS: i32 = 60_000;

pub fn handle(b: &Arc<Broker>, r: ElectLeadersRequest, v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::Alter) {
        // As Kafka: the top-level error, and every partition asked for refused with it.
        let denied = ResponseError::ClusterAuthorizationFailed;
        let results = r
            .topic_partitions
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                let rows = t.partitions.iter().map(|p| PartitionResult::default().with_partition_id(*p));
                let rows = rows.map(|row| row.with_error_code(denied.code())).collect();
                ReplicaElectionResult::default().with_topic(t.topic).with_partition_result(rows)
            })
            .collect();
        let mut resp = ElectLeadersResponse::default().with_replica_election_results(results);
        if v >= 1 {
            resp.error_code = denied.code();
        }
        return now(resp);
    }
    let unclean = v >= 1 && r.election_type == UNCLEAN;
    let wanted: Vec<(String, Vec<i32>)> = match r.topic_partitions {
        Some(tps) => tps.into_iter().map(|t| (t.topic.0.to_string(), t.partitions)).collect(),
        None => b
            .catalog
            .topics_snapshot()
            .iter()
            .map(|t| (t.name.to_string(), (0..t.partitions.len() as i32).collect()))
            .collect(),
    };
    let wait = Duration::from_millis(r.timeout_ms.clamp(0, WAIT_MAX_MS) as u64);
    let b = b.clone();
    Box::pin(async move {
        let mut results: Vec<(String, Vec<PartitionResult>)> = Vec::with_capacity(wanted.len());
        // (result row, partition, preferred leader): transfers asked for, not yet seen.
        let mut waiting: Vec<Waiting> = Vec::new();
        for (name, partitions) in wanted {
            let topic = b.catalog.topic(&name);
            let mut rows = Vec::with_capacity(partitions.len());
            for p in partitions {
                let row = PartitionResult::default().with_partition_id(p);
                let fail = |code: ResponseError, msg: &str| {
                    row.clone().with_error_code(code.code()).with_error_message(Some(str_bytes(msg)))
                };
                let Some(part) = topic.as_ref().and_then(|t| t.partitions.get(p as usize)).cloned() else {
                    rows.push(fail(
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.",
                    ));
                    continue;
                };
                let leader = b.partition_leader(&part).0;
                let preferred = part.replicas.first().copied().unwrap_or(b.node_id());
                if unclean {
                    rows.push(match leader {
                        -1 => fail(
                            ResponseError::EligibleLeadersNotAvailable,
                            "Replicas without every committed entry are never elected.",
                        ),
                        _ => fail(
                            ResponseError::ElectionNotNeeded,
                            "The partition has a leader with every committed entry.",
                        ),
                    });
                    continue;
                }
                if leader == preferred {
                    rows.push(fail(ResponseError::ElectionNotNeeded, "The preferred leader already leads."));
                    continue;
                }
                let controller = b.controller();
                let (Some(group), true) = (controller.group_of(&part.topic, part.index), leader >= 0) else {
                    rows.push(fail(
                        ResponseError::PreferredLeaderNotAvailable,
                        "The partition has no leader right now.",
                    ));
                    continue;
                };
                b.replicas.ask_to_elect(leader, group, preferred);
                waiting.push(((results.len(), rows.len()), part, group, preferred));
                rows.push(row);
            }
            results.push((name, rows));
        }
        // Answer a little before timeout_ms: clients give up at the same moment.
        let deadline = tokio::time::Instant::now() + wait.saturating_sub(ANSWER_MARGIN);
        let mut asked = tokio::time::Instant::now();
        loop {
            waiting.retain(|(_, part, _, preferred)| b.partition_leader(part).0 != *preferred);
            let now = tokio::time::Instant::now();
            if waiting.is_empty() || now >= deadline {
                break;
            }
            // A preferred leader that was behind may have caught up, and a leader may have
            // changed: ask again.
            if now.duration_since(asked) >= ASK_AGAIN {
                asked = now;
                for (_, part, group, preferred) in &waiting {
                    let leader = b.partition_leader(part).0;
                    if leader >= 0 {
                        b.replicas.ask_to_elect(leader, *group, *preferred);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100).min(deadline - now)).await;
        }
        for ((t, p), _, _, preferred) in waiting {
            let msg = format!("Broker {preferred} did not take over in time: it is down, or behind the leader.");
            let row = &mut results[t].1[p];
            row.error_code = ResponseError::PreferredLeaderNotAvailable.code();
            row.error_message = Some(str_bytes(&msg));
        }
        let results = results
            .into_iter()
            .map(|(name, rows)| {
                ReplicaElectionResult::default().with_topic(topic_name(&name)).with_partition_result(rows)
            })
            .collect();
        Some(ElectLeadersResponse::default().with_replica_election_results(results).into())
    })
}
