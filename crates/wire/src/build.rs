//! Building RecordBatch v2 bytes, and the record codecs (gzip, snappy, lz4, zstd) as
//! Kafka frames them, for everything that writes batches itself: the log cleaner, the
//! coordinator's log, the benchmark's producer and tests.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::{put_crc, HEADER_BYTES, MAGIC_V2};

/// Compression codec ids as stored in a batch's attributes.
pub const CODEC_NONE: i16 = 0;
pub const CODEC_GZIP: i16 = 1;
pub const CODEC_SNAPPY: i16 = 2;
pub const CODEC_LZ4: i16 = 3;
pub const CODEC_ZSTD: i16 = 4;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The most bytes a batch's records section may decompress to. A batch that claims or
/// produces more is refused, and decompression stops at the bound: a small compressed
/// batch (a gzip or zstd "bomb", a snappy header claiming gigabytes) cannot make the broker
/// allocate without limit. Generous for real batches (producers cap a batch at
/// `batch.size`/`max.request.size`, default 16 KiB/1 MiB, before compression).
pub const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

/// Decompresses a batch's records section, refusing more than `max_bytes` of output.
pub fn decompress(codec: i16, data: &[u8], max_bytes: usize) -> anyhow::Result<Bytes> {
    use std::io::Read;
    let bounded = |mut reader: Box<dyn Read + '_>| -> anyhow::Result<Bytes> {
        let mut out = Vec::new();
        (&mut reader).take(max_bytes as u64 + 1).read_to_end(&mut out)?;
        if out.len() > max_bytes {
            anyhow::bail!("records decompress to more than {max_bytes} bytes");
        }
        Ok(Bytes::from(out))
    };
    match codec {
        CODEC_NONE => Ok(Bytes::copy_from_slice(data)),
        CODEC_GZIP => bounded(Box::new(flate2::read::MultiGzDecoder::new(data))),
        CODEC_ZSTD => bounded(Box::new(zstd::stream::read::Decoder::new(data)?)),
        CODEC_LZ4 => bounded(Box::new(lz4::Decoder::new(data)?)),
        CODEC_SNAPPY => snappy_decompress(data, max_bytes),
        c => anyhow::bail!("unknown compression codec {c}"),
    }
}

/// Kafka's snappy: xerial framing (a magic header, then blocks each prefixed with its
/// length) or, from older clients, one raw snappy block. Each block's decompressed length
/// is read from its header and checked against what is left of the bound before anything
/// is allocated.
fn snappy_decompress(data: &[u8], max_bytes: usize) -> anyhow::Result<Bytes> {
    const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
    const XERIAL_HEADER_BYTES: usize = 16;
    let mut out = Vec::new();
    let block = |compressed: &[u8], out: &mut Vec<u8>| -> anyhow::Result<()> {
        let len = snap::raw::decompress_len(compressed)?;
        if len > max_bytes - out.len() {
            anyhow::bail!("records decompress to more than {max_bytes} bytes");
        }
        let start = out.len();
        out.resize(start + len, 0);
        snap::raw::Decoder::new().decompress(compressed, &mut out[start..])?;
        Ok(())
    };
    if !data.starts_with(XERIAL_MAGIC) {
        block(data, &mut out)?;
        return Ok(Bytes::from(out));
    }
    let mut rest = data.get(XERIAL_HEADER_BYTES..).ok_or_else(|| anyhow::anyhow!("short snappy header"))?;
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(4).ok_or_else(|| anyhow::anyhow!("short snappy block length"))?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (compressed, tail) = tail.split_at_checked(len).ok_or_else(|| anyhow::anyhow!("short snappy block"))?;
        block(compressed, &mut out)?;
        rest = tail;
    }
    Ok(Bytes::from(out))
}

