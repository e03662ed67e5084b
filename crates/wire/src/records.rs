//! The records inside a batch: decompressed (within a bound) and located one by one, and
//! a batch rebuilt around a new records section. For everything that looks inside batches
//! rather than passing them through: produce validation (keys on compacted topics, record
//! timestamps, recompression to the topic's `compression.type`), the log cleaner, and the
//! metadata and Raft logs that carry their own records.

use std::borrow::Cow;
use std::io;

use bytes::{BufMut, BytesMut};

use crate::batch::{put_crc, read_varint, BatchHeader, HEADER_BYTES};
use crate::build::{compress_level, decompress, CODEC_NONE, DECOMPRESSED_BYTES_MAX};

/// One record inside a batch: its whole encoding (length prefix included), its offset,
/// timestamp, key and value (`None` value: a tombstone). Headers are not decoded.
pub struct RecordRef<'a> {
    pub raw: &'a [u8],
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// The records section of a batch, with each record located: borrowed from the batch when
/// it is not compressed, decompressed otherwise.
pub struct Records<'a> {
    data: Cow<'a, [u8]>,
    spans: Vec<Span>,
}

type Range = Option<(usize, usize)>;

/// Where one record lies in `Records::data`.
struct Span {
    start: usize,
    end: usize,
    offset: i64,
    timestamp: i64,
    key: Range,
    value: Range,
}

impl Records<'_> {
    pub fn iter(&self) -> impl Iterator<Item = RecordRef<'_>> {
        self.spans.iter().map(|s| RecordRef {
            raw: &self.data[s.start..s.end],
            offset: s.offset,
            timestamp: s.timestamp,
            key: s.key.map(|(a, b)| &self.data[a..b]),
            value: s.value.map(|(a, b)| &self.data[a..b]),
        })
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Decompresses (if needed, at most [`DECOMPRESSED_BYTES_MAX`]) and frames the records of
/// one batch (control batches too). Every length and offset is checked: these bytes come
/// from clients and from disk.
pub fn records_of<'a>(h: &BatchHeader, batch: &'a [u8]) -> io::Result<Records<'a>> {
    let section = batch.get(HEADER_BYTES..).ok_or_else(|| invalid("batch shorter than its header"))?;
    let data = match h.compression() {
        CODEC_NONE => Cow::Borrowed(section),
        codec => Cow::Owned(Vec::from(decompress(codec, section, DECOMPRESSED_BYTES_MAX).map_err(invalid)?)),
    };
    let mut spans = Vec::with_capacity((h.records_count.max(0) as usize).min(data.len()));
    let mut pos = 0usize;
    let bad = |what: &str| invalid(format!("batch at offset {}: {what}", h.base_offset));
    while pos < data.len() {
        let (len, used) = read_varint(&data[pos..]).ok_or_else(|| bad("record length"))?;
        let start = pos;
        let body_start = pos + used;
        let end = usize::try_from(len).ok().and_then(|l| body_start.checked_add(l)).filter(|&e| e <= data.len());
        let end = end.ok_or_else(|| bad("record length out of range"))?;
        let body = &data[body_start..end];
        // attributes i8, timestampDelta varlong, offsetDelta varint, keyLength varint, key,
        // valueLength varint, ...
        let mut at = 1usize;
        let next = |at: &mut usize| -> io::Result<i64> {
            let (v, n) = read_varint(body.get(*at..).unwrap_or_default()).ok_or_else(|| bad("record field"))?;
            *at += n;
            Ok(v)
        };
        let timestamp_delta = next(&mut at)?;
        let offset_delta = next(&mut at)?;
        let field = |at: &mut usize, what: &str| -> io::Result<Range> {
            let len = next(at)?;
            if len < 0 {
                return Ok(None);
            }
            let f = usize::try_from(len).ok().and_then(|l| at.checked_add(l)).filter(|&e| e <= body.len());
            let f = f.ok_or_else(|| bad(what))?;
            let range = (body_start + *at, body_start + f);
            *at = f;
            Ok(Some(range))
        };
        let key = field(&mut at, "key length out of range")?;
        let value = field(&mut at, "value length out of range")?;
        let offset = h.base_offset.checked_add(offset_delta).ok_or_else(|| bad("record offset out of range"))?;
        let timestamp =
            h.base_timestamp.checked_add(timestamp_delta).ok_or_else(|| bad("record timestamp out of range"))?;
        spans.push(Span { start, end, offset, timestamp, key, value });
        pos = end;
    }
    Ok(Records { data, spans })
}

