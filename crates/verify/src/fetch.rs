//! One round of fetches, as every reader of the workload does it: the live consumers and
//! the final reader (`workload`) and the group members (`group`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use runnel_client::{for_each_committed_record, topic_name, value_stamp, FETCH_VERSION};

use crate::history::{Op, OpKind, Outcome};
use crate::router::{retriable, Router};

/// One round of fetches for `position`'s partitions, one request per leader. Records read
/// are appended to `records` and move `position` on; each request is one op on the
/// timeline. With `committed`, as a `read_committed` consumer: up to the last stable offset,
/// the records of aborted transactions left out.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fetch_round(
    router: &mut Router,
    topic: &str,
    position: &mut BTreeMap<i32, i64>,
    records: &mut Vec<(i32, i64, u64)>,
    process: &str,
    t0: Instant,
    ops: &mut Vec<Op>,
    committed: bool,
) {
    // One request per broker read from: a partition's leader, or the replica it sent us to.
    let mut by_reader: BTreeMap<(i32, String), Vec<i32>> = BTreeMap::new();
    for p in position.keys() {
        match router.reader(*p).await {
            Some(reader) => by_reader.entry(reader).or_default().push(*p),
            None => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return;
            }
        }
    }
    for ((broker, addr), parts) in by_reader {
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_rack_id(kafka_protocol::protocol::StrBytes::from_string(router.rack().to_string()))
            .with_max_wait_ms(200)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_session_epoch(-1)
            .with_isolation_level(i8::from(committed))
            .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(
                parts
                    .iter()
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(*p)
                            .with_fetch_offset(position[p])
                            .with_partition_max_bytes(1 << 20)
                    })
                    .collect(),
            )]);
        let began = Instant::now();
        let answer = router.call_at(&addr, &req, FETCH_VERSION).await;
        let mut outcome = Outcome::Ok;
        match answer {
            Err(_) => {
                outcome = Outcome::Unknown;
                // A follower that failed us: back to the leaders for what it served.
                router.unprefer(None, broker);
                router.leader_moved(Some(&addr)).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(resp) => {
                let mut moved = false;
                for t in resp.responses {
                    for p in t.partitions {
                        let partition = p.partition_index;
                        if p.error_code != 0 {
                            outcome = Outcome::Failed;
                            if router.reads_from_follower(partition) {
                                // As Kafka's clients: an error from the preferred replica
                                // (it fell behind, or no longer holds the partition) sends
                                // the consumer back to the leader, which chooses again.
                                router.unprefer(Some(partition), broker);
                            } else {
                                moved |= retriable(p.error_code);
                            }
                            continue;
                        }
                        if p.preferred_read_replica.0 >= 0 {
                            router.prefer(partition, p.preferred_read_replica.0);
                            continue;
                        }
                        let Some(data) = p.records else { continue };
                        router.count_fetched(broker, data.len());
                        let Some(&from) = position.get(&partition) else { continue };
                        let aborted: Vec<(i64, i64)> = p
                            .aborted_transactions
                            .iter()
                            .flatten()
                            .map(|a| (a.producer_id.0, a.first_offset))
                            .collect();
                        let mut got = Vec::new();
                        let read = for_each_committed_record(&data, from, &aborted, |offset, v| {
                            got.push((partition, offset, value_stamp(v).unwrap_or(u64::MAX)));
                        });
                        // A fetch with an undecodable batch is dropped whole and read again.
                        if let Ok(Some(next)) = read {
                            position.insert(partition, next);
                            records.extend(got);
                        }
                    }
                }
                if moved {
                    router.leader_moved(None).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        ops.push(Op {
            kind: OpKind::Poll,
            process: process.to_string(),
            start_ms: began.duration_since(t0).as_millis() as u64,
            latency_ms: began.elapsed().as_millis() as u64,
            outcome,
        });
    }
}
