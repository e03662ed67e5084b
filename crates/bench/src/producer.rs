//! The load generator's producer: records batched per partition (up to `batch.size`, or
//! `linger.ms` after a batch opened), one Produce request per leader carrying every ready
//! batch, at most `max.in.flight` requests per connection, `buffer.memory` bounding what is
//! buffered or in flight. Unkeyed records use a sticky partition (switched when its batch
//! goes out, as Kafka's default partitioner does); keyed ones Kafka's murmur2 hash.
//!
//! Latency of a record runs from its start to the arrival of the answer to the request that
//! carried it. With a target rate the start is when the schedule said it should be sent,
//! not when it was (coordinated omission), so falling behind shows up as latency.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;
use rand::{Rng, SeedableRng};
use runnel_client::{init_producer_id, topic_name, wall_ms, Connection, TopicLayout, Writer, PRODUCE_VERSION};
use runnel_wire::build::{BatchBuilder, ProducerFields};
use tokio::task::JoinSet;

use crate::stats::{Live, Recorder};
use crate::Workload;

/// Kafka's murmur2 (the Java client's `Utils.murmur2`), for keyed partitioning.
pub fn murmur2(data: &[u8]) -> i32 {
    let m: u32 = 0x5bd1e995;
    let r = 24;
    let mut h: u32 = 0x9747b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(m);
        k ^= k >> r;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(m);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(m);
    h ^= h >> 15;
    h as i32
}

pub fn partition_for_key(key: &[u8], partitions: usize) -> usize {
    ((murmur2(key) & 0x7fffffff) as usize) % partitions.max(1)
}

/// Microseconds since the run's start: what a record carries in its first 8 value bytes,
/// so a consumer in this process can tell its end-to-end latency.
pub fn micros_since(t0: Instant, at: Instant) -> u64 {
    at.saturating_duration_since(t0).as_micros() as u64
}

/// Records generated between two readings of the clocks. Reading both for every record
/// cost a quarter of the load generator's CPU with 8-byte records; a reading shared by the
/// next few records is late by the time it takes to generate them (well under a
/// microsecond each), so a record's end-to-end latency is that much longer at most.
const CLOCK_READ_EVERY: u32 = 16;

/// One reading of the clocks, shared by the next [`CLOCK_READ_EVERY`] records.
#[derive(Default)]
struct Clock {
    /// The value stamp: µs since the run's start.
    stamp_us: u64,
    /// The record timestamp (CreateTime), ms since the Unix epoch.
    wall_ms: i64,
    /// Records that used this reading (0: read again).
    uses: u32,
}

impl Clock {
    /// (value stamp, record timestamp) for the next record, read afresh every
    /// [`CLOCK_READ_EVERY`] records.
    fn next(&mut self, t0: Instant) -> (u64, i64) {
        if self.uses == 0 {
            (self.stamp_us, self.wall_ms) = (micros_since(t0, Instant::now()), wall_ms());
        }
        self.uses = (self.uses + 1) % CLOCK_READ_EVERY;
        (self.stamp_us, self.wall_ms)
    }
}

struct Open {
    builder: BatchBuilder,
    /// Each record's start (µs since the run's start) and size.
    starts: Vec<(u64, u32)>,
    opened: Instant,
}

struct PartitionState {
    open: Option<Open>,
    /// Batches that reached `batch.size`, oldest first; one goes out per request.
    full: std::collections::VecDeque<Open>,
    next_sequence: i32,
}

/// One request's batches, waiting for the answer.
struct Sent {
    batches: Vec<(usize, Vec<(u64, u32)>)>,
    bytes: usize,
}

pub struct ProducerPlan {
    pub workload: Arc<Workload>,
    pub layout: TopicLayout,
    pub addresses: HashMap<i32, String>,
    pub t0: Instant,
    pub deadline: Instant,
    /// Records this producer writes (None: until the deadline).
    pub records: Option<u64>,
    /// Records per second for this producer (None: as fast as it can).
    pub rate: Option<f64>,
    pub index: usize,
    pub live: Arc<Live>,
}

type Answer = (Sent, Result<(kafka_protocol::messages::ProduceResponse, Instant)>);

/// Most a new batch reserves up front (`batch.size` may be set far larger than any batch
/// a run fills).
const BATCH_RESERVE_MAX: usize = 1 << 20;

