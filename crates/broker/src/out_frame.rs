//! Response frames that share the records they carry instead of copying them.
//!
//! A Fetch response is mostly records read from the log. It is encoded with
//! `runnel_wire::pieces`: a byte field that is one of the response's records is kept as the
//! `Bytes` the log read filled, a piece of its own, or, on a plaintext connection, as the
//! slice of the segment file the records lie in (`sendfile.rs`). The writer sends the pieces
//! in order.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;
use runnel_storage::FileSlice;
pub use runnel_wire::pieces::SHARE_MIN;
use runnel_wire::pieces::{encode_frame, Piece as _, Shared};

use crate::sendfile::is_placeholder;

/// A piece of a response frame: bytes in memory, or a slice of a segment file.
#[derive(Debug, Clone)]
pub enum Piece {
    Bytes(Bytes),
    File(FileSlice),
}

impl From<Bytes> for Piece {
    fn from(b: Bytes) -> Piece {
        Piece::Bytes(b)
    }
}

impl runnel_wire::pieces::Piece for Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Bytes(b) => b.len(),
            Piece::File(f) => f.len,
        }
    }

    /// The piece's bytes, read from its file if it has one.
    fn read(&self) -> std::io::Result<Bytes> {
        match self {
            Piece::Bytes(b) => Ok(b.clone()),
            Piece::File(f) => f.read().map(Bytes::from),
        }
    }
}

/// A response frame, size prefix included, in the order its pieces go out.
#[derive(Debug, Default)]
pub struct OutFrame {
    pieces: Vec<Piece>,
}

impl OutFrame {
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    fn len(&self) -> usize {
        self.pieces.iter().map(Piece::len).sum()
    }

    /// The frame in one buffer (a copy unless it has a single piece in memory).
    pub fn into_bytes(mut self) -> std::io::Result<Bytes> {
        if let [Piece::Bytes(_)] = self.pieces.as_slice() {
            return self.pieces.pop().map_or(Ok(Bytes::new()), |p| p.read());
        }
        let mut all = BytesMut::with_capacity(self.len());
        for p in &self.pieces {
            all.extend_from_slice(&p.read()?);
        }
        Ok(all.freeze())
    }
}

/// Encodes a response with its header and size prefix; `files` are the slices that the
/// response's stand-ins for records sent from files stand for, in order (`sendfile.rs`).
/// `None` (logged) when the handler built a response its version cannot carry, or stand-ins
/// and slices that do not match: a bug, which the client sees as a timeout.
pub fn encode_response(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    resp: &ResponseKind,
    files: Vec<FileSlice>,
) -> Option<OutFrame> {
    // ApiVersions responses always carry a v0 header, whatever the request version.
    let header_version = if key == ApiKey::ApiVersions { 0 } else { key.response_header_version(version) };
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let encoded = match resp {
        ResponseKind::Fetch(f) => big(f.responses.iter().flat_map(|t| &t.partitions).map(|p| &p.records), files)
            .and_then(|shared| in_pieces(&header, header_version, f, version, &shared)),
        ResponseKind::ShareFetch(f) => big(f.responses.iter().flat_map(|t| &t.partitions).map(|p| &p.records), files)
            .and_then(|shared| in_pieces(&header, header_version, f, version, &shared)),
        _ if !files.is_empty() => Err(anyhow::anyhow!("file slices given for a {key:?} response")),
        _ => in_one_buffer(&header, header_version, resp, version),
    };
    match encoded {
        Ok(frame) => Some(frame),
        Err(e) => {
            // A bug in a handler (a field set that this version lacks): log it loudly; the
            // client times out and retries, and the connection goes on.
            tracing::error!(?key, version, error = %e, "could not encode response");
            None
        }
    }
}

/// The records worth a piece of their own (a stand-in for a file slice, or the bytes
/// read), in the order the encoder meets them, each stand-in paired with the next of
/// `files`.
fn big<'a>(
    records: impl Iterator<Item = &'a Option<Bytes>>,
    files: Vec<FileSlice>,
) -> anyhow::Result<Vec<Shared<Piece>>> {
    let mut files = files.into_iter();
    let mut shared = Vec::new();
    for r in records.flatten().filter(|b| b.len() >= SHARE_MIN) {
        let piece = if is_placeholder(r) {
            let file = files.next().ok_or_else(|| anyhow::anyhow!("more stand-ins than file slices"))?;
            anyhow::ensure!(file.len == r.len(), "a stand-in of {} bytes for a slice of {}", r.len(), file.len);
            Piece::File(file)
        } else {
            Piece::Bytes(r.clone())
        };
        shared.push((r.clone(), piece));
    }
    anyhow::ensure!(files.next().is_none(), "more file slices than stand-ins");
    Ok(shared)
}

fn in_one_buffer(
    header: &ResponseHeader,
    header_version: i16,
    resp: &ResponseKind,
    version: i16,
) -> anyhow::Result<OutFrame> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    header.encode(&mut buf, header_version)?;
    resp.encode(&mut buf, version)?;
    let len = i32::try_from(buf.len() - 4)?;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(OutFrame { pieces: vec![Piece::Bytes(buf.freeze())] })
}

