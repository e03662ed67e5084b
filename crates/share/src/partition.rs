//! One share-partition's records in flight (KIP-932): which are handed out, to whom, until
//! when, how often, and which are done. Pure state: the caller reads the log, keeps the
//! clock and persists [`SharePartition::snapshot`].
//!
//! ```text
//!            start (SPSO)                                end (SPEO)
//!   done ... | acked | acquired(m1) | available | gap | acquired(m2) | not handed out yet ...
//! ```
//! Offsets below `start` are done (acknowledged, rejected, or past the delivery limit).
//! Between `start` and `end`, `records` holds every offset handed out that is not done yet,
//! plus acknowledged ones behind an unfinished one; an offset missing there is a gap (a
//! control batch, or done). `start` moves up over done records as soon as they are first.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError as E;

use crate::snapshot::{RecordState, Snapshot, StateBatch};

/// An acknowledgement type, with its code in ShareFetch and ShareAcknowledge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// No record at this offset (a control record, or compacted away).
    Gap,
    Accept,
    /// Hand it out again (to anyone), unless it reached the delivery limit.
    Release,
    Reject,
}

impl Ack {
    pub fn from_code(code: i8) -> Option<Ack> {
        Some(match code {
            0 => Ack::Gap,
            1 => Ack::Accept,
            2 => Ack::Release,
            3 => Ack::Reject,
            _ => return None,
        })
    }
}

/// The group's limits (`group.share.*` settings or the group's own configs).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How long an acquired record stays with its member (`record.lock.duration.ms`).
    pub lock_ms: i64,
    /// Deliveries after which a released or expired record is archived.
    pub delivery_limit: i16,
    /// Records in flight at most (`partition.max.record.locks`).
    pub max_locks: usize,
}

/// A range of offsets handed to a member with the same delivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub delivery_count: i16,
}

#[derive(Clone, Debug)]
struct InFlight {
    state: RecordState,
    delivery_count: i16,
    /// The member holding it and until when (wall-clock ms), while acquired.
    owner: Option<(String, i64)>,
}

#[derive(Clone, Debug)]
pub struct SharePartition {
    start: i64,
    end: i64,
    records: BTreeMap<i64, InFlight>,
    state_epoch: i32,
}

impl SharePartition {
    /// A partition the group reads from `start` on, nothing handed out yet.
    pub fn new(start: i64, state_epoch: i32) -> SharePartition {
        SharePartition { start, end: start, records: BTreeMap::new(), state_epoch }
    }

    /// As persisted: what was acquired is available again (locks do not survive a move).
    pub fn from_snapshot(s: &Snapshot) -> SharePartition {
        let mut p = SharePartition::new(s.start, s.state_epoch);
        for b in &s.batches {
            let state = match b.state {
                RecordState::Acquired => RecordState::Available,
                other => other,
            };
            let first = b.first.max(s.start);
            for offset in first..=b.last {
                p.records.insert(offset, InFlight { state, delivery_count: b.delivery_count, owner: None });
            }
            p.end = p.end.max(b.last + 1);
        }
        p.advance_start();
        p
    }

    pub fn start(&self) -> i64 {
        self.start
    }

    pub fn end(&self) -> i64 {
        self.end
    }

    pub fn state_epoch(&self) -> i32 {
        self.state_epoch
    }

    /// Records in flight (handed out and not done, or done behind one that is not).
    pub fn in_flight(&self) -> usize {
        self.records.len()
    }

    /// Where the next read of the log should start: the first record available for
    /// redelivery, else the end of what was handed out.
    pub fn next_fetch_offset(&self) -> i64 {
        self.records.iter().find(|(_, r)| r.state == RecordState::Available).map(|(o, _)| *o).unwrap_or(self.end)
    }

    /// Whether anything could be handed out now if the log holds records up to `high`.
    pub fn has_available(&self, high: i64, limits: &Limits) -> bool {
        self.records.values().any(|r| r.state == RecordState::Available)
            || (self.end < high && self.records.len() < limits.max_locks)
    }

    /// Log records below `log_start` are gone (retention, DeleteRecords): they are done.
    pub fn truncate_to(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.records = self.records.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
        self.advance_start();
    }

