//! What each injected fault cost the clients, from the timeline: how long acknowledged
//! sends stopped (the unavailability window operators ask about), the slowest send, and
//! how many operations ended unknown or failed while it lasted.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::{region_of, History, OpKind, Outcome, Recovery};

/// After a fault is healed, effects still count for this long (a re-election, a client's
/// reconnect), unless the next fault starts sooner.
const AFTERMATH_MS: u64 = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultImpact {
    pub fault: String,
    pub start_ms: u64,
    pub end_ms: u64,
    /// The longest time one send stream (a producer's sends to one partition) went without
    /// an acknowledgement, over gaps that began before the fault's aftermath ended and ended
    /// after the fault started (and before the next one did).
    pub longest_stall_ms: u64,
    /// The stream that stalled longest.
    pub stalled_stream: String,
    /// The slowest send that started during the fault or its aftermath.
    pub slowest_send_ms: u64,
    /// Median and 99th percentile of the sends that started while the fault was in force.
    pub p50_send_ms: u64,
    pub p99_send_ms: u64,
    /// Operations that started then and ended unknown, or failed.
    pub unknown: usize,
    pub failed: usize,
    /// With client regions: the same gaps per region of the clients.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub regions: BTreeMap<String, RegionImpact>,
    /// After brokers were cut off: how the cluster came back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
    /// While it held (a drill's region cut): how soon a metadata change committed, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_write_ms: Option<u64>,
}

/// What a fault cost the clients of one region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegionImpact {
    /// The longest time one of the region's send streams went without an acknowledgement
    /// (as `longest_stall_ms`): the region's unavailability for writes.
    pub longest_stall_ms: u64,
    /// The longest time one of the region's consumers (assigned or in its group) went
    /// without a successful fetch: how long until it read again.
    pub longest_read_gap_ms: u64,
    /// The longest time one of the region's group members went without committing its
    /// offsets: its group coordinator's failover and the rebalance, as the group sees them.
    pub longest_commit_gap_ms: u64,
}

/// The longest gap between consecutive times of one stream that began before `to` and
/// ended after `from` (and no later than `next`), with the stream's name.
fn longest_gap<'a>(
    streams: impl Iterator<Item = (&'a str, &'a Vec<u64>)>,
    from: u64,
    to: u64,
    next: u64,
) -> (u64, String) {
    let mut longest = (0, String::new());
    for (stream, times) in streams {
        for pair in times.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b > from && b <= next && a < to && b - a > longest.0 {
                longest = (b - a, stream.to_string());
            }
        }
    }
    longest
}

/// The streams of `m` whose process runs in region `r`.
fn of_region<'m>(m: &'m BTreeMap<&'m str, Vec<u64>>, r: &'m str) -> impl Iterator<Item = (&'m str, &'m Vec<u64>)> {
    m.iter().filter(move |(k, _)| region_of(k) == Some(r)).map(|(k, v)| (*k, v))
}

/// Per process, the times its operations of `kind` ended successfully, in order.
fn successes(h: &History, kind: OpKind) -> BTreeMap<&str, Vec<u64>> {
    let mut out: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for o in h.ops.iter().filter(|o| o.kind == kind && o.outcome == Outcome::Ok) {
        out.entry(o.process.as_str()).or_default().push(o.start_ms + o.latency_ms);
    }
    for times in out.values_mut() {
        times.sort_unstable();
    }
    out
}

