//! The controller's metadata records and messages (`crates/controller/src/records.rs`),
//! decoded and applied as the controller does, on its own image code
//! (`crates/controller/src/image.rs`, compiled into the fuzz crate).
//!
//! First byte, bit 0 clear: the rest is metadata-log entry data, as
//! `Controller::apply_entries` reads it (batches, each record's value a JSON `Record`;
//! CRCs recomputed first when bit 1 is set). Bit 0 set: the rest is newline-separated JSON
//! documents, each applied as a `Record` and decoded as a controller `Message` (what peers
//! send on the controller's channel): quicker for the fuzzer to mutate than JSON inside
//! varint-framed records.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_wire::Batches;

/// The broker the image is computed for (its effects differ for replicas it hosts).
const ME: i32 = 1;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut image = runnel_fuzz::MetadataImage::default();
    if mode & 1 == 1 {
        for doc in rest.split(|b| *b == b'\n') {
            image.apply_json(doc, ME);
            runnel_fuzz::controller_message(doc);
        }
        return;
    }
    let mut entry = rest.to_vec();
    if mode & 2 == 2 {
        runnel_fuzz::fix_crcs(&mut entry);
    }
    for item in Batches::new(&entry) {
        let Ok((h, range)) = item else { break };
        let Ok(records) = runnel_storage::records_of(&h, &entry[range]) else { continue };
        for r in records.iter() {
            if let Some(value) = r.value {
                image.apply_json(value, ME);
            }
        }
    }
});
