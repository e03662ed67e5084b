//! One frame from a Raft peer (the bytes after its u32 length), as the transport's reader
//! splits it (`runnel_raft::transport::decode_frame`: group id, length, protobuf
//! `eraftpb::Message`, repeated), then what the receiving side decodes from each message:
//! a forwarded message (the pseudo group `FORWARD_GROUP`) on the controller's channel is a
//! JSON controller message (`crates/controller/src/records.rs` `Message`, `Call`); a Raft
//! message's snapshot data and entries are what `raft_step` feeds a replica.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protobuf::Message as _;
use runnel_raft::driver::FORWARD_GROUP;
use runnel_raft::transport::decode_frame;

fuzz_target!(|data: &[u8]| {
    let mut messages = Vec::new();
    let _ = decode_frame(&bytes::Bytes::copy_from_slice(data), |envelope| messages.push(envelope));
    for (group, m) in messages {
        // A decoded message can be encoded again (the driver re-sends what it steps). No
        // round-trip equality: rust-protobuf keeps unknown fields and field presence that
        // a re-encoding does not reproduce byte for byte, and nothing here relies on it.
        let _ = m.write_to_bytes().expect("a decoded message encodes");
        if group == FORWARD_GROUP {
            if let Some((&runnel_fuzz::CONTROLLER_CHANNEL, json)) = m.context.split_first() {
                runnel_fuzz::controller_message(json);
            }
        }
    }
});
