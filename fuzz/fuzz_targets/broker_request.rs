//! One Kafka request frame (the bytes after its size prefix) handed to a real broker in a
//! scratch directory through `runnel_broker::connection::handle_frame`, the entry point a
//! socket's frames take: header and body decoding, the API table, every handler, the
//! partition logs, Raft (a cluster of one), the controller and the group coordinator.
//! The broker lives for the whole fuzzing process, so state carries over between inputs
//! as it does between requests on a real broker. A reply must be a well-formed frame; a
//! panic on any thread aborts (libfuzzer-sys's panic hook), so background tasks count too;
//! and every 1024 inputs the broker must still answer ApiVersions within five seconds.
//! Since state carries over, a crash may need the inputs before it: replay the corpus and
//! the artifact in one process (`broker_request CORPUS_DIR/* ARTIFACT` runs them in order).
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        // Starts the broker and checks it answers ApiVersions.
        runnel_fuzz::api_table();
    },
    |data: &[u8]| {
        static INPUTS: AtomicU64 = AtomicU64::new(0);
        let h = runnel_fuzz::broker();
        let _ = h.request(Bytes::copy_from_slice(data));
        // Every so often: the broker still answers (no input wedged it).
        if INPUTS.fetch_add(1, Ordering::Relaxed) % 1024 == 1023 {
            assert!(h.answers(), "the broker stopped answering ApiVersions");
        }
    }
);