/// The `q` quantile (0..=1) of `v`, which it sorts; 0 when empty.
fn quantile(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Median and 99th percentile latency of the sends that started in no fault window and no
/// aftermath: what the faults are compared with.
pub fn baseline(h: &History) -> (u64, u64) {
    let quiet = |t: u64| h.faults.iter().all(|f| t < f.start_ms || t > f.end_ms + AFTERMATH_MS);
    let mut v: Vec<u64> =
        h.ops.iter().filter(|o| o.kind == OpKind::Send && quiet(o.start_ms)).map(|o| o.latency_ms).collect();
    (quantile(&mut v, 0.5), quantile(&mut v, 0.99))
}

pub fn impact(h: &History) -> Vec<FaultImpact> {
    // Per send stream, the times its acknowledgements arrived; per reader, its fetches.
    let acks = successes(h, OpKind::Send);
    let reads = successes(h, OpKind::Poll);
    let commits = successes(h, OpKind::Commit);
    let regions: std::collections::BTreeSet<&str> = h.ops.iter().filter_map(|o| region_of(&o.process)).collect();
    h.faults
        .iter()
        .enumerate()
        .map(|(k, f)| {
            // The aftermath ends early where the next fault starts: that one's effects are its
            // own, and a gap belongs to the last fault that started before it ended.
            let next = h.faults.get(k + 1).map_or(u64::MAX, |n| n.start_ms);
            let (from, to) = (f.start_ms, (f.end_ms + AFTERMATH_MS).min(next.saturating_sub(1)));
            let longest = longest_gap(acks.iter().map(|(k, v)| (*k, v)), from, to, next);
            let by_region = regions
                .iter()
                .map(|r| {
                    let impact = RegionImpact {
                        longest_stall_ms: longest_gap(of_region(&acks, r), from, to, next).0,
                        longest_read_gap_ms: longest_gap(of_region(&reads, r), from, to, next).0,
                        longest_commit_gap_ms: longest_gap(of_region(&commits, r), from, to, next).0,
                    };
                    (r.to_string(), impact)
                })
                .collect();
            let during = || h.ops.iter().filter(|o| o.start_ms >= from && o.start_ms <= to);
            let mut held: Vec<u64> = h
                .ops
                .iter()
                .filter(|o| o.kind == OpKind::Send && o.start_ms >= f.start_ms && o.start_ms <= f.end_ms)
                .map(|o| o.latency_ms)
                .collect();
            FaultImpact {
                fault: f.fault.clone(),
                start_ms: f.start_ms,
                end_ms: f.end_ms,
                longest_stall_ms: longest.0,
                stalled_stream: longest.1,
                p50_send_ms: quantile(&mut held, 0.5),
                p99_send_ms: quantile(&mut held, 0.99),
                slowest_send_ms: during().filter(|o| o.kind == OpKind::Send).map(|o| o.latency_ms).max().unwrap_or(0),
                unknown: during().filter(|o| o.outcome == Outcome::Unknown).count(),
                failed: during().filter(|o| o.outcome == Outcome::Failed).count(),
                regions: by_region,
                recovery: f.recovery,
                metadata_write_ms: f.metadata_write_ms,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{FaultWindow, Op};

    fn send(process: &str, start_ms: u64, latency_ms: u64, outcome: Outcome) -> Op {
        Op { kind: OpKind::Send, process: process.into(), start_ms, latency_ms, outcome }
    }

    #[test]
    fn the_longest_gap_between_acknowledgements_overlapping_a_fault_is_its_stall() {
        let mut h = History::default();
        // Stream a: acks every 100 ms, except one send at 5000 that took 1500 ms.
        for t in (0..30_000).step_by(100) {
            if !(5000..6500).contains(&t) {
                h.ops.push(send("a", t, 1, Outcome::Ok));
            }
        }
        h.ops.push(send("a", 5000, 1500, Outcome::Ok));
        // Stream b: a 3 s gap long before the fault does not count.
        h.ops.push(send("b", 0, 1, Outcome::Ok));
        h.ops.push(send("b", 3000, 1, Outcome::Ok));
        h.ops.push(send("b", 4000, 2000, Outcome::Unknown));
        h.faults.push(FaultWindow {
            fault: "kill-leader (broker 1)".into(),
            start_ms: 5000,
            end_ms: 8000,
            recovery: None,
            metadata_write_ms: None,
        });
        // A second fault soon after: the 2 s stall of stream c is its own, not the first's.
        h.ops.push(send("c", 17_900, 1, Outcome::Ok));
        h.ops.push(send("c", 19_900, 1, Outcome::Ok));
        h.faults.push(FaultWindow {
            fault: "pause-leader (broker 2)".into(),
            start_ms: 18_500,
            end_ms: 19_000,
            recovery: None,
            metadata_write_ms: None,
        });
        let [i, second] = &impact(&h)[..] else { panic!("two faults, two impacts") };
        assert_eq!((second.longest_stall_ms, second.stalled_stream.as_str()), (2000, "c"));
        assert_eq!((i.longest_stall_ms, i.stalled_stream.as_str()), (1599, "a"), "acks at 4901 and then 6500");
        assert_eq!((i.slowest_send_ms, i.unknown, i.failed), (1500, 0, 0));
        assert_eq!((i.p50_send_ms, i.p99_send_ms), (1, 1500));
        assert_eq!(baseline(&h), (1, 1), "the quiet sends, before 5 s and after 18 s");
    }

    /// Per region: the longest gaps between its producers' acknowledgements, its consumers'
    /// fetches and its group members' commits around a fault; other regions' do not count.
    #[test]
    fn each_region_gets_its_own_stall_read_gap_and_commit_gap() {
        let op = |kind, process: &str, start_ms| Op {
            kind,
            process: process.into(),
            start_ms,
            latency_ms: 0,
            outcome: Outcome::Ok,
        };
        let mut h = History::default();
        for t in (0..20_000).step_by(500) {
            for (process, kind, hole) in [
                ("producer-0@r0", OpKind::Send, 6000..8000),
                ("consumer-0@r0", OpKind::Poll, 6000..9000),
                ("group-0@r0", OpKind::Commit, 6000..10_000),
                ("producer-1@r1", OpKind::Send, 0..0),
                ("consumer-1@r1", OpKind::Poll, 0..0),
                ("group-1@r1", OpKind::Commit, 5000..5500),
            ] {
                if !hole.contains(&t) {
                    h.ops.push(op(kind, process, t));
                }
            }
        }
        h.faults.push(FaultWindow {
            fault: "isolate-region r2".into(),
            start_ms: 6000,
            end_ms: 12_000,
            recovery: None,
            metadata_write_ms: None,
        });
        let [i] = &impact(&h)[..] else { panic!("one fault, one impact") };
        let r0 = &i.regions["r0"];
        assert_eq!((r0.longest_stall_ms, r0.longest_read_gap_ms, r0.longest_commit_gap_ms), (2500, 3500, 4500));
        let r1 = &i.regions["r1"];
        assert_eq!(
            (r1.longest_stall_ms, r1.longest_read_gap_ms, r1.longest_commit_gap_ms),
            (500, 500, 500),
            "r1's one long commit gap (4.5 s to 5.5 s) ended before the fault"
        );
    }
}
