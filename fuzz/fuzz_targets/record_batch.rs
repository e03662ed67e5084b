//! A records blob (a produce request's partition data, a fetch response's, a slice of a
//! segment): the first byte holds flags (bit 0: recompute each batch's CRC, so mutations
//! get past it), the rest is the blob. Every parser of batches runs on it, as each caller
//! does: `runnel_wire` (`Batches`, `BatchHeader::validate`/`validate_for_append` as
//! handlers/produce.rs calls them), the compacted-topic key check and the cleaner's record
//! framing with bounded decompression of every codec (`runnel_storage::all_records_keyed`,
//! `records_of`, `runnel_wire::build::decompress`), the idempotent-producer table the log
//! keeps, `kafka-protocol`'s `RecordBatchDecoder` (ListOffsets by timestamp, the offsets
//! log, the client) and the client's `for_each_record` over fetched data.
#![no_main]

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use libfuzzer_sys::fuzz_target;
use runnel_storage::ProducerTable;
use runnel_wire::batch::HEADER_BYTES;
use runnel_wire::{BatchHeader, Batches};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, blob)) = data.split_first() else { return };
    let mut blob = blob.to_vec();
    if flags & 1 != 0 {
        runnel_fuzz::fix_crcs(&mut blob);
    }
    let blob = &blob[..];
    let mut producers = ProducerTable::default();
    let mut next_offset = 0i64;
    for item in Batches::new(blob) {
        let Ok((parsed, range)) = item else { break };
        let bytes = &blob[range.clone()];
        assert_eq!(bytes.len(), parsed.total_bytes());
        // What the produce handler checks, then what the log does with an accepted batch.
        if let Ok(h) = BatchHeader::validate_for_append(bytes) {
            assert_eq!(h, parsed);
            let _ = runnel_storage::all_records_keyed(&h, bytes);
            if let Ok(None) = producers.check(&h) {
                let stamped = BatchHeader { base_offset: next_offset, ..h };
                producers.record(&stamped, runnel_wire::marker::marker(&stamped, bytes));
                next_offset = stamped.next_offset();
            }
            let _ = producers.check_after(&h, &[h]);
            let _ = producers.first_unstable_offset(next_offset);
            let _ = producers.aborted_in(0, next_offset);
        }
        // What the cleaner, Raft's entries and the metadata log read from a stored batch.
        if let Ok(h) = BatchHeader::validate(bytes) {
            if let Ok(records) = runnel_storage::records_of(&h, bytes) {
                for r in records.iter() {
                    let _ = (r.offset, r.raw.len(), r.key.map(<[u8]>::len), r.value.map(<[u8]>::len));
                }
            }
            let _ = runnel_wire::build::decompress(
                h.compression(),
                &bytes[HEADER_BYTES..],
                runnel_wire::build::DECOMPRESSED_BYTES_MAX,
            );
        }
        let _ = RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(bytes));
    }
    let _ = runnel_client::for_each_record(blob, 0, |_, _| {});
});