/// Above this many records a second a producer's schedule is kept by tokio's timer: records
/// then go out in bursts of several per millisecond anyway.
const PACER_RATE_MAX: f64 = 20_000.0;

/// Wakes a producer at each record's scheduled time from a thread of its own. Tokio's timer
/// rounds a sleep up to the next millisecond, and a record's latency counts from its
/// scheduled time, so at 1,000 records/s that lateness (the load generator's own, up to a
/// millisecond) was in every produce latency measured, for both systems alike. A thread's
/// sleep wakes within tens of microseconds.
fn pacer(start: Instant, rate: f64, deadline: Instant) -> tokio::sync::mpsc::Receiver<()> {
    use tokio::sync::mpsc::error::TrySendError;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let spawned = std::thread::Builder::new().name("bench-pacer".into()).spawn(move || {
        for k in 0u64.. {
            let due = start + Duration::from_secs_f64(k as f64 / rate);
            if due > deadline {
                break;
            }
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            // Full: a wake-up is already pending, and the producer generates every record
            // that is due when it runs.
            if let Err(TrySendError::Closed(())) = tx.try_send(()) {
                break;
            }
        }
    });
    if let Err(e) = spawned {
        // The channel's sender went with the closure: the producer falls back to its timer.
        eprintln!("runnel bench: no pacer thread ({e}); the schedule keeps millisecond precision");
    }
    rx
}

