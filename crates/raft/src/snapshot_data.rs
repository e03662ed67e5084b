//! What a Raft snapshot of a partition carries: the offset after the snapshot point, the
//! log start, the producers that wrote only below the snapshot point (a magic word, a
//! length, `ProducerTable::encode_below`), then the batches kept below the snapshot point
//! (a compacted log's cleaned part). Older brokers sent the first offset alone, or no
//! producers; both still read. It arrives from a peer: every length is checked.

use std::io;

/// Marks the producers section of snapshot data. Snapshots from older brokers have batches
/// right after the log start, whose first four bytes (the high half of a base offset)
/// are never this.
const SNAPSHOT_PRODUCERS_MAGIC: u32 = 0x5250_5331;

/// (first offset, log start, producers, batches) of snapshot data.
pub(crate) fn decode(data: &[u8]) -> io::Result<(i64, i64, &[u8], &[u8])> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "snapshot data");
    let num = |at: usize| data.get(at..at + 8).and_then(|b| b.try_into().ok()).map(i64::from_be_bytes);
    let word = |at: usize| data.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
    match (num(0), num(8)) {
        (Some(first), _) if data.len() == 8 => Ok((first, first, &[], &[])),
        (Some(first), Some(start)) if word(16) == Some(SNAPSHOT_PRODUCERS_MAGIC) => {
            let len = word(20).ok_or_else(bad)? as usize;
            let producers = data.get(24..24 + len).ok_or_else(bad)?;
            Ok((first, start, producers, &data[24 + len..]))
        }
        (Some(first), Some(start)) => Ok((first, start, &[], &data[16..])),
        _ => Err(bad()),
    }
}

/// Snapshot data from its parts.
pub(crate) fn encode(first_offset: i64, log_start: i64, producers: &[u8], prefix: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(24 + producers.len() + prefix.len());
    data.extend_from_slice(&first_offset.to_be_bytes());
    data.extend_from_slice(&log_start.to_be_bytes());
    data.extend_from_slice(&SNAPSHOT_PRODUCERS_MAGIC.to_be_bytes());
    data.extend_from_slice(&(producers.len() as u32).to_be_bytes());
    data.extend_from_slice(producers);
    data.extend_from_slice(prefix);
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_data_carries_producers_and_older_forms_still_read() {
        let data = encode(10, 4, b"abc", b"BATCHES");
        let old = data[..16].to_vec();
        assert_eq!(decode(&data).expect("new"), (10, 4, &b"abc"[..], &b"BATCHES"[..]));
        assert_eq!(decode(&old).expect("older"), (10, 4, &[][..], &[][..]));
        assert_eq!(decode(&old[..8]).expect("oldest"), (10, 10, &[][..], &[][..]));
        for len in [20, 23, 26] {
            assert!(decode(&data[..len]).is_err(), "cut at {len}");
        }
    }
}
