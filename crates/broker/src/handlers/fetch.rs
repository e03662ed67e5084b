//! Fetch (key 1): read committed batches (below the high watermark; with read_committed,
//! below the last stable offset, with the aborted transactions listed) for each partition,
//! within `max_bytes` for the response and `partition_max_bytes` for each partition, and
//! long-poll up to `max_wait_ms` until `min_bytes` are there. Incremental fetch sessions
//! (KIP-227) are in `fetch_session`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use runnel_security::acl::Operation;
use runnel_storage::{FileSlice, ReadPlan, Span};
use runnel_wire::Batches;
use tokio::time::Instant;
use tracing::info;

use super::topic_name;
use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use crate::errors;
use crate::fetch_session::{PartKey, PartState, SessionError};
use crate::partition::Isolation;
use crate::replica_selector::{ClientPlace, LazyPlace};

struct Wanted {
    parts: Vec<(PartKey, PartState)>,
    forgotten: Vec<PartKey>,
}

/// Topic names and ids from the request, resolved against the catalog. v13+ names topics
/// by id only; an id we do not know keeps its nil name and fails per partition.
fn wanted(b: &Broker, r: &FetchRequest, v: i16) -> Wanted {
    let key = |name: &str, id: uuid::Uuid, partition: i32| {
        if v >= 13 {
            let name = b.catalog.topic_by_id(id).map(|t| t.name.to_string()).unwrap_or_default();
            PartKey { topic: name, topic_id: id, partition }
        } else {
            let id = b.catalog.topic(name).map(|t| t.id).unwrap_or_default();
            PartKey { topic: name.to_string(), topic_id: id, partition }
        }
    };
    let parts = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (key(&t.topic.0, t.topic_id, p.partition), PartState::new(p.fetch_offset, p.partition_max_bytes))
            })
        })
        .collect();
    let forgotten = r
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| key(&t.topic.0, t.topic_id, *p)))
        .collect();
    Wanted { parts, forgotten }
}

struct Read {
    key: PartKey,
    data: PartitionData,
    /// Send it even in an incremental response (records, an error, or changed offsets).
    news: bool,
    /// The file slice that `data.records` stands in for (`sendfile.rs`).
    slice: Option<FileSlice>,
}

/// A partition's records for a response: read into memory, or, when the connection can
/// send from files and they are long enough to be a piece of their own, a file slice and
/// its stand-in.
enum Records {
    Memory(Vec<u8>),
    File(FileSlice, Bytes),
}

impl Records {
    /// A partition's records, read without waiting for the disk on a runtime thread
    /// (`disk_reads.rs`). Pages gone from the page cache are read into memory on the
    /// blocking pool, rather than left for `sendfile` to read on the connection's thread.
    async fn read(b: &Broker, plan: ReadPlan, from_files: bool) -> std::io::Result<Records> {
        let read = move |span: Span, cached| match cached {
            true => Records::of(span, from_files),
            false => span.execute().map(Records::Memory),
        };
        b.disk_reads.read(plan, read).await
    }

    /// The span's records: into memory, or as a file slice to send with `sendfile`.
    fn of(span: Span, from_files: bool) -> std::io::Result<Records> {
        // Records too few for a piece of their own are read into memory: one read, where
        // locating them would read their headers first.
        if !from_files || span.len() < crate::out_frame::SHARE_MIN {
            return span.execute().map(Records::Memory);
        }
        let Some(slice) = span.locate()? else { return Ok(Records::Memory(Vec::new())) };
        let hole = (slice.len >= crate::out_frame::SHARE_MIN).then(|| crate::sendfile::placeholder(slice.len));
        match hole.flatten() {
            Some(hole) => Ok(Records::File(slice, hole)),
            None => slice.read().map(Records::Memory),
        }
    }

    fn len(&self) -> usize {
        match self {
            Records::Memory(b) => b.len(),
            Records::File(s, _) => s.len,
        }
    }

    /// The offset after the last batch.
    fn next_offset(&self) -> Option<i64> {
        match self {
            Records::Memory(b) => Batches::new(b).filter_map(Result::ok).last().map(|(h, _)| h.next_offset()),
            Records::File(s, _) => Some(s.next_offset),
        }
    }
}