    /// Hands `member` at most `max_records` records from `batches` (the batches of a read
    /// of the log, in order: base offset, last offset, whether a control batch): records
    /// available again first, then new ones after `end`, while fewer than `max_locks` are
    /// in flight. Control batches are gaps, never handed out.
    pub fn acquire(
        &mut self,
        member: &str,
        batches: &[(i64, i64, bool)],
        max_records: usize,
        now_ms: i64,
        limits: &Limits,
    ) -> Vec<Acquired> {
        let mut out: Vec<Acquired> = Vec::new();
        let mut taken = 0usize;
        let deadline = now_ms.saturating_add(limits.lock_ms);
        'batches: for &(base, last, control) in batches {
            if last < base {
                continue;
            }
            let mut offset = base.max(self.start);
            while offset <= last {
                if taken >= max_records {
                    break 'batches;
                }
                if offset < self.end {
                    if control {
                        offset = offset.max(self.end.min(last + 1));
                        continue;
                    }
                    if let Some(r) = self.records.get_mut(&offset) {
                        if r.state == RecordState::Available {
                            r.state = RecordState::Acquired;
                            r.delivery_count = r.delivery_count.saturating_add(1);
                            r.owner = Some((member.to_string(), deadline));
                            push(&mut out, offset, r.delivery_count);
                            taken += 1;
                        }
                    }
                    offset += 1;
                    continue;
                }
                // Past what was handed out: new records, unless too many are in flight.
                if control {
                    self.end = last + 1;
                    break;
                }
                if self.records.len() >= limits.max_locks {
                    break 'batches;
                }
                let r = InFlight {
                    state: RecordState::Acquired,
                    delivery_count: 1,
                    owner: Some((member.to_string(), deadline)),
                };
                self.records.insert(offset, r);
                self.end = offset + 1;
                push(&mut out, offset, 1);
                taken += 1;
                offset += 1;
            }
        }
        self.advance_start();
        out
    }

    /// Applies one member's acknowledgements: (first offset, last offset, one type for the
    /// range or one per offset). All or nothing: an offset not acquired by `member` (other
    /// than a gap) fails the lot with INVALID_RECORD_STATE, as in Kafka.
    pub fn acknowledge(&mut self, member: &str, batches: &[(i64, i64, Vec<i8>)], limits: &Limits) -> Result<(), E> {
        let mut plan: Vec<(i64, Ack)> = Vec::new();
        for (first, last, types) in batches {
            let (first, last) = (*first, *last);
            let span = last.checked_sub(first).filter(|s| *s >= 0).ok_or(E::InvalidRequest)?;
            if types.is_empty() || (types.len() != 1 && types.len() as i64 != span + 1) {
                return Err(E::InvalidRequest);
            }
            if span as usize >= limits.max_locks.max(1) * 2 + self.records.len() {
                // More offsets than could possibly be in flight.
                return Err(E::InvalidRecordState);
            }
            for (i, offset) in (first..=last).enumerate() {
                let code = if types.len() == 1 { types[0] } else { types[i] };
                let ack = Ack::from_code(code).ok_or(E::InvalidRequest)?;
                let held = self.records.get(&offset).is_some_and(|r| {
                    r.state == RecordState::Acquired && r.owner.as_ref().is_some_and(|(m, _)| m == member)
                });
                let gap_ok = ack == Ack::Gap && !self.records.contains_key(&offset) && offset < self.end;
                if !held && !gap_ok {
                    return Err(E::InvalidRecordState);
                }
                plan.push((offset, ack));
            }
        }
        for (offset, ack) in plan {
            let Some(r) = self.records.get_mut(&offset) else { continue };
            r.owner = None;
            r.state = match ack {
                Ack::Accept => RecordState::Acknowledged,
                Ack::Gap | Ack::Reject => RecordState::Archived,
                Ack::Release => released(r.delivery_count, limits),
            };
        }
        self.advance_start();
        Ok(())
    }

    /// Locks past their deadline end: those records are available again (or archived at
    /// the delivery limit). Returns how many.
    pub fn expire(&mut self, now_ms: i64, limits: &Limits) -> usize {
        let mut n = 0;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired && r.owner.as_ref().is_some_and(|(_, until)| *until <= now_ms) {
                r.owner = None;
                r.state = released(r.delivery_count, limits);
                n += 1;
            }
        }
        if n > 0 {
            self.advance_start();
        }
        n
    }

    /// A member left (or closed its share session): what it holds is released.
    pub fn release_member(&mut self, member: &str, limits: &Limits) -> usize {
        let mut n = 0;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired && r.owner.as_ref().is_some_and(|(m, _)| m == member) {
                r.owner = None;
                r.state = released(r.delivery_count, limits);
                n += 1;
            }
        }
        if n > 0 {
            self.advance_start();
        }
        n
    }

    /// The earliest lock deadline, to know when to look again.
    pub fn next_deadline(&self) -> Option<i64> {
        self.records.values().filter_map(|r| r.owner.as_ref().map(|(_, until)| *until)).min()
    }

    /// What must survive a leader change: the start, and each offset in flight with its
    /// state and delivery count, in runs.
    pub fn snapshot(&self) -> Snapshot {
        let mut batches: Vec<StateBatch> = Vec::new();
        for (&offset, r) in &self.records {
            let state = match r.state {
                RecordState::Acquired => RecordState::Available,
                s => s,
            };
            match batches.last_mut() {
                Some(b) if b.last + 1 == offset && b.state == state && b.delivery_count == r.delivery_count => {
                    b.last = offset
                }
                _ => batches.push(StateBatch { first: offset, last: offset, delivery_count: r.delivery_count, state }),
            }
        }
        Snapshot { state_epoch: self.state_epoch, start: self.start, batches }
    }

    /// Each offset's (state, delivery count), for tests and describe tools.
    pub fn state_of(&self, offset: i64) -> Option<(RecordState, i16)> {
        self.records.get(&offset).map(|r| (r.state, r.delivery_count))
    }

    fn advance_start(&mut self) {
        loop {
            let Some((&offset, r)) = self.records.first_key_value() else {
                self.start = self.start.max(self.end);
                return;
            };
            self.start = self.start.max(offset);
            if !r.state.done() {
                return;
            }
            self.records.remove(&offset);
            self.start = offset + 1;
        }
    }
}

