//! What `__share_group_state` holds for one share-partition: its start offset and the
//! records in flight after it, in runs of equal state and delivery count (Kafka's
//! ShareSnapshotValue carries the same fields). The value is read from disk and from peers,
//! so decoding checks every bound and never panics.
//!
//! ```text
//! value v0   version i16 = 0, state_epoch i32, start i64,
//!            batches [first i64, last i64, delivery_count i16, state i8]   (count i32 first)
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Offsets a snapshot may describe in all: far above any `partition.max.record.locks`, low
/// enough that restoring one cannot run away.
pub const MAX_SNAPSHOT_OFFSETS: i64 = 1 << 20;

/// A record's state, with Kafka's codes (as `kafka-share-groups.sh` and the state topic use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

impl RecordState {
    pub fn code(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<RecordState> {
        Some(match code {
            0 => RecordState::Available,
            1 => RecordState::Acquired,
            2 => RecordState::Acknowledged,
            4 => RecordState::Archived,
            _ => return None,
        })
    }

    pub(crate) fn done(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("malformed share-partition state: {0}")]
pub struct SnapshotError(&'static str);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateBatch {
    pub first: i64,
    pub last: i64,
    pub delivery_count: i16,
    pub state: RecordState,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub state_epoch: i32,
    pub start: i64,
    pub batches: Vec<StateBatch>,
}

const BATCH_BYTES: usize = 8 + 8 + 2 + 1;

impl Snapshot {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(18 + self.batches.len() * BATCH_BYTES);
        b.put_i16(0);
        b.put_i32(self.state_epoch);
        b.put_i64(self.start);
        b.put_i32(self.batches.len() as i32);
        for s in &self.batches {
            b.put_i64(s.first);
            b.put_i64(s.last);
            b.put_i16(s.delivery_count);
            b.put_i8(s.state.code());
        }
        b.freeze()
    }

    pub fn decode(mut b: &[u8]) -> Result<Snapshot, SnapshotError> {
        if b.remaining() < 18 {
            return Err(SnapshotError("too short"));
        }
        if b.get_i16() != 0 {
            return Err(SnapshotError("unknown version"));
        }
        let state_epoch = b.get_i32();
        let start = b.get_i64();
        let count = b.get_i32();
        if count < 0 || count as usize * BATCH_BYTES != b.remaining() {
            return Err(SnapshotError("batch count does not match the length"));
        }
        let mut batches = Vec::with_capacity(count as usize);
        let (mut next, mut offsets) = (start, 0i64);
        for _ in 0..count {
            let first = b.get_i64();
            let last = b.get_i64();
            let delivery_count = b.get_i16();
            let state = RecordState::from_code(b.get_i8()).ok_or(SnapshotError("unknown record state"))?;
            if first < next || last < first || delivery_count < 0 {
                return Err(SnapshotError("batches out of order"));
            }
            offsets = offsets.saturating_add(last.saturating_sub(first).saturating_add(1));
            if offsets > MAX_SNAPSHOT_OFFSETS {
                return Err(SnapshotError("too many offsets in flight"));
            }
            next = last.saturating_add(1);
            batches.push(StateBatch { first, last, delivery_count, state });
        }
        Ok(Snapshot { state_epoch, start, batches })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_truncation_is_refused() {
        let s = Snapshot {
            state_epoch: 2,
            start: 7,
            batches: vec![
                StateBatch { first: 7, last: 9, delivery_count: 1, state: RecordState::Available },
                StateBatch { first: 11, last: 11, delivery_count: 2, state: RecordState::Acknowledged },
            ],
        };
        let bytes = s.encode();
        assert_eq!(Snapshot::decode(&bytes), Ok(s));
        for n in 0..bytes.len() {
            assert!(Snapshot::decode(&bytes[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn overlapping_huge_or_unknown_batches_are_refused() {
        let batch = |first, last, state| StateBatch { first, last, delivery_count: 1, state };
        let bad = [
            vec![batch(5, 9, RecordState::Available), batch(9, 9, RecordState::Available)],
            vec![batch(0, i64::MAX, RecordState::Available)],
            vec![batch(3, 2, RecordState::Available)],
        ];
        for batches in bad {
            let s = Snapshot { state_epoch: 0, start: 0, batches };
            assert!(Snapshot::decode(&s.encode()).is_err());
        }
        let mut raw =
            Snapshot { state_epoch: 0, start: 0, batches: vec![batch(0, 0, RecordState::Archived)] }.encode().to_vec();
        *raw.last_mut().unwrap() = 3;
        assert!(Snapshot::decode(&raw).is_err());
    }
}