/// Compresses a records section at `level` (Kafka's `compression.gzip.level`,
/// `compression.lz4.level`, `compression.zstd.level`; snappy has none), or at the codec's
/// default when None. Gzip's -1 is zlib's default (6), as in Kafka; an lz4 level above the
/// library's 12 compresses as 12.
pub fn compress_level(codec: i16, plain: &[u8], level: Option<i32>) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    let Some(level) = level else { return compress(codec, plain) };
    match codec {
        CODEC_GZIP => {
            let level = match level {
                -1 => flate2::Compression::default(),
                l => flate2::Compression::new(l.clamp(0, 9) as u32),
            };
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(plain)?;
            Ok(e.finish()?)
        }
        CODEC_LZ4 => {
            let mut e = lz4::EncoderBuilder::new()
                .level(level.clamp(0, 12) as u32)
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::new())?;
            e.write_all(plain)?;
            let (out, done) = e.finish();
            done?;
            Ok(out)
        }
        CODEC_ZSTD => Ok(zstd::bulk::compress(plain, level)?),
        _ => compress(codec, plain),
    }
}

/// Compresses a records section at the codec's default level.
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

fn put_varint(b: &mut impl BufMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        b.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    b.put_u8(z as u8);
}

/// One record's fields, as [`BatchBuilder::push_parts`] encodes them.
struct RecordFields<'a> {
    body: usize,
    ts_delta: i64,
    offset_delta: i64,
    key: Option<&'a [u8]>,
    value_len: i64,
    value: Option<&'a [&'a [u8]]>,
}

impl RecordFields<'_> {
    fn encode(&self, b: &mut impl BufMut) {
        put_varint(b, self.body as i64);
        b.put_u8(0);
        put_varint(b, self.ts_delta);
        put_varint(b, self.offset_delta);
        put_varint(b, self.key.map_or(-1, |k| k.len() as i64));
        if let Some(k) = self.key {
            b.put_slice(k);
        }
        put_varint(b, self.value_len);
        for part in self.value.unwrap_or_default() {
            b.put_slice(part);
        }
        put_varint(b, 0);
    }
}

