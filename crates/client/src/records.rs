//! Reading records out of a partition's fetched data, and the value convention the tools
//! share: a value's first eight bytes identify or time-stamp it.

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use runnel_wire::Batches;

/// The first eight bytes of a value as a big-endian u64: the producer's stamp (for
/// `runnel bench`) or the value's identity (for `runnel verify`).
pub fn value_stamp(value: &[u8]) -> Option<u64> {
    value.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
}

/// Calls `f(offset, value)` for every record at or after `from` in one partition's fetched
/// data (whole batches only; a batch cut at the size limit ends it). Returns the offset
/// after the last batch past `from`.
pub fn for_each_record(data: &[u8], from: i64, mut f: impl FnMut(i64, &[u8])) -> Result<Option<i64>> {
    let mut next = None;
    for item in Batches::new(data) {
        let Ok((h, range)) = item else { break };
        if h.next_offset() <= from {
            continue;
        }
        if h.is_control() {
            // Transaction markers and Raft's own entries: no records, but they take offsets.
            next = Some(h.next_offset());
            continue;
        }
        let mut raw = Bytes::copy_from_slice(&data[range]);
        let set = RecordBatchDecoder::decode(&mut raw).map_err(|e| anyhow::anyhow!("{e}"))?;
        for r in set.records.iter().filter(|r| r.offset >= from) {
            f(r.offset, r.value.as_deref().unwrap_or_default());
        }
        next = Some(h.next_offset());
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use runnel_wire::batch::stamp;
    use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};

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

    #[test]
    fn a_value_shorter_than_eight_bytes_has_no_stamp() {
        assert_eq!(value_stamp(&[1, 2, 3]), None);
        assert_eq!(value_stamp(&7u64.to_be_bytes()), Some(7));
    }
}