fn released(delivery_count: i16, limits: &Limits) -> RecordState {
    if delivery_count >= limits.delivery_limit {
        RecordState::Archived
    } else {
        RecordState::Available
    }
}

fn push(out: &mut Vec<Acquired>, offset: i64, delivery_count: i16) {
    match out.last_mut() {
        Some(a) if a.last + 1 == offset && a.delivery_count == delivery_count => a.last = offset,
        _ => out.push(Acquired { first: offset, last: offset, delivery_count }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { lock_ms: 1000, delivery_limit: 3, max_locks: 100 };

    fn data(base: i64, last: i64) -> (i64, i64, bool) {
        (base, last, false)
    }

    #[test]
    fn hands_out_each_record_once_and_moves_the_start_over_accepted_ones() {
        let mut p = SharePartition::new(0, 0);
        let got = p.acquire("a", &[data(0, 4), (5, 5, true), data(6, 9)], 100, 0, &LIMITS);
        assert_eq!(
            got,
            vec![Acquired { first: 0, last: 4, delivery_count: 1 }, Acquired { first: 6, last: 9, delivery_count: 1 }]
        );
        assert_eq!(p.end(), 10);
        // Nothing left to hand out to another member.
        assert!(p.acquire("b", &[data(0, 4), data(6, 9)], 100, 0, &LIMITS).is_empty());
        p.acknowledge("a", &[(0, 4, vec![1]), (6, 9, vec![1])], &LIMITS).unwrap();
        assert_eq!(p.start(), 10);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn release_redelivers_with_a_higher_count_until_the_limit() {
        let mut p = SharePartition::new(0, 0);
        for round in 1..=3 {
            let got = p.acquire("a", &[data(0, 1)], 100, 0, &LIMITS);
            assert_eq!(got, vec![Acquired { first: 0, last: 1, delivery_count: round }]);
            p.acknowledge("a", &[(0, 1, vec![2])], &LIMITS).unwrap();
        }
        // The third release reached the limit: archived, and the start moved past them.
        assert!(p.acquire("a", &[data(0, 1)], 100, 0, &LIMITS).is_empty());
        assert_eq!(p.start(), 2);
    }

    #[test]
    fn reject_and_per_offset_types_and_start_stops_at_the_first_unfinished() {
        let mut p = SharePartition::new(10, 0);
        p.acquire("a", &[data(10, 13)], 100, 0, &LIMITS);
        p.acknowledge("a", &[(10, 13, vec![1, 2, 3, 1])], &LIMITS).unwrap();
        assert_eq!(p.start(), 11);
        assert_eq!(p.state_of(11), Some((RecordState::Available, 1)));
        assert_eq!(p.state_of(12), Some((RecordState::Archived, 1)));
        assert_eq!(p.state_of(13), Some((RecordState::Acknowledged, 1)));
        let again = p.acquire("b", &[data(10, 13)], 100, 0, &LIMITS);
        assert_eq!(again, vec![Acquired { first: 11, last: 11, delivery_count: 2 }]);
        p.acknowledge("b", &[(11, 11, vec![1])], &LIMITS).unwrap();
        assert_eq!(p.start(), 14);
    }

    #[test]
    fn only_the_holder_acknowledges_and_a_bad_batch_changes_nothing() {
        let mut p = SharePartition::new(0, 0);
        p.acquire("a", &[data(0, 2)], 100, 0, &LIMITS);
        assert_eq!(p.acknowledge("b", &[(0, 0, vec![1])], &LIMITS), Err(E::InvalidRecordState));
        assert_eq!(p.acknowledge("a", &[(0, 1, vec![1]), (5, 5, vec![1])], &LIMITS), Err(E::InvalidRecordState));
        assert_eq!(p.acknowledge("a", &[(0, 2, vec![1, 1])], &LIMITS), Err(E::InvalidRequest));
        assert_eq!(p.acknowledge("a", &[(2, 1, vec![1])], &LIMITS), Err(E::InvalidRequest));
        assert_eq!(p.acknowledge("a", &[(0, 0, vec![9])], &LIMITS), Err(E::InvalidRequest));
        assert_eq!(p.state_of(0), Some((RecordState::Acquired, 1)));
        p.acknowledge("a", &[(0, 2, vec![1])], &LIMITS).unwrap();
        assert_eq!(p.start(), 3);
    }

    #[test]
    fn locks_expire_and_members_leaving_release_what_they_hold() {
        let mut p = SharePartition::new(0, 0);
        p.acquire("a", &[data(0, 1)], 1, 0, &LIMITS);
        p.acquire("b", &[data(0, 1)], 1, 500, &LIMITS);
        assert_eq!(p.next_deadline(), Some(1000));
        assert_eq!(p.expire(999, &LIMITS), 0);
        assert_eq!(p.expire(1000, &LIMITS), 1);
        assert_eq!(p.state_of(0), Some((RecordState::Available, 1)));
        assert_eq!(p.release_member("b", &LIMITS), 1);
        let got = p.acquire("c", &[data(0, 1)], 100, 2000, &LIMITS);
        assert_eq!(got, vec![Acquired { first: 0, last: 1, delivery_count: 2 }]);
    }

    #[test]
    fn in_flight_records_are_bounded_and_max_records_is_honoured() {
        let limits = Limits { max_locks: 5, ..LIMITS };
        let mut p = SharePartition::new(0, 0);
        assert_eq!(p.acquire("a", &[data(0, 9)], 3, 0, &limits).len(), 1);
        assert_eq!(p.end(), 3);
        assert_eq!(
            p.acquire("a", &[data(3, 9)], 100, 0, &limits),
            vec![Acquired { first: 3, last: 4, delivery_count: 1 }]
        );
        assert!(!p.has_available(10, &limits));
        p.acknowledge("a", &[(0, 4, vec![1])], &limits).unwrap();
        assert!(p.has_available(10, &limits));
    }

    #[test]
    fn snapshot_round_trip_makes_acquired_records_available() {
        let mut p = SharePartition::new(0, 3);
        p.acquire("a", &[data(0, 5)], 100, 0, &LIMITS);
        p.acknowledge("a", &[(1, 2, vec![1]), (3, 3, vec![3])], &LIMITS).unwrap();
        let s = p.snapshot();
        let q = SharePartition::from_snapshot(&s);
        assert_eq!((q.start(), q.end(), q.state_epoch()), (0, 6, 3));
        assert_eq!(q.state_of(0), Some((RecordState::Available, 1)));
        assert_eq!(q.state_of(2), Some((RecordState::Acknowledged, 1)));
        assert_eq!(q.state_of(3), Some((RecordState::Archived, 1)));
        assert_eq!(q.next_fetch_offset(), 0);
    }

    #[test]
    fn truncation_drops_what_the_log_no_longer_has() {
        let mut p = SharePartition::new(0, 0);
        p.acquire("a", &[data(0, 5)], 100, 0, &LIMITS);
        p.truncate_to(4);
        assert_eq!((p.start(), p.in_flight()), (4, 2));
        p.truncate_to(20);
        assert_eq!((p.start(), p.end(), p.in_flight()), (20, 20, 0));
    }
}
