//! One Kafka request frame (the bytes after its size prefix), decoded as the broker's
//! connection does before dispatching it (`crates/broker/src/connection.rs` `decode`): the
//! fixed header fields, the API table check (the versions the broker serves, read from its
//! own ApiVersions answer), then the request header and body at that version with the
//! vendored `kafka-protocol` decoders. Decode only: fast, so it goes deep into the codecs;
//! `broker_request` runs the handlers too.
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        runnel_fuzz::api_table();
    },
    |data: &[u8]| {
        if data.len() < 8 {
            return;
        }
        let key = i16::from_be_bytes([data[0], data[1]]);
        let version = i16::from_be_bytes([data[2], data[3]]);
        let Ok(key) = ApiKey::try_from(key) else { return };
        if !runnel_fuzz::supported(key, version) {
            return;
        }
        let mut frame = Bytes::copy_from_slice(data);
        let Ok(header) = RequestHeader::decode(&mut frame, key.request_header_version(version)) else { return };
        assert_eq!((header.request_api_key, header.request_api_version), (key as i16, version));
        // Trailing bytes are allowed (the broker logs them), so only the decode matters.
        let _ = RequestKind::decode(key, &mut frame, version);
    }
);