/// One pass over the partitions: what a response sent now would hold. Partitions of the
/// topics in `denied` (no READ on them) get TOPIC_AUTHORIZATION_FAILED. A consumer at
/// `place` (its `client.rack` resolved) is sent to a nearer replica of each partition this
/// broker leads, when there is one (KIP-392). With `from_files`, records are located in
/// their segment files rather than read (the connection sends them with `sendfile`).
#[allow(clippy::too_many_arguments)]
async fn read_all(
    b: &Broker,
    parts: &[(PartKey, PartState)],
    denied: &HashSet<&str>,
    max_bytes: usize,
    isolation: Isolation,
    place: Option<&LazyPlace<impl Fn() -> Option<ClientPlace>>>,
    v: i16,
    from_files: bool,
) -> (Vec<Read>, usize) {
    let mut total = 0usize;
    let mut out = Vec::with_capacity(parts.len());
    for (key, st) in parts {
        let mut data = PartitionData::default().with_partition_index(key.partition).with_high_watermark(-1);
        data.last_stable_offset = -1;
        if v >= 5 {
            data.log_start_offset = -1;
        }
        if v >= 11 {
            data.preferred_read_replica = BrokerId(-1);
        }
        if denied.contains(key.topic.as_str()) {
            data.error_code = ResponseError::TopicAuthorizationFailed.code();
            out.push(Read { key: key.clone(), data, news: true, slice: None });
            continue;
        }
        let part = b
            .catalog
            .topic(&key.topic)
            .filter(|t| t.id == key.topic_id || v < 13)
            .and_then(|t| t.partitions.get(key.partition as usize).cloned());
        let Some(part) = part else {
            let code = if v >= 13 && key.topic.is_empty() {
                ResponseError::UnknownTopicId
            } else {
                ResponseError::UnknownTopicOrPartition
            };
            data.error_code = code.code();
            out.push(Read { key: key.clone(), data, news: true, slice: None });
            continue;
        };
        if let Some(replica) = place.and_then(|p| part.preferred_read_replica(p, st.fetch_offset)) {
            // As Kafka: no records, the partition's bounds, and where to read instead.
            data.preferred_read_replica = BrokerId(replica);
            data.high_watermark = part.high_watermark();
            data.last_stable_offset = part.last_stable_offset();
            data.log_start_offset = part.log_start_offset();
            data.records = Some(Bytes::new());
            out.push(Read { key: key.clone(), data, news: true, slice: None });
            continue;
        }
        let budget = max_bytes.saturating_sub(total).min(st.max_bytes.max(0) as usize);
        // Fetch v11+ carries the consumer's rack: such a consumer may read from a follower.
        let read = match part.read(st.fetch_offset, budget, total == 0, isolation, v >= 11) {
            Ok(read) => read,
            Err(e) => {
                data.error_code = errors::partition(&e).code();
                out.push(Read { key: key.clone(), data, news: true, slice: None });
                continue;
            }
        };
        if read.first_follower_read {
            info!(broker = b.node_id(), topic = %key.topic, partition = key.partition,
                "serving consumers from this follower (fetch from follower, KIP-392)");
        }
        data.high_watermark = read.high_watermark;
        if v >= 4 {
            data.last_stable_offset = read.last_stable_offset;
        }
        if v >= 5 {
            data.log_start_offset = read.log_start_offset;
        }
        data.aborted_transactions = if v >= 4 { Some(Vec::new()) } else { None };
        let records = match read.plan {
            Ok(plan) => Records::read(b, plan, from_files).await.map_err(Into::into),
            Err(e) => Err(e),
        };
        let mut news = read.high_watermark != st.sent_high_watermark
            || data.last_stable_offset != st.sent_last_stable_offset
            || data.log_start_offset != st.sent_log_start_offset;
        let mut slice = None;
        match records {
            Ok(records) => {
                total += records.len();
                news |= records.len() > 0;
                if v >= 4 && !read.aborted.is_empty() {
                    // The aborted transactions that reach into what is returned.
                    let end = records.next_offset();
                    let within = read.aborted.iter().filter(|a| end.is_some_and(|end| a.first_offset < end));
                    data.aborted_transactions = Some(
                        within
                            .map(|a| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(a.producer_id))
                                    .with_first_offset(a.first_offset)
                            })
                            .collect(),
                    );
                }
                data.records = Some(match records {
                    Records::Memory(bytes) => Bytes::from(bytes),
                    Records::File(s, hole) => {
                        slice = Some(s);
                        hole
                    }
                });
            }
            Err(e) => {
                data.error_code = errors::read(&e).code();
                data.records = Some(Bytes::new());
                news = true;
            }
        }
        out.push(Read { key: key.clone(), data, news, slice });
    }
    (out, total)
}