/// `batch` with a new records section: `records` (raw encodings, as [`RecordRef::raw`])
/// compressed with `codec` at `level` (None: the codec's default). The header keeps its
/// base offset, last offset delta, timestamps and producer fields; the codec bits, length,
/// record count and CRC are redone.
pub fn rebuild<'a>(
    h: &BatchHeader,
    batch: &[u8],
    records: impl IntoIterator<Item = &'a [u8]>,
    codec: i16,
    level: Option<i32>,
) -> io::Result<Vec<u8>> {
    let head = batch.get(..HEADER_BYTES).ok_or_else(|| invalid("batch shorter than its header"))?;
    let mut plain = BytesMut::new();
    let mut count = 0i32;
    for r in records {
        plain.put_slice(r);
        count += 1;
    }
    let section = compress_level(codec, &plain, level).map_err(invalid)?;
    let mut out = Vec::with_capacity(HEADER_BYTES + section.len());
    out.extend_from_slice(head);
    out.extend_from_slice(&section);
    let attributes = (h.attributes & !0x07) | codec;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let batch_length = i32::try_from(out.len() - 12).map_err(|_| invalid("rebuilt batch over 2 GiB"))?;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    out[57..61].copy_from_slice(&count.to_be_bytes());
    put_crc(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{BatchBuilder, ProducerFields, CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};

    fn batch(codec: i16) -> Vec<u8> {
        let mut b = BatchBuilder::new(5_000);
        b.push(5_000, Some(b"a"), Some(b"1"));
        b.push(4_000, None, Some(b"2"));
        b.push(9_000, Some(b"c"), None);
        b.finish(codec, ProducerFields { producer_id: 7, producer_epoch: 1, base_sequence: 3 }).expect("encode")
    }

    #[test]
    fn records_carry_offsets_timestamps_keys_and_values() {
        let bytes = batch(CODEC_NONE);
        let h = BatchHeader::validate(&bytes).expect("valid");
        let rs = records_of(&h, &bytes).expect("records");
        let got: Vec<_> = rs.iter().map(|r| (r.offset, r.timestamp, r.key.is_some(), r.value.is_some())).collect();
        assert_eq!(got, vec![(0, 5_000, true, true), (1, 4_000, false, true), (2, 9_000, true, false)]);
    }

    #[test]
    fn rebuilding_with_every_codec_and_level_keeps_the_records_and_the_header() {
        let bytes = batch(CODEC_NONE);
        let h = BatchHeader::validate(&bytes).expect("valid");
        let rs = records_of(&h, &bytes).expect("records");
        let raws: Vec<Vec<u8>> = rs.iter().map(|r| r.raw.to_vec()).collect();
        for (codec, level) in [
            (CODEC_GZIP, Some(-1)),
            (CODEC_GZIP, Some(9)),
            (CODEC_SNAPPY, None),
            (CODEC_LZ4, Some(1)),
            (CODEC_LZ4, Some(17)),
            (CODEC_ZSTD, Some(-5)),
            (CODEC_ZSTD, Some(22)),
            (CODEC_NONE, None),
        ] {
            let out = rebuild(&h, &bytes, raws.iter().map(Vec::as_slice), codec, level).expect("rebuild");
            let h2 = BatchHeader::validate(&out).expect("valid after rebuild");
            assert_eq!(h2.compression(), codec);
            assert_eq!((h2.producer_id, h2.base_sequence, h2.records_count), (7, 3, 3));
            assert_eq!((h2.base_timestamp, h2.max_timestamp, h2.last_offset_delta), (5_000, 9_000, 2));
            let again: Vec<Vec<u8>> = records_of(&h2, &out).expect("records").iter().map(|r| r.raw.to_vec()).collect();
            assert_eq!(again, raws, "codec {codec} level {level:?}");
        }
    }

    #[test]
    fn a_record_longer_than_its_section_is_an_error() {
        let mut bytes = batch(CODEC_NONE);
        // The first record's length varint (zigzag) claims 63 bytes.
        bytes[HEADER_BYTES] = 126;
        let h = BatchHeader::parse(&bytes).expect("header");
        assert!(records_of(&h, &bytes).is_err());
    }
}
