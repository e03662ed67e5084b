//! What the fuzz targets share (docs/fuzzing.md): a broker started once per process and
//! the API table it serves, a fix-up of batch CRCs so that mutations get past the
//! checksum, the container format of targets whose input is several files, and scratch
//! directories on tmpfs.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use runnel_broker::{connection::handle_frame, Broker, BrokerConfig, Settings};

/// Separates the files of a multi-file input (segments; a state file and a segment).
pub const SEPARATOR: &[u8] = b"\n--runnel-fuzz-file--\n";

/// Splits a multi-file input at [`SEPARATOR`].
pub fn files(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
        out.push(&rest[..at]);
        rest = &rest[at + SEPARATOR.len()..];
    }
    out.push(rest);
    out
}

/// Recomputes the CRC-32C of every whole magic-2 batch in `buf`, from the start up to the
/// first one that does not fit: a mutation then reaches the code behind the checksum
/// instead of stopping at it, as a bug that writes a bad batch with a good CRC would.
pub fn fix_crcs(buf: &mut [u8]) {
    let mut pos = 0usize;
    while buf.len() - pos >= runnel_wire::batch::HEADER_BYTES {
        let len = i32::from_be_bytes([buf[pos + 8], buf[pos + 9], buf[pos + 10], buf[pos + 11]]);
        if len < 49 || len as usize > buf.len() - pos - 12 {
            return;
        }
        let end = pos + 12 + len as usize;
        if buf[pos + 16] == 2 {
            let crc = crc32c::crc32c(&buf[pos + 21..end]);
            buf[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        }
        pos = end;
    }
}

/// A scratch directory, on tmpfs when there is one (a target that writes files runs
/// thousands of times a second).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("runnel-fuzz-").tempdir_in(shm);
    builder.or_else(|_| tempfile::tempdir()).expect("scratch directory")
}

/// A broker in a scratch directory, started once per fuzzing process, and the runtime it
/// runs on. State carries over from one input to the next, as on a real connection.
pub struct BrokerHarness {
    pub rt: tokio::runtime::Runtime,
    pub broker: Arc<Broker>,
    /// How long one request may take before the harness drops it (as a client that closes
    /// its connection would): long polls and rebalances would otherwise set the pace.
    pub request_timeout: Duration,
    _dir: tempfile::TempDir,
}

pub const PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 50_000));

pub fn broker() -> &'static BrokerHarness {
    static HARNESS: OnceLock<BrokerHarness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let dir = scratch_dir();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let mut s = Settings::default();
        for (k, v) in [
            ("log.dirs", dir.path().to_string_lossy().as_ref()),
            ("log.fsync.policy", "never"),
            // Each replica holds open files: stay inside the descriptor limit however many
            // topics the inputs create.
            ("max.broker.partitions", "64"),
            ("offsets.topic.num.partitions", "1"),
            ("group.initial.rebalance.delay.ms", "0"),
        ] {
            s.set(k, v).expect("setting");
        }
        let config = BrokerConfig::from_settings(s).expect("config");
        let broker = rt.block_on(Broker::start(config)).expect("broker start");
        let ms = std::env::var("RUNNEL_FUZZ_REQUEST_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
        BrokerHarness { rt, broker, request_timeout: Duration::from_millis(ms), _dir: dir }
    })
}

impl BrokerHarness {
    /// Hands one request frame (no size prefix) to the broker as a connection would. The
    /// reply, if any came in time, must be a well-formed response frame.
    pub fn request(&self, frame: Bytes) -> Option<Result<Option<Bytes>, String>> {
        let b = self.broker.clone();
        let out = self
            .rt
            .block_on(async { tokio::time::timeout(self.request_timeout, handle_frame(&b, frame, PEER)).await.ok() });
        if let Some(Ok(Some(resp))) = &out {
            assert!(resp.len() >= 8, "a response frame holds a size and a correlation id");
            let len = i32::from_be_bytes([resp[0], resp[1], resp[2], resp[3]]);
            assert_eq!(len as usize, resp.len() - 4, "the size prefix counts the rest of the frame");
        }
        out
    }
}

/// An ApiVersions v3 request frame.
pub fn api_versions_frame() -> Bytes {
    let mut frame = BytesMut::new();
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(3)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    header.encode(&mut frame, ApiKey::ApiVersions.request_header_version(3)).expect("header");
    ApiVersionsRequest::default().encode(&mut frame, 3).expect("body");
    frame.freeze()
}

impl BrokerHarness {
    /// Whether the broker still answers ApiVersions within five seconds: hostile input
    /// must not wedge it (a deadlock, a stopped task) any more than crash it.
    pub fn answers(&self) -> bool {
        let b = self.broker.clone();
        let out = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), handle_frame(&b, api_versions_frame(), PEER)).await
        });
        matches!(out, Ok(Ok(Some(_))))
    }
}