/// The Raft groups of the partitions among `parts` that this broker hosts: what a long
/// poll over them waits for.
fn hosted_groups<'a>(b: &'a Broker, parts: &'a [(PartKey, PartState)]) -> impl Iterator<Item = u64> + 'a {
    parts.iter().filter_map(|(key, _)| {
        b.catalog.topic(&key.topic).and_then(|t| t.partitions.get(key.partition as usize).and_then(|p| p.group()))
    })
}

pub fn handle(b: Arc<Broker>, r: FetchRequest, v: i16, ctx: &Ctx) -> Reply {
    let access = ctx.access.clone();
    let quotas = ctx.quotas.clone();
    // (the quotas, the client) when some client has a quota.
    let quota = (!quotas.is_empty()).then(|| (quotas, ctx.quota_client(), ctx.mute.clone()));
    let mute = ctx.mute.clone();
    let files = ctx.files.clone();
    Box::pin(async move {
        let w = wanted(&b, &r, v);
        let (session_id, epoch) = if v >= 7 { (r.session_id, r.session_epoch) } else { (0, -1) };
        let resolved = match b.fetch_sessions.resolve(session_id, epoch, w.parts, &w.forgotten) {
            Ok(res) => res,
            Err(e) => {
                let code = match e {
                    SessionError::NotFound => ResponseError::FetchSessionIdNotFound,
                    SessionError::InvalidEpoch => ResponseError::InvalidFetchSessionEpoch,
                };
                return Some(FetchResponse::default().with_error_code(code.code()).into());
            }
        };
        // As Kafka: the request's max_bytes, never more than the broker's fetch.max.bytes
        // (a response is built in memory before it is sent).
        let broker_max = b.config.settings.i64("fetch.max.bytes").max(1024) as usize;
        let mut max_bytes = if v >= 3 { r.max_bytes.max(0) as usize } else { usize::MAX }.min(broker_max);
        if let Some((table, client, mute)) = &quota {
            // A consumer over its consumer_byte_rate gets an empty answer and waits out its
            // throttle (KIP-219); one under it gets at most what the quota allows in a window.
            let throttle_ms = b.quotas.throttled(table, client, crate::quota::FETCH, crate::now_ms());
            if throttle_ms > 0 {
                mute.set(throttle_ms);
                let mut resp = FetchResponse::default().with_throttle_time_ms(mute.remaining_ms());
                if v >= 7 {
                    resp.session_id = resolved.session_id;
                }
                return Some(resp.into());
            }
            if let Some(cap) = b.quotas.window_bytes(table, client, crate::quota::FETCH) {
                max_bytes = max_bytes.min(cap);
            }
        }
        let isolation = Isolation::from_kafka(if v >= 4 { r.isolation_level } else { 0 });
        let wait_ms_max = b.config.settings.i64("fetch.max.wait.ms.max");
        let deadline = Instant::now() + Duration::from_millis(r.max_wait_ms.clamp(0, wait_ms_max as i32) as u64);
        // An unknown id (no name) is UNKNOWN_TOPIC_ID whoever asks.
        let denied: HashSet<&str> = resolved
            .parts
            .iter()
            .map(|(k, _)| k.topic.as_str())
            .filter(|t| !((v >= 13 && t.is_empty()) || access.topic(Operation::Read, t)))
            .collect();
        let place = (v >= 11 && !r.rack_id.is_empty()).then(|| {
            LazyPlace::new(|| {
                let selector = b.config.settings.get("replica.selector.class");
                ClientPlace::resolve(selector, &r.rack_id, b.controller().live_brokers())
            })
        });
        let reads = loop {
            let arrived = b.arrivals.watch(hosted_groups(&b, &resolved.parts));
            let (reads, total) =
                read_all(&b, &resolved.parts, &denied, max_bytes, isolation, place.as_ref(), v, files.is_some()).await;
            let errors = reads.iter().any(|rd| rd.data.error_code != 0);
            if total >= r.min_bytes.max(0) as usize || errors || Instant::now() >= deadline || b.is_shutting_down() {
                break reads;
            }
            let waiting = runnel_metrics::get().delayed(runnel_metrics::Delayed::Fetch);
            let woken = tokio::time::timeout_at(deadline, arrived.changed()).await;
            drop(waiting);
            if woken.is_err() {
                break read_all(&b, &resolved.parts, &denied, max_bytes, isolation, place.as_ref(), v, files.is_some())
                    .await
                    .0;
            }
        };
        count(&reads);
        let mut sent = Vec::new();
        let mut topics: Vec<FetchableTopicResponse> = Vec::new();
        // The file slices of the partitions sent, in the order they appear in the response.
        let mut slices = Vec::new();
        for rd in reads {
            if resolved.incremental && !rd.news {
                continue;
            }
            slices.extend(rd.slice);
            sent.push((rd.key.clone(), rd.data.high_watermark, rd.data.last_stable_offset, rd.data.log_start_offset));
            let same_topic = topics.last().is_some_and(|t| {
                if v >= 13 {
                    t.topic_id == rd.key.topic_id
                } else {
                    t.topic.0.as_str() == rd.key.topic
                }
            });
            if !same_topic {
                let mut t = FetchableTopicResponse::default();
                if v >= 13 {
                    t.topic_id = rd.key.topic_id;
                } else {
                    t.topic = topic_name(&rd.key.topic);
                }
                topics.push(t);
            }
            if let Some(t) = topics.last_mut() {
                t.partitions.push(rd.data);
            }
        }
        b.fetch_sessions.record_sent(resolved.session_id, &sent);
        let mut resp = FetchResponse::default().with_responses(topics);
        if let Some((table, client, mute)) = &quota {
            let bytes: usize = resp
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
                .sum();
            let throttle_ms = b.quotas.record(table, client, crate::quota::FETCH, bytes as f64, crate::now_ms());
            mute.set(throttle_ms);
        }
        // The connection's mute: this fetch's byte-rate throttle, or a longer one.
        resp.throttle_time_ms = mute.remaining_ms();
        if v >= 7 {
            resp.session_id = resolved.session_id;
        }
        if let Some(files) = &files {
            files.set(slices);
        }
        Some(resp.into())
    })
}

/// Counts what a fetch sent, per topic (Kafka's BrokerTopicMetrics): bytes out, the
/// partitions asked for, and those answered with an error. Topics that do not exist here
/// (or may not be read) are not counted, so a client cannot add series by naming topics.
fn count(reads: &[Read]) {
    let metrics = runnel_metrics::get();
    let unknown = [
        ResponseError::UnknownTopicOrPartition.code(),
        ResponseError::UnknownTopicId.code(),
        ResponseError::TopicAuthorizationFailed.code(),
    ];
    let mut last: Option<(&str, std::sync::Arc<runnel_metrics::TopicHandles>)> = None;
    for rd in reads {
        let code = rd.data.error_code;
        if rd.key.topic.is_empty() || unknown.contains(&code) {
            continue;
        }
        let m = match &last {
            Some((name, m)) if *name == rd.key.topic => m.clone(),
            _ => {
                let m = metrics.topic(&rd.key.topic);
                last = Some((rd.key.topic.as_str(), m.clone()));
                m
            }
        };
        m.fetch_requests.inc();
        if code != 0 {
            m.failed_fetch_requests.inc();
        }
        m.bytes_out.inc_by(rd.data.records.as_ref().map_or(0, |r| r.len()) as u64);
    }
}
