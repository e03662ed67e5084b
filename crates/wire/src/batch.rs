//! Kafka RecordBatch v2 ("magic 2") headers.
//!
//! Layout (big-endian), from the Kafka protocol guide:
//!
//! ```text
//!  0 baseOffset i64        8 batchLength i32     12 partitionLeaderEpoch i32
//! 16 magic i8             17 crc u32 (CRC-32C of bytes 21..end)
//! 21 attributes i16       23 lastOffsetDelta i32 27 baseTimestamp i64
//! 35 maxTimestamp i64     43 producerId i64      51 producerEpoch i16
//! 53 baseSequence i32     57 recordsCount i32    61 records...
//! ```
//!
//! The CRC does not cover baseOffset or partitionLeaderEpoch, which is why the log can
//! assign offsets and stamp the leader epoch without recomputing it.

use thiserror::Error;

pub const HEADER_BYTES: usize = 61;
/// baseOffset + batchLength: enough to find the next batch.
pub const LOG_OVERHEAD_BYTES: usize = 12;
pub const MAGIC_V2: i8 = 2;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("batch truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("batch length {0} is invalid")]
    BadLength(i32),
    #[error("unsupported magic {0}")]
    BadMagic(i8),
    #[error("crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
    #[error("inconsistent record count: recordsCount {count}, lastOffsetDelta {last_offset_delta}")]
    BadCount { count: i32, last_offset_delta: i32 },
    #[error("records section does not match recordsCount {count}: {detail}")]
    BadRecords { count: i32, detail: &'static str },
    #[error("unknown compression codec {0}")]
    BadCompression(i16),
}

/// The fixed-size header of one batch, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after the batchLength field; the whole batch is `batch_length + 12` bytes.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Decodes the header at the start of `b`. Checks only that the header is present and
    /// that the length field is sane; see [`BatchHeader::validate`] for the full check.
    pub fn parse(b: &[u8]) -> Result<BatchHeader, BatchError> {
        if b.len() < HEADER_BYTES {
            return Err(BatchError::Truncated { need: HEADER_BYTES, have: b.len() });
        }
        let batch_length = i32_at(b, 8);
        if batch_length < (HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32 {
            return Err(BatchError::BadLength(batch_length));
        }
        Ok(BatchHeader {
            base_offset: i64_at(b, 0),
            batch_length,
            partition_leader_epoch: i32_at(b, 12),
            magic: b[16] as i8,
            crc: i32_at(b, 17) as u32,
            attributes: i16_at(b, 21),
            last_offset_delta: i32_at(b, 23),
            base_timestamp: i64_at(b, 27),
            max_timestamp: i64_at(b, 35),
            producer_id: i64_at(b, 43),
            producer_epoch: i16_at(b, 51),
            base_sequence: i32_at(b, 53),
            records_count: i32_at(b, 57),
        })
    }

    /// Total size of the batch on the wire and on disk.
    pub fn total_bytes(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD_BYTES
    }

    /// The offset of the last record. Saturates: a header read off the wire or a disk may
    /// claim offsets past i64::MAX, and a caller must see them as large, not wrapped around.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(self.last_offset_delta as i64)
    }

    /// Offset one past this batch: where the next batch starts (saturating, as above).
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_TIMESTAMP_TYPE != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Sequence number of the last record, wrapping at i32::MAX as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }

    /// Full validation of one batch held entirely in `b` (exactly `total_bytes` long):
    /// magic, CRC-32C, count consistency and, for uncompressed batches, that the records
    /// section holds exactly `records_count` well-framed records.
    pub fn validate(b: &[u8]) -> Result<BatchHeader, BatchError> {
        let h = BatchHeader::parse(b)?;
        if h.magic != MAGIC_V2 {
            return Err(BatchError::BadMagic(h.magic));
        }
        if b.len() != h.total_bytes() {
            return Err(BatchError::Truncated { need: h.total_bytes(), have: b.len() });
        }
        let computed = crc32c(&b[21..]);
        if computed != h.crc {
            return Err(BatchError::BadCrc { stored: h.crc, computed });
        }
        if h.records_count < 0 || h.last_offset_delta < 0 {
            return Err(BatchError::BadCount { count: h.records_count, last_offset_delta: h.last_offset_delta });
        }
        if h.compression() > 4 {
            return Err(BatchError::BadCompression(h.compression()));
        }
        if h.compression() == 0 {
            check_uncompressed_records(&b[HEADER_BYTES..], h.records_count)?;
        }
        Ok(h)
    }

    /// Validation for batches that arrive in a produce request: on top of [`validate`],
    /// a producer's batch holds at least one record and its offset deltas run 0..count.
    ///
    /// [`validate`]: BatchHeader::validate
    pub fn validate_for_append(b: &[u8]) -> Result<BatchHeader, BatchError> {
        let h = BatchHeader::validate(b)?;
        if h.records_count == 0 || h.last_offset_delta != h.records_count - 1 {
            return Err(BatchError::BadCount { count: h.records_count, last_offset_delta: h.last_offset_delta });
        }
        Ok(h)
    }
}

