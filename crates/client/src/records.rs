//! Reading records out of a partition's fetched data, and the value convention the tools
//! share: a value's first eight bytes identify or time-stamp it.

use std::collections::HashSet;

use anyhow::Result;
use runnel_wire::marker::txn_end;
use runnel_wire::records::records_of;
use runnel_wire::{Batches, TxnEnd};

/// The first eight bytes of a value as a big-endian u64: the producer's stamp (for
/// `runnel bench`) or the value's identity (for `runnel verify`).
pub fn value_stamp(value: &[u8]) -> Option<u64> {
    value.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
}

/// Calls `f(offset, value)` for every record at or after `from` in one partition's fetched
/// data (whole batches only; a batch cut at the size limit ends it). Returns the offset
/// after the last batch past `from`.
pub fn for_each_record(data: &[u8], from: i64, f: impl FnMut(i64, &[u8])) -> Result<Option<i64>> {
    for_each_committed_record(data, from, &[], f)
}

/// [`for_each_record`] as a `read_committed` consumer reads: `aborted` is the fetch
/// response's aborted transactions (producer id, first offset), and a transactional batch
/// of a producer whose aborted transaction it falls in is skipped, up to that producer's
/// abort marker (as Kafka's clients do).
pub fn for_each_committed_record(
    data: &[u8],
    from: i64,
    aborted: &[(i64, i64)],
    mut f: impl FnMut(i64, &[u8]),
) -> Result<Option<i64>> {
    let mut pending: Vec<(i64, i64)> = aborted.to_vec();
    pending.sort_by_key(|(_, first)| std::cmp::Reverse(*first));
    let mut skipping: HashSet<i64> = HashSet::new();
    let mut next = None;
    for item in Batches::new(data) {
        let Ok((h, range)) = item else { break };
        while pending.last().is_some_and(|(_, first)| *first <= h.last_offset()) {
            let (pid, _) = pending.pop().expect("checked above");
            skipping.insert(pid);
        }
        if h.next_offset() <= from {
            continue;
        }
        if h.is_control() {
            // Transaction markers and Raft's own entries: no records, but they take offsets.
            if txn_end(&h, &data[range]) == Some(TxnEnd::Abort) {
                skipping.remove(&h.producer_id);
            }
            next = Some(h.next_offset());
            continue;
        }
        if h.is_transactional() && skipping.contains(&h.producer_id) {
            next = Some(h.next_offset());
            continue;
        }
        let records = records_of(&h, &data[range]).map_err(|e| anyhow::anyhow!("{e}"))?;
        for r in records.iter().filter(|r| r.offset >= from) {
            f(r.offset, r.value.unwrap_or_default());
        }
        next = Some(h.next_offset());
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use runnel_wire::batch::stamp;
    use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
    use runnel_wire::TxnEnd;

    use super::*;

    fn batch(base_offset: i64, values: &[u64]) -> Vec<u8> {
        let mut b = BatchBuilder::new(0);
        for v in values {
            b.push(0, None, Some(&v.to_be_bytes()));
        }
        let mut raw = b.finish(CODEC_NONE, ProducerFields::NONE).expect("an uncompressed batch encodes");
        stamp(&mut raw, base_offset, 0);
        raw
    }

    /// A fetch may start inside a batch and end with a batch cut at the size limit: the
    /// records before `from` and the cut batch are skipped, and reading resumes after the
    /// last whole batch.
    #[test]
    fn records_from_an_offset_inside_a_batch_up_to_a_cut_batch() {
        let mut data = batch(0, &[10, 11, 12]);
        data.extend(batch(3, &[13, 14]));
        let cut = batch(5, &[15]);
        data.extend(&cut[..cut.len() - 1]);
        let mut seen = Vec::new();
        let next = for_each_record(&data, 1, |offset, v| seen.push((offset, value_stamp(v)))).expect("whole batches");
        assert_eq!(seen, [(1, Some(11)), (2, Some(12)), (3, Some(13)), (4, Some(14))]);
        assert_eq!(next, Some(5));
        assert_eq!(for_each_record(&data, 5, |_, _| panic!("nothing past 5")).expect("nothing read"), None);
    }

    /// read_committed: the batches of an aborted transaction are skipped up to its marker;
    /// the same producer's later transaction and other producers' batches are read.
    #[test]
    fn aborted_transactions_are_skipped_up_to_their_marker() {
        let txn = |base: i64, pid: i64, v: u64| {
            let mut b = BatchBuilder::new(0);
            b.push(0, None, Some(&v.to_be_bytes()));
            let fields = ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: 0 };
            let mut raw = b.finish_transactional(CODEC_NONE, fields).expect("encodes");
            stamp(&mut raw, base, 0);
            raw
        };
        let marker = |base: i64, pid: i64, end| {
            let mut raw = runnel_wire::marker::marker_batch(pid, 0, 0, end, 0);
            stamp(&mut raw, base, 0);
            raw
        };
        let mut data = txn(0, 1, 100); // producer 1, aborted
        data.extend(txn(1, 2, 200)); // producer 2, committed
        data.extend(marker(2, 1, TxnEnd::Abort));
        data.extend(marker(3, 2, TxnEnd::Commit));
        data.extend(txn(4, 1, 101)); // producer 1's next transaction
        let mut seen = Vec::new();
        let next = for_each_committed_record(&data, 0, &[(1, 0)], |o, v| seen.push((o, value_stamp(v))));
        assert_eq!(next.expect("read"), Some(5));
        assert_eq!(seen, [(1, Some(200)), (4, Some(101))]);
        // Starting past the aborted transaction's first offset still skips the rest of it.
        let mut seen = Vec::new();
        for_each_committed_record(&data[..], 1, &[(1, 0)], |o, v| seen.push((o, value_stamp(v)))).expect("read");
        assert_eq!(seen, [(1, Some(200)), (4, Some(101))]);
    }

    #[test]
    fn a_value_shorter_than_eight_bytes_has_no_stamp() {
        assert_eq!(value_stamp(&[1, 2, 3]), None);
        assert_eq!(value_stamp(&7u64.to_be_bytes()), Some(7));
    }
}