/// (API, min version, max version) as the broker reports them in ApiVersions: the versions
/// the connection decodes (`crates/broker/src/dispatch.rs`).
pub fn api_table() -> &'static [(ApiKey, i16, i16)] {
    static TABLE: OnceLock<Vec<(ApiKey, i16, i16)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let h = broker();
        let resp = h.request(api_versions_frame()).expect("answered in time").expect("answered").expect("a response");
        // Size, then a v0 response header (the correlation id), then the body.
        let mut body = resp.slice(8..);
        let r = ApiVersionsResponse::decode(&mut body, 3).expect("ApiVersions response");
        let table: Vec<_> = r
            .api_keys
            .iter()
            .filter_map(|k| Some((ApiKey::try_from(k.api_key).ok()?, k.min_version, k.max_version)))
            .collect();
        assert!(table.len() > 20, "the broker serves its API table: {table:?}");
        table
    })
}

/// Whether the broker decodes this API at this version (else it closes the connection, or
/// answers an unknown ApiVersions version with its v0 fallback).
pub fn supported(key: ApiKey, version: i16) -> bool {
    api_table().iter().any(|(k, min, max)| *k == key && (*min..=*max).contains(&version))
}

/// Reads the `offsets_records` target's `(u32 key length, key, i32 value length or -1,
/// value)` pairs; stops at the first that does not fit.
pub fn pairs(mut b: Bytes) -> Vec<(Bytes, Option<Bytes>)> {
    let mut out = Vec::new();
    while b.remaining() >= 8 {
        let klen = b.get_u32() as usize;
        if klen > b.remaining() {
            break;
        }
        let key = b.split_to(klen);
        if b.remaining() < 4 {
            break;
        }
        let vlen = b.get_i32();
        let value = if vlen < 0 {
            None
        } else if vlen as usize <= b.remaining() {
            Some(b.split_to(vlen as usize))
        } else {
            break;
        };
        out.push((key, value));
    }
    out
}

// The controller's records, its image and the effects it computes, compiled from the
// controller's own sources: they are private to `runnel-controller`, and the fuzz targets
// must decode and apply exactly what it does.
#[allow(dead_code, unused_imports)]
#[path = "../../crates/controller/src/host.rs"]
mod host;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/controller/src/image.rs"]
mod image;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/controller/src/records.rs"]
mod records;

/// The controller's metadata image, fed records as its apply task feeds them.
#[derive(Default)]
pub struct MetadataImage(image::Image);

impl MetadataImage {
    /// One metadata record value (JSON), as `Controller::apply_entries` handles it: decode,
    /// compute this broker's effect on the image before it, then apply. Returns whether it
    /// decoded.
    pub fn apply_json(&mut self, value: &[u8], me: i32) -> bool {
        let Ok(rec) = serde_json::from_slice::<records::Record>(value) else { return false };
        let effect = self.0.effect_of(&rec, me);
        let _ = format!("{effect:?}");
        self.0.apply(rec);
        let _ = self.0.live();
        for t in self.0.topics.values() {
            let _ = (t.partitions(), t.rf);
        }
        for m in self.0.moving.values() {
            let _ = m.listed();
        }
        true
    }
}

/// A message on the controller's channel of the Raft transport, decoded as its inbox
/// loop does; a `Register` message's broker also goes through `rack()`.
pub fn controller_message(json: &[u8]) -> bool {
    match serde_json::from_slice::<records::Message>(json) {
        Ok(records::Message::Register(info)) => {
            let _ = info.rack();
            true
        }
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The first byte of a forwarded message on the Raft transport naming the controller's
/// channel (`runnel_controller::CONTROLLER_CHANNEL`).
pub const CONTROLLER_CHANNEL: u8 = b'C';

/// Writes the segment files of a multi-file input into `dir`: each file starts with its
/// base offset (8 bytes, big-endian), which names it (`{base:020}.log`); the rest is the
/// segment. Returns how many were written.
pub fn write_segments(dir: &std::path::Path, files: &[&[u8]], fix: bool) -> usize {
    let mut n = 0;
    for f in files {
        let Some((name, body)) = f.split_first_chunk::<8>() else { continue };
        let base = i64::from_be_bytes(*name);
        let mut body = body.to_vec();
        if fix {
            fix_crcs(&mut body);
        }
        if std::fs::write(dir.join(format!("{base:020}.log")), body).is_ok() {
            n += 1;
        }
    }
    n
}

/// A small valid batch: what the storage targets append after recovery.
pub fn small_batch() -> (Vec<u8>, runnel_wire::BatchHeader) {
    let mut b = runnel_wire::build::BatchBuilder::new(1_700_000_000_000);
    b.push(1_700_000_000_000, Some(b"k"), Some(b"v"));
    let bytes = b.finish(runnel_wire::build::CODEC_NONE, runnel_wire::build::ProducerFields::NONE).expect("batch");
    let h = runnel_wire::BatchHeader::validate_for_append(&bytes).expect("valid");
    (bytes, h)
}