/// Overwrites baseOffset and partitionLeaderEpoch in place (neither is under the CRC).
pub fn stamp(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    assert!(batch.len() >= HEADER_BYTES, "stamp on a batch that was not validated");
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// Writes the CRC-32C of bytes 21.. (attributes to the end) into the header, after a
/// change to anything it covers.
pub fn put_crc(batch: &mut [u8]) {
    assert!(batch.len() >= HEADER_BYTES, "crc of a batch shorter than its header");
    let crc = crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// CRC-32C (Castagnoli), the checksum of a v2 batch. Computed with carry-less multiplies
/// where the CPU has them: on this project's x86-64 machines that is twice the rate of
/// three interleaved `crc32` instructions for a 128 KiB batch (docs/bench.md), and a
/// single broker checks every byte it is sent.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// Zig-zag varint as used by record fields. Returns (value, bytes used).
pub fn read_varint(b: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, byte) in b.iter().enumerate().take(10) {
        raw |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            let v = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
            return Some((v, i + 1));
        }
    }
    None
}

fn check_uncompressed_records(mut b: &[u8], count: i32) -> Result<(), BatchError> {
    let mut seen = 0i32;
    while !b.is_empty() {
        let (len, used) = read_varint(b).ok_or(BatchError::BadRecords { count, detail: "bad length varint" })?;
        if len <= 0 || (len as u64) > (b.len() - used) as u64 {
            return Err(BatchError::BadRecords { count, detail: "record length out of range" });
        }
        b = &b[used + len as usize..];
        seen += 1;
        if seen > count {
            return Err(BatchError::BadRecords { count, detail: "more records than recordsCount" });
        }
    }
    if seen != count {
        return Err(BatchError::BadRecords { count, detail: "fewer records than recordsCount" });
    }
    Ok(())
}

