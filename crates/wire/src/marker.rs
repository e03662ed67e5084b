//! Transaction markers: the control batch that ends a transaction on each partition it
//! wrote to. As Kafka writes them: attributes transactional and control, the producer's id
//! and epoch, base sequence -1, and one record whose key is (version 0, type: 0 abort,
//! 1 commit) and whose value is (version 0, the coordinator epoch).

use crate::batch::{read_varint, BatchHeader, HEADER_BYTES};
use crate::build::{BatchBuilder, ProducerFields};

/// Control record type of an abort marker.
pub const CONTROL_ABORT: i16 = 0;
/// Control record type of a commit marker.
pub const CONTROL_COMMIT: i16 = 1;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnEnd {
    Commit,
    Abort,
}

/// The key and, if it has one, the value of a control batch's first record, or None when
/// `batch` is not an uncompressed control batch. Reads a few bytes; allocates nothing.
fn first_record<'a>(h: &BatchHeader, batch: &'a [u8]) -> Option<(&'a [u8], Option<&'a [u8]>)> {
    if !h.is_control() || h.compression() != 0 {
        return None;
    }
    let b = batch.get(HEADER_BYTES..)?;
    let mut at = read_varint(b)?.1 + 1; // record length, attributes
    for _ in 0..2 {
        at += read_varint(b.get(at..)?)?.1; // timestamp delta, offset delta
    }
    let (key_len, used) = read_varint(b.get(at..)?)?;
    at += used;
    let key = b.get(at..at.checked_add(usize::try_from(key_len).ok()?)?)?;
    at += key.len();
    let value = read_varint(b.get(at..)?).and_then(|(len, used)| {
        let from = at + used;
        b.get(from..from.checked_add(usize::try_from(len).ok()?)?)
    });
    Some((key, value))
}

/// The type in the key of a control batch's first record, or None when `batch` is not an
/// uncompressed control batch with such a key.
pub fn control_type(h: &BatchHeader, batch: &[u8]) -> Option<i16> {
    let (key, _) = first_record(h, batch)?;
    let key = key.get(..4)?;
    Some(i16::from_be_bytes([key[2], key[3]]))
}

/// What a transaction marker records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub end: TxnEnd,
    /// The epoch of the transaction coordinator that wrote it (-1 when its value cannot be
    /// read).
    pub coordinator_epoch: i32,
}

/// The marker `batch` is, or None when it is not one.
pub fn marker(h: &BatchHeader, batch: &[u8]) -> Option<Marker> {
    let end = txn_end(h, batch)?;
    let value = first_record(h, batch).and_then(|(_, v)| v).and_then(|v| v.get(2..6));
    let coordinator_epoch = value.map_or(-1, |v| i32::from_be_bytes([v[0], v[1], v[2], v[3]]));
    Some(Marker { end, coordinator_epoch })
}

/// The end a transaction marker records, or None when the batch is not a marker.
pub fn txn_end(h: &BatchHeader, batch: &[u8]) -> Option<TxnEnd> {
    if !h.is_transactional() {
        return None;
    }
    match control_type(h, batch)? {
        CONTROL_ABORT => Some(TxnEnd::Abort),
        CONTROL_COMMIT => Some(TxnEnd::Commit),
        _ => None,
    }
}

/// A marker batch (offsets not yet stamped) ending `producer_id`'s transaction.
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    end: TxnEnd,
    now_ms: i64,
) -> Vec<u8> {
    let kind = match end {
        TxnEnd::Abort => CONTROL_ABORT,
        TxnEnd::Commit => CONTROL_COMMIT,
    };
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let mut b = BatchBuilder::new(now_ms);
    b.push(now_ms, Some(&key), Some(&value));
    b.finish_marker(ProducerFields { producer_id, producer_epoch, base_sequence: -1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_other_batches_are_not_markers() {
        for end in [TxnEnd::Commit, TxnEnd::Abort] {
            let batch = marker_batch(42, 3, 7, end, 1_000);
            let h = BatchHeader::validate(&batch).expect("a valid batch");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.records_count), (42, 3, -1, 1));
            assert_eq!(txn_end(&h, &batch), Some(end));
            assert_eq!(marker(&h, &batch), Some(Marker { end, coordinator_epoch: 7 }));
        }
        let mut b = BatchBuilder::new(0);
        b.push(0, Some(b"k"), Some(b"v"));
        let data = b.finish(0, ProducerFields::NONE).expect("batch");
        let h = BatchHeader::parse(&data).expect("header");
        assert_eq!(txn_end(&h, &data), None);
        // A control batch that is not transactional (Runnel's own Raft entries) is no marker.
        let mut b = BatchBuilder::new(-1);
        b.push(-1, Some(&[0, 0, 0, 1]), Some(b""));
        let control = b.finish_control();
        let h = BatchHeader::parse(&control).expect("header");
        assert_eq!(control_type(&h, &control), Some(CONTROL_COMMIT));
        assert_eq!(txn_end(&h, &control), None);
        // A truncated body reads as no marker, never a panic.
        let cut = marker_batch(1, 0, 0, TxnEnd::Commit, 0);
        let h = BatchHeader::parse(&cut).expect("header");
        for len in 0..cut.len() {
            let _ = txn_end(&h, &cut[..len]);
            let _ = marker(&h, &cut[..len]);
        }
    }
}
