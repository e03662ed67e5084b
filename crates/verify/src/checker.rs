//! The anomaly checks. Each finding names the values and offsets involved, so a failure
//! can be traced back to the history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::history::{copied, CopierRecord, History, Outcome, Send};
use crate::impact::{baseline, impact, FaultImpact};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Anomaly {
    /// Acknowledged, and never read by a final reader.
    LostWrite { value: u64, partition: i32, acked_offset: i64 },
    /// One value read at two different places.
    Duplicate { value: u64, at: Vec<(i32, i64)> },
    /// Two different values read at one offset.
    InconsistentOffset { partition: i32, offset: i64, values: Vec<u64> },
    /// The value read at an acknowledged offset is not the one acknowledged there.
    AckMismatch { value: u64, partition: i32, acked_offset: i64, read: Option<u64> },
    /// A value whose send failed was read (in the transactional workload: a value of a
    /// transaction that never committed, Jepsen's G1a aborted read).
    FailedWriteRead { value: u64, partition: i32, offset: i64 },
    /// Some but not all of a transaction's values are in the log (the final read).
    TxnPartial { producer: usize, values: Vec<u64>, present: usize },
    /// A value never sent was read.
    PhantomRead { value: u64, partition: i32, offset: i64 },
    /// A producer's acknowledged offsets in a partition went backwards.
    NonMonotonicSend { producer: usize, partition: i32, value: u64, offset: i64, previous: i64 },
    /// A consumer's reads of a partition went backwards.
    NonMonotonicPoll { consumer: usize, partition: i32, offset: i64, previous: i64 },
    /// A consumer's reads of a partition jumped over offsets that hold records.
    SkippedOffsets { consumer: usize, partition: i32, from: i64, to: i64, skipped: usize },
    /// A consumer group as a whole never delivered records below offsets it did deliver:
    /// a member started past what the group had read (a commit ahead of the reads, or a
    /// committed offset gone back to an older value and then forward).
    GroupSkipped { group: String, partition: i32, first_skipped: i64, skipped: usize, read_up_to: i64 },
    /// Consume-transform-produce (the copier): a value below the offsets its group
    /// committed has no copy in the log.
    CopyLost { value: u64, partition: i32, offset: i64 },
    /// A value has more than one copy in the log (processed twice).
    CopyDuplicated { value: u64, copies: Vec<u64> },
    /// A copy is in the log but the value it copies is not below the committed offsets (its
    /// output committed without its input's offset, or a copy of nothing).
    CopyUncommitted { copy: u64, value: u64 },
}

impl Anomaly {
    pub fn kind(&self) -> &'static str {
        match self {
            Anomaly::LostWrite { .. } => "lost-write",
            Anomaly::Duplicate { .. } => "duplicate",
            Anomaly::InconsistentOffset { .. } => "inconsistent-offset",
            Anomaly::AckMismatch { .. } => "ack-mismatch",
            Anomaly::FailedWriteRead { .. } => "failed-write-read",
            Anomaly::TxnPartial { .. } => "partial-transaction",
            Anomaly::PhantomRead { .. } => "phantom-read",
            Anomaly::NonMonotonicSend { .. } => "non-monotonic-send",
            Anomaly::NonMonotonicPoll { .. } => "non-monotonic-poll",
            Anomaly::SkippedOffsets { .. } => "skipped-offsets",
            Anomaly::GroupSkipped { .. } => "group-skipped",
            Anomaly::CopyLost { .. } => "copy-lost",
            Anomaly::CopyDuplicated { .. } => "copy-duplicated",
            Anomaly::CopyUncommitted { .. } => "copy-uncommitted",
        }
    }
}

/// Examples kept per kind of anomaly.
const EXAMPLES_MAX: usize = 10;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub sends_ok: usize,
    pub sends_failed: usize,
    pub sends_unknown: usize,
    /// Unknown sends that turned out to be in the log.
    pub unknown_present: usize,
    pub records_read: usize,
    /// Acknowledged values no consumer read while the workload ran (the final read is
    /// what decides whether they were lost; these are only late).
    pub unseen: usize,
    /// Count per kind of anomaly.
    pub counts: BTreeMap<&'static str, usize>,
    /// The first few of each kind.
    pub examples: BTreeMap<&'static str, Vec<Anomaly>>,
    /// What each injected fault cost the clients (not judged: figures for people).
    pub faults: Vec<FaultImpact>,
    /// Median and 99th percentile send latency away from any fault, in ms.
    pub baseline_send_ms: (u64, u64),
    /// The transactional workload's transactions: committed, never committed, unknown.
    pub txns: (usize, usize, usize),
    /// Values below the copier group's committed offsets (each must have one copy).
    pub copied: usize,
}

