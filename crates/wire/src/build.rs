//! Building RecordBatch v2 bytes, and the record codecs (gzip, snappy, lz4, zstd) as
//! Kafka frames them, for everything that writes batches itself: the log cleaner, the
//! coordinator's log, the benchmark's producer and tests.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::{HEADER_BYTES, MAGIC_V2};

/// Compression codec ids as stored in a batch's attributes.
pub const CODEC_NONE: i16 = 0;
pub const CODEC_GZIP: i16 = 1;
pub const CODEC_SNAPPY: i16 = 2;
pub const CODEC_LZ4: i16 = 3;
pub const CODEC_ZSTD: i16 = 4;
const ATTR_CONTROL: i16 = 0x20;

/// Decompresses a batch's records section.
pub fn decompress(codec: i16, data: &[u8]) -> anyhow::Result<Bytes> {
    let mut src = Bytes::copy_from_slice(data);
    let all = |b: &mut Bytes| Ok(b.copy_to_bytes(b.remaining()));
    match codec {
        CODEC_NONE => Ok(src),
        CODEC_GZIP => Gzip::decompress(&mut src, all),
        CODEC_SNAPPY => Snappy::decompress(&mut src, all),
        CODEC_LZ4 => Lz4::decompress(&mut src, all),
        CODEC_ZSTD => Zstd::decompress(&mut src, all),
        c => anyhow::bail!("unknown compression codec {c}"),
    }
}

/// Compresses a records section.
pub fn compress(codec: i16, plain: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = BytesMut::new();
    let put = |b: &mut BytesMut| {
        b.put_slice(plain);
        Ok(())
    };
    match codec {
        CODEC_NONE => return Ok(plain.to_vec()),
        CODEC_GZIP => <Gzip as Compressor<BytesMut>>::compress(&mut out, put)?,
        CODEC_SNAPPY => <Snappy as Compressor<BytesMut>>::compress(&mut out, put)?,
        CODEC_LZ4 => <Lz4 as Compressor<BytesMut>>::compress(&mut out, put)?,
        CODEC_ZSTD => <Zstd as Compressor<BytesMut>>::compress(&mut out, put)?,
        c => anyhow::bail!("unknown compression codec {c}"),
    }
    Ok(out.to_vec())
}

fn put_varint(b: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        b.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    b.put_u8(z as u8);
}

fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// Producer fields of a batch: id, epoch and the first record's sequence (-1 when the
/// producer is not idempotent).
#[derive(Debug, Clone, Copy)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerFields {
    pub const NONE: ProducerFields = ProducerFields { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
}

/// Accumulates records (offset deltas 0, 1, 2, ...) and writes them as one batch.
pub struct BatchBuilder {
    records: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchBuilder {
    /// `base_timestamp`: the first record's timestamp (deltas are taken from it).
    pub fn new(base_timestamp: i64) -> BatchBuilder {
        BatchBuilder { records: BytesMut::new(), count: 0, base_timestamp, max_timestamp: base_timestamp }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn count(&self) -> i32 {
        self.count
    }

    /// Size of the uncompressed batch so far.
    pub fn size_bytes(&self) -> usize {
        HEADER_BYTES + self.records.len()
    }

    /// Adds one record with no headers (`None` value: a tombstone).
    pub fn push(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.push_parts(timestamp, key, value.as_ref().map(std::slice::from_ref));
    }

    /// Adds one record with no headers whose value is the concatenation of `value` parts
    /// (`None`: a null value, a tombstone).
    pub fn push_parts(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[&[u8]]>) {
        let ts_delta = timestamp - self.base_timestamp;
        let offset_delta = self.count as i64;
        let key_len = key.map_or(-1, |k| k.len() as i64);
        let value_len = value.map_or(-1, |parts| parts.iter().map(|p| p.len()).sum::<usize>() as i64);
        let body = 1
            + varint_len(ts_delta)
            + varint_len(offset_delta)
            + varint_len(key_len)
            + key_len.max(0) as usize
            + varint_len(value_len)
            + value_len.max(0) as usize
            + 1;
        self.records.reserve(body + 5);
        put_varint(&mut self.records, body as i64);
        self.records.put_u8(0);
        put_varint(&mut self.records, ts_delta);
        put_varint(&mut self.records, offset_delta);
        put_varint(&mut self.records, key_len);
        if let Some(k) = key {
            self.records.put_slice(k);
        }
        put_varint(&mut self.records, value_len);
        for part in value.unwrap_or_default() {
            self.records.put_slice(part);
        }
        put_varint(&mut self.records, 0);
        self.count += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    /// The finished batch (base offset 0, leader epoch -1: the broker stamps both).
    pub fn finish(&self, codec: i16, producer: ProducerFields) -> anyhow::Result<Vec<u8>> {
        self.finish_with(codec, codec, producer)
    }

    /// An uncompressed control batch (clients skip it, as they skip transaction markers).
    pub fn finish_control(&self) -> Vec<u8> {
        self.finish_with(CODEC_NONE, CODEC_NONE | ATTR_CONTROL, ProducerFields::NONE)
            .expect("an uncompressed batch cannot fail to build")
    }

    fn finish_with(&self, codec: i16, attributes: i16, producer: ProducerFields) -> anyhow::Result<Vec<u8>> {
        let section = compress(codec, &self.records)?;
        let mut out = Vec::with_capacity(HEADER_BYTES + section.len());
        out.extend_from_slice(&0i64.to_be_bytes());
        out.extend_from_slice(&((HEADER_BYTES - 12 + section.len()) as i32).to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes());
        out.push(MAGIC_V2 as u8);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&(self.count - 1).max(0).to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&producer.producer_id.to_be_bytes());
        out.extend_from_slice(&producer.producer_epoch.to_be_bytes());
        out.extend_from_slice(&producer.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&section);
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchHeader;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn built_batches_validate_and_decode_for_every_codec() {
        for codec in [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let mut b = BatchBuilder::new(1_000);
            b.push_parts(1_000, Some(b"k0"), Some(&[b"v", b"0"]));
            b.push(1_005, None, Some(&[7u8; 300]));
            b.push(999, Some(b"gone"), None);
            let producer = ProducerFields { producer_id: 9, producer_epoch: 1, base_sequence: 40 };
            let bytes = b.finish(codec, producer).expect("finish");
            let h = BatchHeader::validate_for_append(&bytes).expect("valid");
            assert_eq!((h.records_count, h.last_offset_delta, h.max_timestamp), (3, 2, 1_005));
            assert_eq!((h.producer_id, h.base_sequence, h.compression()), (9, 40, codec));
            let set = RecordBatchDecoder::decode(&mut Bytes::from(bytes)).expect("decode");
            let r = &set.records;
            assert_eq!(r[0].value.as_deref(), Some(&b"v0"[..]));
            assert_eq!((r[1].key.is_none(), r[1].value.as_ref().map(|v| v.len()), r[1].offset), (true, Some(300), 1));
            assert_eq!((r[2].value.is_none(), r[2].timestamp), (true, 999));
        }
    }
}