/// Runs one producer to its record count or deadline; returns what it measured.
pub async fn run(plan: ProducerPlan) -> Result<Recorder> {
    let w = plan.workload.clone();
    let mut rec = Recorder::new(plan.t0);
    let client_id = format!("runnel-bench-producer-{}", plan.index);
    let mut conns: BTreeMap<i32, Arc<Connection>> = BTreeMap::new();
    for leader in plan.layout.leaders.iter() {
        if !conns.contains_key(leader) {
            let addr = plan.addresses.get(leader).context("leader address")?;
            // This task writes each request as it sends it: it generates records without
            // yielding, and with one Tokio worker (the load generator pinned to one CPU) a
            // writer task would wait for that, and a writer thread for the CPU.
            conns.insert(*leader, Connection::connect_with(addr, &client_id, w.in_flight, Writer::Caller).await?);
        }
    }
    let (producer_id, producer_epoch) = if w.idempotent {
        let conn = conns.values().next().context("no broker")?;
        // A broker may not be ready to hand out ids yet (COORDINATOR_LOAD_IN_PROGRESS and
        // the like): retried for 30 s, as a Kafka producer would.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match init_producer_id(conn).await? {
                (0, id, epoch) => break (id, epoch),
                (code, _, _) if Instant::now() > deadline => {
                    anyhow::bail!("InitProducerId failed with error code {code}")
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    } else {
        (-1, -1)
    };
    let n = plan.layout.leaders.len();
    let mut parts: Vec<PartitionState> =
        (0..n).map(|_| PartitionState { open: None, full: Default::default(), next_sequence: 0 }).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed ^ plan.index as u64);
    let payload: Vec<u8> = (0..w.record_bytes.1.max(8)).map(|_| rng.gen()).collect();
    let keys: Vec<Vec<u8>> =
        w.keys.map(|k| (0..k.min(1 << 20)).map(|i| format!("key-{i}").into_bytes()).collect()).unwrap_or_default();
    let mut sticky = rng.gen_range(0..n.max(1));
    let mut in_flight: JoinSet<Answer> = JoinSet::new();
    let mut buffered = 0usize;
    let mut generated = 0u64;
    let linger = Duration::from_millis(w.linger_ms);
    let start = Instant::now();
    let mut paced = plan.rate.filter(|r| *r > 0.0 && *r <= PACER_RATE_MAX).map(|r| pacer(start, r, plan.deadline));
    loop {
        let now = Instant::now();
        let more = plan.records.is_none_or(|r| generated < r) && now < plan.deadline;
        let done_generating = !more;
        // 1. Send ready batches: full, lingered long enough, or everything once done; one
        // request per leader at a time, as long as its connection has a free in-flight slot
        // (as Kafka's sender does: a backlog goes out in up to `max.in.flight` requests at
        // once, not one per answer). Sending comes before generating more: an answer frees
        // a slot, and the next request goes out at once, as Kafka's sender thread sends while
        // the application goes on producing.
        let mut next_linger: Option<Instant> = None;
        for st in parts.iter_mut() {
            if st.full.is_empty() {
                if let Some(o) = &st.open {
                    let deadline = o.opened + linger;
                    if done_generating || deadline <= now {
                        st.full.extend(st.open.take());
                    } else {
                        next_linger = Some(next_linger.map_or(deadline, |d: Instant| d.min(deadline)));
                    }
                }
            }
        }
        loop {
            let mut ready: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
            for (p, st) in parts.iter().enumerate() {
                if !st.full.is_empty() {
                    ready.entry(plan.layout.leaders[p]).or_default().push(p);
                }
            }
            ready.retain(|leader, _| w.acks == 0 || conns.get(leader).is_some_and(|c| c.free_slots() > 0));
            if ready.is_empty() {
                break;
            }
            for (leader, ps) in ready {
                let mut data = Vec::with_capacity(ps.len());
                // The batches, written to the socket from where they were built.
                let mut batches = Vec::with_capacity(ps.len());
                let mut sent = Sent { batches: Vec::with_capacity(ps.len()), bytes: 0 };
                for p in ps {
                    let st = &mut parts[p];
                    let Some(o) = st.full.pop_front() else { continue };
                    let producer = if w.idempotent {
                        ProducerFields { producer_id, producer_epoch, base_sequence: st.next_sequence }
                    } else {
                        ProducerFields::NONE
                    };
                    st.next_sequence = st.next_sequence.wrapping_add(o.builder.count());
                    // Finished in place: an uncompressed batch is not copied.
                    let batch = o.builder.into_batch(w.codec, producer)?;
                    batches.push(batch.clone());
                    data.push(PartitionProduceData::default().with_index(p as i32).with_records(Some(batch)));
                    sent.bytes += o.starts.iter().map(|(_, s)| *s as usize + 16).sum::<usize>();
                    sent.batches.push((p, o.starts));
                }
                let req = ProduceRequest::default().with_acks(w.acks).with_timeout_ms(30_000).with_topic_data(vec![
                    TopicProduceData::default().with_name(topic_name(&w.topic)).with_partition_data(data),
                ]);
                let conn = conns.get(&leader).context("connection to leader")?;
                if w.acks == 0 {
                    // No answer comes: the record is done once written.
                    let fut = conn.send_no_reply(&req, PRODUCE_VERSION, &batches).await;
                    let at = Instant::now();
                    buffered -= sent.bytes;
                    match fut {
                        Ok(()) => {
                            let now_us = micros_since(plan.t0, at);
                            for (_, starts) in &sent.batches {
                                done(&mut rec, &plan.live, at, now_us, starts);
                            }
                        }
                        Err(e) => count_error(&mut rec, &plan.live, &sent, &format!("send: {e}")),
                    }
                    continue;
                }
                let fut = conn.send_sharing(&req, PRODUCE_VERSION, &batches).await?;
                in_flight.spawn(async move { (sent, fut.await) });
                // Answers that already came free buffer space now.
                while let Some(done) = in_flight.try_join_next() {
                    buffered -= settle(done?, &mut rec, &plan);
                }
            }
        }
        // 2. Generate what the schedule allows and the buffer holds.
        let mut next_due: Option<Instant> = None;
        let mut clock = Clock::default();
        let mut generated_now = 0u64;
        while more && buffered < w.buffer_bytes && plan.records.is_none_or(|r| generated < r) {
            let due = plan.rate.map(|r| start + Duration::from_secs_f64(generated as f64 / r));
            if let Some(d) = due {
                if d > now {
                    next_due = Some(d);
                    break;
                }
            }
            let size = if w.record_bytes.0 == w.record_bytes.1 {
                w.record_bytes.0
            } else {
                rng.gen_range(w.record_bytes.0..=w.record_bytes.1)
            };
            let key = (!keys.is_empty()).then(|| &keys[rng.gen_range(0..keys.len())]);
            let p = match key {
                Some(k) => partition_for_key(k, n),
                None => sticky,
            };
            let started = micros_since(plan.t0, due.unwrap_or(now));
            let (stamp_us, ts_ms) = clock.next(plan.t0);
            let open = parts[p].open.get_or_insert_with(|| Open {
                // Room for a full batch and the record that fills it (its key is a few bytes,
                // its framing under 64): records are copied in once, not again as it grows.
                builder: BatchBuilder::with_capacity(
                    ts_ms,
                    (w.batch_bytes + w.record_bytes.1 + 64).min(BATCH_RESERVE_MAX),
                ),
                starts: Vec::new(),
                opened: now,
            });
            let stamp = stamp_us.to_be_bytes();
            if size >= 8 {
                open.builder.push_parts(ts_ms, key.map(Vec::as_slice), Some(&[&stamp, &payload[..size - 8]]));
            } else {
                open.builder.push(ts_ms, key.map(Vec::as_slice), Some(&payload[..size]));
            }
            open.starts.push((started, size as u32));
            buffered += size + 16;
            generated += 1;
            generated_now += 1;
            if open.builder.size_bytes() >= w.batch_bytes {
                let st = &mut parts[p];
                st.full.extend(st.open.take());
                if key.is_none() && n > 1 {
                    sticky = (sticky + 1 + rng.gen_range(0..n - 1)) % n;
                }
            }
        }
        if generated_now > 0 {
            // What filled or lingered long enough goes out before the producer waits.
            continue;
        }
        if done_generating && parts.iter().all(|p| p.open.is_none() && p.full.is_empty()) {
            break;
        }
        // 3. Wait for an answer (what is still ready waits for an in-flight slot), the next
        // scheduled record or the next linger deadline.
        // With a pacer, it wakes the producer for the next scheduled record.
        let timed_due = if paced.is_some() { None } else { next_due };
        let wake = [timed_due, next_linger, (!done_generating).then_some(plan.deadline)].into_iter().flatten().min();
        let full = buffered >= w.buffer_bytes;
        let mut pacer_stopped = false;
        let tick = async {
            match paced.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                buffered -= settle(done?, &mut rec, &plan);
            }
            _ = tokio::time::sleep_until(wake.unwrap_or(now + Duration::from_millis(1)).into()), if !full || in_flight.is_empty() => {}
            woke = tick, if !full && next_due.is_some() => pacer_stopped = woke.is_none(),
        }
        if pacer_stopped {
            // Past its deadline, or it never started: the timer takes over.
            paced = None;
        }
    }
    while let Some(done) = in_flight.join_next().await {
        settle(done?, &mut rec, &plan);
    }
    Ok(rec)
}