/// Iterates over the batches in a records blob (a produce request's partition data, a
/// slice of a segment file). Yields `(header, byte range)`; stops with an error at the
/// first batch that does not fit, so the caller decides whether a partial tail is an error
/// (produce) or simply the end (a fetch that was cut at max_bytes).
pub struct Batches<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Batches<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Batches { buf, pos: 0 }
    }

    /// Bytes consumed by the complete batches returned so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Iterator for Batches<'_> {
    type Item = Result<(BatchHeader, std::ops::Range<usize>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.buf[self.pos..];
        if rest.is_empty() {
            return None;
        }
        let h = match BatchHeader::parse(rest) {
            Ok(h) => h,
            Err(e) => return Some(Err(e)),
        };
        let total = h.total_bytes();
        if total > rest.len() {
            return Some(Err(BatchError::Truncated { need: total, have: rest.len() }));
        }
        let range = self.pos..self.pos + total;
        self.pos += total;
        Some(Ok((h, range)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    /// CRC-32C one bit at a time: the definition, to check the fast one against.
    fn crc32c_bitwise(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
            }
        }
        !crc
    }

    #[test]
    fn crc32c_matches_its_definition_at_every_length_and_alignment() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283, "the standard check value");
        assert_eq!(crc32c(&[]), 0);
        let data: Vec<u8> = (0u32..5000).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for start in 0..70 {
            for len in (0..600).chain([1021, 2048, 4095, 4096, 4097, 4900]) {
                let Some(bytes) = data.get(start..start + len) else { continue };
                assert_eq!(crc32c(bytes), crc32c_bitwise(bytes), "start {start} len {len}");
            }
        }
        let batch = encode(50, Compression::None);
        assert_eq!(
            crc32c(&batch[21..]),
            u32::from_be_bytes(batch[17..21].try_into().expect("4 bytes")),
            "a batch kafka-protocol encoded"
        );
    }

    pub(crate) fn encode(n: usize, compression: Compression) -> Vec<u8> {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: 7,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: 1_000 + i as i64,
                key: Some(bytes::Bytes::from(format!("k{i}"))),
                value: Some(bytes::Bytes::from(vec![b'v'; i * 3])),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression })
            .expect("encode");
        buf.to_vec()
    }

    #[test]
    fn valid_batches_pass_for_every_codec() {
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let b = encode(10, c);
            let h = BatchHeader::validate_for_append(&b).expect("valid");
            assert_eq!(h.records_count, 10);
            assert_eq!(h.last_offset_delta, 9);
            assert_eq!(h.producer_id, 7);
            assert_eq!(h.max_timestamp, 1_009);
            assert_eq!(h.last_sequence(), 9);
        }
    }

    #[test]
    fn stamping_keeps_the_crc_valid() {
        let mut b = encode(3, Compression::None);
        stamp(&mut b, 1234, 5);
        let h = BatchHeader::validate(&b).expect("still valid");
        assert_eq!((h.base_offset, h.partition_leader_epoch, h.last_offset()), (1234, 5, 1236));
    }

    #[test]
    fn corruption_is_detected() {
        let good = encode(5, Compression::None);
        let mut b = good.clone();
        let last = b.len() - 1;
        b[last] ^= 1;
        assert!(matches!(BatchHeader::validate(&b), Err(BatchError::BadCrc { .. })));
        let mut b = good.clone();
        b[16] = 1;
        assert_eq!(BatchHeader::validate(&b), Err(BatchError::BadMagic(1)));
        assert!(matches!(BatchHeader::validate(&good[..good.len() - 1]), Err(BatchError::Truncated { .. })));
        // recordsCount 6 but only 5 records: fix the CRC so only the count is wrong.
        let mut b = good.clone();
        b[57..61].copy_from_slice(&6i32.to_be_bytes());
        put_crc(&mut b);
        // The records section walk catches it, whichever entry point is used.
        assert!(matches!(BatchHeader::validate_for_append(&b), Err(BatchError::BadRecords { .. })));
        assert!(matches!(BatchHeader::validate(&b), Err(BatchError::BadRecords { .. })));
        // lastOffsetDelta disagreeing with recordsCount is caught for appends.
        let mut b = good.clone();
        b[23..27].copy_from_slice(&7i32.to_be_bytes());
        put_crc(&mut b);
        assert!(matches!(BatchHeader::validate_for_append(&b), Err(BatchError::BadCount { .. })));
    }

    #[test]
    fn iterates_batches_and_stops_at_a_torn_tail() {
        let a = encode(2, Compression::None);
        let b = encode(4, Compression::Lz4);
        let mut blob = [a.clone(), b.clone()].concat();
        let found: Vec<_> = Batches::new(&blob).collect::<Result<_, _>>().expect("two batches");
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].1, a.len()..a.len() + b.len());
        blob.truncate(blob.len() - 3);
        let mut it = Batches::new(&blob);
        assert!(it.next().expect("first").is_ok());
        assert!(matches!(it.next(), Some(Err(BatchError::Truncated { .. }))));
        assert_eq!(it.position(), a.len());
    }

    /// Found by the `record_batch` fuzz target (docs/fuzzing.md): a header claiming offsets
    /// past i64::MAX overflowed `last_offset`/`next_offset` (a panic in a debug build; in a
    /// release build the offsets wrapped negative, so a reader took the batch for an old one).
    #[test]
    fn offsets_past_the_largest_saturate() {
        let mut b = encode(3, Compression::None);
        stamp(&mut b, i64::MAX - 1, 0);
        let h = BatchHeader::parse(&b).expect("header");
        assert_eq!((h.last_offset(), h.next_offset()), (i64::MAX, i64::MAX));
        stamp(&mut b, i64::MIN, 0);
        b[23..27].copy_from_slice(&(-5i32).to_be_bytes());
        let h = BatchHeader::parse(&b).expect("header");
        assert_eq!(h.last_offset(), i64::MIN);
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        for len in 0..400usize {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = BatchHeader::validate_for_append(&buf);
            for item in Batches::new(&buf) {
                if item.is_err() {
                    break;
                }
            }
        }
    }
}