/// Records up to this long (length prefix included) are encoded on the stack first.
const SMALL_RECORD_BYTES: usize = 96;

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
    /// Room for the batch header ([`HEADER_BYTES`], written when finished), then the
    /// records: an uncompressed batch is finished in place ([`BatchBuilder::into_batch`]).
    records: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchBuilder {
    /// `base_timestamp`: the first record's timestamp (deltas are taken from it).
    pub fn new(base_timestamp: i64) -> BatchBuilder {
        BatchBuilder::with_capacity(base_timestamp, 0)
    }

    /// [`BatchBuilder::new`] with room for `bytes` of records before it grows (a producer
    /// that fills batches to `batch.size` copies each record once, not again as it grows).
    pub fn with_capacity(base_timestamp: i64, bytes: usize) -> BatchBuilder {
        let mut records = BytesMut::with_capacity(HEADER_BYTES + bytes);
        records.resize(HEADER_BYTES, 0);
        BatchBuilder { records, count: 0, base_timestamp, max_timestamp: base_timestamp }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn count(&self) -> i32 {
        self.count
    }

    /// Size of the uncompressed batch so far.
    pub fn size_bytes(&self) -> usize {
        self.records.len()
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
        let fields = RecordFields { body, ts_delta, offset_delta, key, value_len, value };
        let len = varint_len(body as i64) + body;
        if len <= SMALL_RECORD_BYTES {
            // A small record is put together on the stack and copied in once: a dozen
            // small writes into the growing buffer cost more than the record itself.
            let mut buf = [0u8; SMALL_RECORD_BYTES];
            fields.encode(&mut &mut buf[..]);
            self.records.put_slice(&buf[..len]);
        } else {
            self.records.reserve(len);
            fields.encode(&mut self.records);
        }
        self.count += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    /// The finished batch (base offset 0, leader epoch -1: the broker stamps both).
    pub fn finish(&self, codec: i16, producer: ProducerFields) -> anyhow::Result<Vec<u8>> {
        self.finish_with(codec, codec, producer)
    }

    /// A batch written inside a transaction (the transactional attribute set).
    pub fn finish_transactional(&self, codec: i16, producer: ProducerFields) -> anyhow::Result<Vec<u8>> {
        self.finish_with(codec, codec | ATTR_TRANSACTIONAL, producer)
    }

    /// An uncompressed control batch (clients skip it, as they skip transaction markers).
    pub fn finish_control(&self) -> Vec<u8> {
        self.finish_with(CODEC_NONE, CODEC_NONE | ATTR_CONTROL, ProducerFields::NONE)
            .expect("an uncompressed batch cannot fail to build")
    }

    /// An uncompressed transactional control batch (a transaction marker).
    pub(crate) fn finish_marker(&self, producer: ProducerFields) -> Vec<u8> {
        self.finish_with(CODEC_NONE, CODEC_NONE | ATTR_CONTROL | ATTR_TRANSACTIONAL, producer)
            .expect("an uncompressed batch cannot fail to build")
    }

    /// [`BatchBuilder::finish`] without a copy when `codec` is none: the header is
    /// written into the room kept for it in front of the records.
    pub fn into_batch(mut self, codec: i16, producer: ProducerFields) -> anyhow::Result<Bytes> {
        if codec != CODEC_NONE {
            return self.finish(codec, producer).map(Bytes::from);
        }
        let section = self.records.len() - HEADER_BYTES;
        let mut header = [0u8; HEADER_BYTES];
        self.put_header(&mut &mut header[..], section, codec, producer);
        self.records[..HEADER_BYTES].copy_from_slice(&header);
        put_crc(&mut self.records);
        Ok(self.records.freeze())
    }

    fn finish_with(&self, codec: i16, attributes: i16, producer: ProducerFields) -> anyhow::Result<Vec<u8>> {
        let plain = &self.records[HEADER_BYTES..];
        let compressed;
        let section = if codec == CODEC_NONE {
            plain
        } else {
            compressed = compress(codec, plain)?;
            &compressed[..]
        };
        let mut out = Vec::with_capacity(HEADER_BYTES + section.len());
        self.put_header(&mut out, section.len(), attributes, producer);
        out.extend_from_slice(section);
        put_crc(&mut out);
        Ok(out)
    }

    /// The batch header for `section` bytes of records, its CRC left zero.
    fn put_header(&self, out: &mut impl BufMut, section: usize, attributes: i16, producer: ProducerFields) {
        out.put_i64(0);
        out.put_i32((HEADER_BYTES - 12 + section) as i32);
        out.put_i32(-1);
        out.put_u8(MAGIC_V2 as u8);
        out.put_u32(0);
        out.put_i16(attributes);
        out.put_i32((self.count - 1).max(0));
        out.put_i64(self.base_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i64(producer.producer_id);
        out.put_i16(producer.producer_epoch);
        out.put_i32(producer.base_sequence);
        out.put_i32(self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchHeader;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn a_batch_finished_in_place_is_the_batch_finish_builds() {
        for codec in [CODEC_NONE, CODEC_GZIP, CODEC_LZ4] {
            let producer = ProducerFields { producer_id: 7, producer_epoch: 2, base_sequence: 40 };
            let mut b = BatchBuilder::with_capacity(1_000, 64);
            for i in 0..50u8 {
                // Past the reserved room too: the buffer grows as it must.
                b.push_parts(1_000 + i as i64, Some(&[i]), Some(&[b"value-", &[i; 20]]));
            }
            let copied = b.finish(codec, producer).expect("finish");
            if codec == CODEC_NONE {
                assert_eq!(b.size_bytes(), copied.len());
            }
            let in_place = b.into_batch(codec, producer).expect("into_batch");
            assert_eq!(&in_place[..], &copied[..], "codec {codec}");
            BatchHeader::validate_for_append(&in_place).expect("a valid batch");
        }
        let empty = BatchBuilder::new(5).into_batch(CODEC_NONE, ProducerFields::NONE).expect("empty");
        assert_eq!(&empty[..], &BatchBuilder::new(5).finish(CODEC_NONE, ProducerFields::NONE).expect("empty")[..]);
    }

    #[test]
    fn decompression_round_trips_and_stops_at_its_bound() {
        // 1 MiB of zeros compresses to almost nothing in every codec: a small "bomb".
        let plain = vec![0u8; 1 << 20];
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let packed = compress(codec, &plain).expect("compress");
            assert!(packed.len() < plain.len() / 8, "codec {codec}: {} bytes", packed.len());
            let back = decompress(codec, &packed, plain.len()).expect("within the bound");
            assert_eq!(back.len(), plain.len(), "codec {codec}");
            let err = decompress(codec, &packed, 64 << 10).expect_err("over the bound");
            assert!(err.to_string().contains("more than 65536 bytes"), "codec {codec}: {err}");
        }
    }

    #[test]
    fn a_snappy_header_claiming_gigabytes_is_refused_before_allocating() {
        // A raw snappy block whose length varint says 4 GiB, followed by nothing.
        let raw = [0x80, 0x80, 0x80, 0x80, 0x10, 0x00];
        assert!(decompress(CODEC_SNAPPY, &raw, DECOMPRESSED_BYTES_MAX).is_err());
        // The same inside xerial framing, and a framed block cut short.
        let mut framed = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        framed.extend_from_slice(&(raw.len() as u32).to_be_bytes());
        framed.extend_from_slice(&raw);
        assert!(decompress(CODEC_SNAPPY, &framed, DECOMPRESSED_BYTES_MAX).is_err());
        framed.extend_from_slice(&100u32.to_be_bytes());
        assert!(decompress(CODEC_SNAPPY, &framed, DECOMPRESSED_BYTES_MAX).is_err());
    }

    /// Found by the `record_batch` fuzz target (docs/fuzzing.md): a compressed batch whose
    /// recordsCount claims a billion records passes `validate_for_append` (only an
    /// uncompressed records section is counted), and `kafka-protocol`'s decoder reserved
    /// room for that many records, aborting the broker on a ListOffsets by timestamp. The
    /// vendored copy now bounds the reservation by the bytes left (vendor/kafka-protocol).
    #[test]
    fn a_record_count_past_the_records_is_an_error_not_an_allocation() {
        for codec in [CODEC_NONE, CODEC_GZIP, CODEC_ZSTD] {
            let mut b = BatchBuilder::new(1_000);
            b.push(1_000, Some(b"k"), Some(b"v"));
            let mut bytes = b.finish(codec, ProducerFields::NONE).expect("finish");
            let count = 1_000_000_000i32;
            bytes[23..27].copy_from_slice(&(count - 1).to_be_bytes());
            bytes[57..61].copy_from_slice(&count.to_be_bytes());
            put_crc(&mut bytes);
            if codec != CODEC_NONE {
                BatchHeader::validate_for_append(&bytes).expect("the count of a compressed batch is not checked");
            }
            assert!(RecordBatchDecoder::decode(&mut Bytes::from(bytes)).is_err(), "codec {codec}");
        }
    }

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

    /// Records just under, at and over the size encoded on the stack come out the same as
    /// Kafka's decoder reads them.
    #[test]
    fn records_around_the_stack_encoded_size_decode_whole() {
        let mut b = BatchBuilder::new(0);
        let sizes: Vec<usize> = (SMALL_RECORD_BYTES - 12..SMALL_RECORD_BYTES + 4).collect();
        for (i, n) in sizes.iter().enumerate() {
            let value: Vec<u8> = (0..*n).map(|j| (i + j) as u8).collect();
            b.push_parts(i as i64, Some(b"key"), Some(&[&value[..1], &value[1..]]));
        }
        let bytes = b.finish(CODEC_NONE, ProducerFields::NONE).expect("finish");
        BatchHeader::validate_for_append(&bytes).expect("valid");
        let set = RecordBatchDecoder::decode(&mut Bytes::from(bytes)).expect("decode");
        assert_eq!(set.records.len(), sizes.len());
        for (i, (r, n)) in set.records.iter().zip(&sizes).enumerate() {
            let want: Vec<u8> = (0..*n).map(|j| (i + j) as u8).collect();
            assert_eq!((r.offset, r.timestamp), (i as i64, i as i64));
            assert_eq!(r.key.as_deref(), Some(&b"key"[..]));
            assert_eq!(r.value.as_deref(), Some(&want[..]), "record {i} of {n} value bytes");
        }
    }
}