fn count_error(rec: &mut Recorder, live: &Live, sent: &Sent, kind: &str) {
    let n: u64 = sent.batches.iter().map(|(_, s)| s.len() as u64).sum();
    rec.error(kind, n);
    Live::add(&live.errors, n);
}

/// Records acknowledged at `at` (`now_us` after the run's start): each record's start and
/// size.
fn done(rec: &mut Recorder, live: &Live, at: Instant, now_us: u64, starts: &[(u64, u32)]) {
    rec.record_all(at, starts.iter().map(|(s, size)| (now_us.saturating_sub(*s), *size as u64)));
    Live::add(&live.produced, starts.len() as u64);
    Live::add(&live.produced_bytes, starts.iter().map(|(_, size)| *size as u64).sum());
}

/// Records an answer; returns the bytes it frees.
fn settle(answer: Answer, rec: &mut Recorder, plan: &ProducerPlan) -> usize {
    let (sent, result) = answer;
    match result {
        Err(e) => count_error(rec, &plan.live, &sent, &format!("request: {e}")),
        Ok((resp, arrived)) => {
            let mut codes: HashMap<i32, i16> = HashMap::new();
            for t in &resp.responses {
                for p in &t.partition_responses {
                    codes.insert(p.index, p.error_code);
                }
            }
            let now_us = micros_since(plan.t0, arrived);
            for (p, starts) in &sent.batches {
                match codes.get(&(*p as i32)).copied().unwrap_or(-1) {
                    0 => done(rec, &plan.live, arrived, now_us, starts),
                    code => {
                        let kind = ResponseError::try_from_code(code)
                            .map(|e| format!("{e:?}"))
                            .unwrap_or_else(|| format!("error code {code}"));
                        rec.error(&kind, starts.len() as u64);
                        Live::add(&plan.live.errors, starts.len() as u64);
                    }
                }
            }
        }
    }
    sent.bytes
}