/// A response whose `shared` byte fields become pieces of their own, the rest in one
/// buffer allocated at its final size.
fn in_pieces<M: Encodable>(
    header: &ResponseHeader,
    header_version: i16,
    resp: &M,
    version: i16,
    shared: &[Shared<Piece>],
) -> anyhow::Result<OutFrame> {
    Ok(OutFrame { pieces: encode_frame(header, header_version, resp, version, shared)? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::FetchResponse;

    fn one_buffer(key: ApiKey, version: i16, resp: &ResponseKind) -> Vec<u8> {
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        let header = ResponseHeader::default().with_correlation_id(7);
        header.encode(&mut buf, key.response_header_version(version)).expect("header");
        resp.encode(&mut buf, version).expect("body");
        let len = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&len.to_be_bytes());
        buf.to_vec()
    }

    #[test]
    fn records_go_out_as_their_own_pieces_and_the_frame_is_the_same() {
        let big = Bytes::from(vec![7u8; 10_000]);
        let small = Bytes::from(vec![3u8; 100]);
        let parts = [Some(big.clone()), Some(small), None, Some(big.clone())]
            .into_iter()
            .enumerate()
            .map(|(i, r)| PartitionData::default().with_partition_index(i as i32).with_records(r))
            .collect();
        let resp: ResponseKind = FetchResponse::default()
            .with_responses(vec![FetchableTopicResponse::default().with_partitions(parts)])
            .into();
        for version in [4, 12, 16] {
            let frame = encode_response(ApiKey::Fetch, version, 7, &resp, Vec::new()).expect("encodes");
            let shared = frame.pieces().iter().filter(|p| matches!(p, Piece::Bytes(b) if b.as_ptr() == big.as_ptr()));
            assert_eq!(shared.count(), 2, "both big records are shared, not copied (v{version})");
            // Head, records, middle, records, and in flexible versions the tagged fields after.
            let tail = usize::from(version >= 12);
            assert_eq!(frame.pieces().len(), 4 + tail, "v{version}");
            assert_eq!(frame.into_bytes().expect("in memory").to_vec(), one_buffer(ApiKey::Fetch, version, &resp));
        }
    }

    #[test]
    fn a_response_without_records_is_one_piece() {
        let resp: ResponseKind = FetchResponse::default().with_throttle_time_ms(5).into();
        let frame = encode_response(ApiKey::Fetch, 12, 7, &resp, Vec::new()).expect("encodes");
        assert_eq!(frame.pieces().len(), 1);
        assert_eq!(frame.into_bytes().expect("in memory").to_vec(), one_buffer(ApiKey::Fetch, 12, &resp));
    }

    fn fetch_of(records: Vec<Option<Bytes>>) -> ResponseKind {
        let parts = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| PartitionData::default().with_partition_index(i as i32).with_records(r))
            .collect();
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default().with_partitions(parts)]).into()
    }

    #[test]
    fn stand_ins_become_the_file_slices_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000000.log");
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 241) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let file = std::sync::Arc::new(std::fs::File::open(&path).expect("open"));
        // Two slices of the same length: only their order tells them apart.
        let slice = |pos: u64| FileSlice { file: file.clone(), pos, len: 10_000, next_offset: 0 };
        let hole = || crate::sendfile::placeholder(10_000).expect("stand-in");
        let memory = Bytes::from(vec![9u8; 6_000]);
        let with_holes = fetch_of(vec![Some(hole()), Some(memory.clone()), Some(hole())]);
        let real = fetch_of(vec![
            Some(Bytes::copy_from_slice(&data[30_000..40_000])),
            Some(memory),
            Some(Bytes::copy_from_slice(&data[5_000..15_000])),
        ]);
        let frame =
            encode_response(ApiKey::Fetch, 12, 7, &with_holes, vec![slice(30_000), slice(5_000)]).expect("encodes");
        let files: Vec<u64> =
            frame.pieces().iter().filter_map(|p| if let Piece::File(f) = p { Some(f.pos) } else { None }).collect();
        assert_eq!(files, vec![30_000, 5_000]);
        assert_eq!(frame.into_bytes().expect("read back").to_vec(), one_buffer(ApiKey::Fetch, 12, &real));
        // Stand-ins and slices that do not pair up are refused, never sent as zeros.
        assert!(encode_response(ApiKey::Fetch, 12, 7, &with_holes, vec![slice(0)]).is_none());
        assert!(encode_response(ApiKey::Fetch, 12, 7, &with_holes, vec![slice(0), slice(0), slice(0)]).is_none());
        let short = FileSlice { len: 9_999, ..slice(0) };
        assert!(encode_response(ApiKey::Fetch, 12, 7, &with_holes, vec![slice(0), short]).is_none());
        let metadata: ResponseKind = kafka_protocol::messages::MetadataResponse::default().into();
        assert!(encode_response(ApiKey::Metadata, 12, 7, &metadata, vec![slice(0)]).is_none());
    }
}