impl Report {
    pub fn valid(&self) -> bool {
        self.counts.values().all(|n| *n == 0)
    }

    fn add(&mut self, a: Anomaly) {
        let kind = a.kind();
        *self.counts.entry(kind).or_default() += 1;
        let ex = self.examples.entry(kind).or_default();
        if ex.len() < EXAMPLES_MAX {
            ex.push(a);
        }
    }
}

pub fn check(h: &History) -> Report {
    let mut r = Report { faults: impact(h), baseline_send_ms: baseline(h), ..Report::default() };
    let sent: HashMap<u64, &Send> = h.sends.iter().map(|s| (s.value, s)).collect();
    for s in &h.sends {
        match s.outcome {
            Outcome::Ok => r.sends_ok += 1,
            Outcome::Failed => r.sends_failed += 1,
            Outcome::Unknown => r.sends_unknown += 1,
        }
    }

    // Where each value was read, and what each offset holds, over all consumers.
    let mut places: HashMap<u64, BTreeSet<(i32, i64)>> = HashMap::new();
    let mut at: BTreeMap<(i32, i64), BTreeSet<u64>> = BTreeMap::new();
    let mut final_seen: BTreeSet<u64> = BTreeSet::new();
    for p in &h.polls {
        for &(partition, offset, value) in &p.records {
            r.records_read += 1;
            places.entry(value).or_default().insert((partition, offset));
            at.entry((partition, offset)).or_default().insert(value);
            if h.final_readers.contains(&p.consumer) {
                final_seen.insert(value);
            }
        }
    }
    for (&(partition, offset), values) in &at {
        if values.len() > 1 {
            r.add(Anomaly::InconsistentOffset { partition, offset, values: values.iter().copied().collect() });
        }
    }
    let mut dupes: Vec<(&u64, &BTreeSet<(i32, i64)>)> = places.iter().filter(|(_, p)| p.len() > 1).collect();
    dupes.sort();
    for (value, p) in dupes {
        r.add(Anomaly::Duplicate { value: *value, at: p.iter().copied().collect() });
    }
    let mut read_values: Vec<(&u64, &BTreeSet<(i32, i64)>)> = places.iter().collect();
    read_values.sort();
    for (value, p) in read_values {
        let (partition, offset) = *p.iter().next().expect("a read value has a place");
        match sent.get(value) {
            None => r.add(Anomaly::PhantomRead { value: *value, partition, offset }),
            Some(s) if s.outcome == Outcome::Failed => {
                r.add(Anomaly::FailedWriteRead { value: *value, partition, offset })
            }
            Some(s) if s.outcome == Outcome::Unknown => r.unknown_present += 1,
            Some(_) => {}
        }
    }

    // Acknowledged sends: present where acknowledged, and read by the final readers.
    for s in h.sends.iter().filter(|s| s.outcome == Outcome::Ok) {
        let Some(acked) = s.offset else { continue };
        let read = at.get(&(s.partition, acked));
        if let Some(values) = read {
            if !values.contains(&s.value) {
                r.add(Anomaly::AckMismatch {
                    value: s.value,
                    partition: s.partition,
                    acked_offset: acked,
                    read: values.iter().next().copied(),
                });
            }
        }
        if !h.final_readers.is_empty() && !final_seen.contains(&s.value) {
            r.add(Anomaly::LostWrite { value: s.value, partition: s.partition, acked_offset: acked });
        }
    }

    if let (Some(copier), false) = (&h.copier, h.final_readers.is_empty()) {
        check_copies(h, copier, &mut r);
    }

    // Transactions are all or nothing.
    for t in &h.txns {
        match t.outcome {
            Outcome::Ok => r.txns.0 += 1,
            Outcome::Failed => r.txns.1 += 1,
            Outcome::Unknown => r.txns.2 += 1,
        }
        let present = t.values.iter().filter(|v| final_seen.contains(v)).count();
        if !h.final_readers.is_empty() && present != 0 && present != t.values.len() {
            r.add(Anomaly::TxnPartial { producer: t.producer, values: t.values.clone(), present });
        }
    }

    let live_seen: HashMap<u64, ()> = h
        .polls
        .iter()
        .filter(|p| !h.final_readers.contains(&p.consumer))
        .flat_map(|p| p.records.iter().map(|r| (r.2, ())))
        .collect();
    r.unseen = h.sends.iter().filter(|s| s.outcome == Outcome::Ok && !live_seen.contains_key(&s.value)).count();

    // Per producer and partition, acknowledged offsets grow in send order.
    let mut last_ack: HashMap<(usize, i32), i64> = HashMap::new();
    for s in h.sends.iter().filter(|s| s.outcome == Outcome::Ok) {
        let Some(offset) = s.offset else { continue };
        if let Some(&previous) = last_ack.get(&(s.producer, s.partition)) {
            if offset <= previous {
                r.add(Anomaly::NonMonotonicSend {
                    producer: s.producer,
                    partition: s.partition,
                    value: s.value,
                    offset,
                    previous,
                });
            }
        }
        last_ack.insert((s.producer, s.partition), offset);
    }

    // Per consumer and partition, reads go forward without jumping over records.
    let occupied: BTreeMap<i32, BTreeSet<i64>> = at.keys().fold(BTreeMap::new(), |mut m, &(p, o)| {
        m.entry(p).or_insert_with(BTreeSet::new).insert(o);
        m
    });
    let mut last_read: HashMap<(usize, i32), i64> = HashMap::new();
    for p in &h.polls {
        for &(partition, offset, _) in &p.records {
            if let Some(&previous) = last_read.get(&(p.consumer, partition)) {
                if offset <= previous {
                    r.add(Anomaly::NonMonotonicPoll { consumer: p.consumer, partition, offset, previous });
                } else if let Some(offsets) = occupied.get(&partition) {
                    let skipped = offsets.range(previous + 1..offset).count();
                    if skipped > 0 {
                        r.add(Anomaly::SkippedOffsets {
                            consumer: p.consumer,
                            partition,
                            from: previous,
                            to: offset,
                            skipped,
                        });
                    }
                }
            }
            last_read.insert((p.consumer, partition), offset);
        }
    }

    // A group delivers every record below the highest offset it delivered.
    for (group, members) in &h.groups {
        let mut read: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
        for p in h.polls.iter().filter(|p| members.contains(&p.consumer)) {
            for &(partition, offset, _) in &p.records {
                read.entry(partition).or_default().insert(offset);
            }
        }
        for (partition, offsets) in read {
            let Some(&top) = offsets.last() else { continue };
            let Some(all) = occupied.get(&partition) else { continue };
            let missing: Vec<i64> = all.range(..top).filter(|o| !offsets.contains(o)).copied().collect();
            if let Some(&first_skipped) = missing.first() {
                r.add(Anomaly::GroupSkipped {
                    group: group.clone(),
                    partition,
                    first_skipped,
                    skipped: missing.len(),
                    read_up_to: top,
                });
            }
        }
    }
    r
}

/// Exactly once through consume-transform-produce: in the final read, every value below
/// the copier group's committed offsets has exactly one copy, and every copy is of such a
/// value (an offset commit and the output it covers are one transaction).
fn check_copies(h: &History, copier: &CopierRecord, r: &mut Report) {
    let finals = h.polls.iter().filter(|p| h.final_readers.contains(&p.consumer));
    let mut below: BTreeMap<u64, (i32, i64)> = BTreeMap::new();
    let mut copies: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for &(partition, offset, value) in finals.flat_map(|p| &p.records) {
        match copied(value) {
            Some(original) => copies.entry(original).or_default().push(value),
            None if offset < copier.committed.get(&partition).copied().unwrap_or(0) => {
                below.insert(value, (partition, offset));
            }
            None => {}
        }
    }
    r.copied = below.len();
    for (&value, &(partition, offset)) in &below {
        match copies.get(&value).map_or(0, Vec::len) {
            0 => r.add(Anomaly::CopyLost { value, partition, offset }),
            1 => {}
            _ => r.add(Anomaly::CopyDuplicated { value, copies: copies[&value].clone() }),
        }
    }
    for (value, list) in copies.iter().filter(|(v, _)| !below.contains_key(v)) {
        for &copy in list {
            r.add(Anomaly::CopyUncommitted { copy, value: *value });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Poll;

    fn ok(producer: usize, partition: i32, value: u64, offset: i64) -> Send {
        Send { producer, partition, value, outcome: Outcome::Ok, offset: Some(offset) }
    }

    /// Two producers, two partitions, values 0..20 at offsets 0..10 per partition, read back
    /// fully by consumer 9 (the final reader) and partly by consumer 1.
    fn clean() -> History {
        let mut sends = Vec::new();
        let mut all = Vec::new();
        for v in 0..20u64 {
            let partition = (v % 2) as i32;
            let offset = (v / 2) as i64;
            sends.push(ok((v % 2) as usize, partition, v, offset));
            all.push((partition, offset, v));
        }
        let partial: Vec<_> = all.iter().copied().filter(|(p, o, _)| *p == 0 && *o < 5).collect();
        History {
            sends,
            polls: vec![Poll { consumer: 1, records: partial }, Poll { consumer: 9, records: all }],
            final_readers: [9].into_iter().collect(),
            ..History::default()
        }
    }

    #[test]
    fn a_clean_history_is_valid() {
        let r = check(&clean());
        assert!(r.valid(), "{r:?}");
        assert_eq!((r.sends_ok, r.records_read), (20, 25));
    }

    #[test]
    fn a_planted_loss_is_found() {
        let mut h = clean();
        h.polls[1].records.retain(|(_, _, v)| *v != 7);
        let r = check(&h);
        assert_eq!(r.counts.get("lost-write"), Some(&1));
        assert_eq!(r.examples["lost-write"][0], Anomaly::LostWrite { value: 7, partition: 1, acked_offset: 3 });
        // The final reader now jumps from offset 2 to 4 in partition 1... but nobody saw 3,
        // so it is a loss, not a skip.
        assert_eq!(r.counts.get("skipped-offsets"), None);
    }

    #[test]
    fn a_planted_duplicate_and_an_inconsistent_offset_are_found() {
        let mut h = clean();
        // Value 4 (partition 0, offset 2) appears again at offset 10.
        h.polls[1].records.push((0, 10, 4));
        // Consumer 1 saw value 99 where the final reader saw value 2 (partition 0 offset 1).
        h.polls[0].records[1] = (0, 1, 99);
        let r = check(&h);
        assert_eq!(r.counts.get("duplicate"), Some(&1));
        assert_eq!(r.counts.get("inconsistent-offset"), Some(&1));
        assert_eq!(r.counts.get("phantom-read"), Some(&1));
        assert!(!r.valid());
    }

    #[test]
    fn failed_and_unknown_sends_are_judged_by_what_was_read() {
        let mut h = clean();
        h.sends.push(Send { producer: 0, partition: 0, value: 100, outcome: Outcome::Unknown, offset: None });
        h.sends.push(Send { producer: 0, partition: 0, value: 101, outcome: Outcome::Unknown, offset: None });
        h.sends.push(Send { producer: 0, partition: 0, value: 102, outcome: Outcome::Failed, offset: None });
        h.polls[1].records.push((0, 10, 100));
        let r = check(&h);
        assert!(r.valid(), "an unknown send may or may not land: {r:?}");
        assert_eq!(r.unknown_present, 1);
        h.polls[1].records.push((0, 11, 102));
        let r = check(&h);
        assert_eq!(r.counts.get("failed-write-read"), Some(&1));
    }

    #[test]
    fn a_group_that_skips_records_is_found() {
        let mut h = clean();
        // Group consumers 20 (first assignment) and 21 (second) read partition 1: 20 reads
        // offsets 0..3, 21 starts at 5, so offsets 3 and 4 were never delivered to the group.
        let p1: Vec<_> = h.polls[1].records.iter().copied().filter(|r| r.0 == 1).collect();
        h.polls.push(Poll { consumer: 20, records: p1[..3].to_vec() });
        h.polls.push(Poll { consumer: 21, records: p1[5..].to_vec() });
        h.groups.insert("g".into(), [20, 21].into_iter().collect());
        let r = check(&h);
        assert_eq!(r.counts.get("group-skipped"), Some(&1), "{r:?}");
        assert_eq!(
            r.examples["group-skipped"][0],
            Anomaly::GroupSkipped { group: "g".into(), partition: 1, first_skipped: 3, skipped: 2, read_up_to: 9 }
        );
        // The same reads with 21 starting at 3 (overlapping is fine: at least once).
        h.polls.last_mut().expect("pushed above").records = p1[2..].to_vec();
        assert!(check(&h).valid());
    }

    #[test]
    fn order_anomalies_are_found() {
        let mut h = clean();
        // Producer 0's ack for value 4 goes backwards.
        h.sends[4].offset = Some(0);
        // Consumer 1 reads partition 0 offsets 0,1,2,3,4 then 1 again, then 4 -> 8 (skips 5..7).
        h.polls.push(Poll { consumer: 1, records: vec![(0, 1, 2), (0, 8, 16)] });
        let r = check(&h);
        assert_eq!(r.counts.get("non-monotonic-send"), Some(&1));
        assert_eq!(r.counts.get("non-monotonic-poll"), Some(&1));
        assert_eq!(r.counts.get("skipped-offsets"), Some(&1));
        assert_eq!(r.counts.get("ack-mismatch"), Some(&1), "value 4 was acked at 0 where value 0 sits");
    }

    /// A transaction read in part, and a value of a never-committed one read, are found.
    #[test]
    fn transactions_are_all_or_nothing_and_aborted_ones_never_read() {
        use crate::history::TxnRecord;
        let mut h = clean();
        // Values 0 and 1 form a committed transaction (both read); 2 and 3 one whose commit
        // went unanswered and 4, 5 one that never committed.
        h.txns = vec![
            TxnRecord { producer: 0, values: vec![0, 1], outcome: Outcome::Ok },
            TxnRecord { producer: 0, values: vec![2, 3], outcome: Outcome::Unknown },
        ];
        assert!(check(&h).valid(), "{:?}", check(&h));
        h.polls.iter_mut().for_each(|p| p.records.retain(|r| r.2 != 3));
        let r = check(&h);
        assert_eq!(r.counts.get("partial-transaction"), Some(&1), "{r:?}");
        assert_eq!(r.txns, (1, 0, 1));
    }

    /// A final read of partition 0 (offset, value) in which every value was sent and
    /// acknowledged there, and a copier whose group committed `committed`.
    fn copied_history(records: &[(i64, u64)], committed: i64) -> History {
        let records: Vec<(i32, i64, u64)> = records.iter().map(|&(o, v)| (0, o, v)).collect();
        History {
            sends: records.iter().map(|&(p, o, v)| ok(0, p, v, o)).collect(),
            polls: vec![Poll { consumer: 9, records }],
            final_readers: [9].into_iter().collect(),
            copier: Some(CopierRecord { group: "g".into(), committed: [(0, committed)].into_iter().collect() }),
            ..History::default()
        }
    }

    #[test]
    fn lost_duplicated_and_uncommitted_copies_are_found() {
        let copy = |v: u64, attempt: u64| crate::history::COPY_BIT | attempt << 48 | v;
        let base = [(0, 1), (1, 2), (2, copy(1, 1)), (3, copy(2, 1)), (4, 3)];
        assert!(check(&copied_history(&base, 2)).valid(), "values 1 and 2 copied once, 3 not yet");
        let r = check(&copied_history(&base, 5));
        assert_eq!(r.examples["copy-lost"], vec![Anomaly::CopyLost { value: 3, partition: 0, offset: 4 }]);
        let mut twice = base.to_vec();
        twice.push((5, copy(1, 2)));
        let r = check(&copied_history(&twice, 2));
        assert_eq!(
            r.examples["copy-duplicated"],
            vec![Anomaly::CopyDuplicated { value: 1, copies: vec![copy(1, 1), copy(1, 2)] }]
        );
        let r = check(&copied_history(&base, 1));
        assert_eq!(r.examples["copy-uncommitted"], vec![Anomaly::CopyUncommitted { copy: copy(2, 1), value: 2 }]);
        assert_eq!(r.counts.len(), 1, "{:?}", r.counts);
    }
}
