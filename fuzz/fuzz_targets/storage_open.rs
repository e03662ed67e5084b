//! A partition's directory as the storage crate finds it on open after a crash: the
//! `checkpoint` file and segment files, recovered by `Log::open` (checkpoint parsing,
//! segment scan from the recovery point with CRC checks, torn-tail truncation, overlapping
//! segments, the offset and time indexes rebuilt, producer state rebuilt), then used: reads
//! of every batch, lookups by timestamp, retention, a compaction pass (`CleanPlan::execute`
//! and `clean_swap`, which decompress and frame every record), an append, a clean close and
//! a second open that must need no recovery and agree on the log end.
//!
//! Input: a first byte of flags (bit 0: recompute batch CRCs; bit 1: the topic is
//! compacted), then files separated by `runnel_fuzz::SEPARATOR`: the checkpoint (not
//! written when empty), then segments, each starting with its 8-byte base offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_storage::{Log, LogConfig};
use runnel_wire::Batches;

const NOW: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let files = runnel_fuzz::files(rest);
    let dir = runnel_fuzz::scratch_dir();
    if !files[0].is_empty() {
        std::fs::write(dir.path().join("checkpoint"), files[0]).expect("write checkpoint");
    }
    runnel_fuzz::write_segments(dir.path(), &files[1..], flags & 1 != 0);
    let config = LogConfig {
        compact: flags & 2 != 0,
        min_cleanable_dirty_ratio: 0.0,
        segment_bytes: 1 << 16,
        retention_ms: 3_600_000,
        ..LogConfig::default()
    };
    let Ok(mut log) = Log::open(dir.path(), config, NOW) else { return };
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(start <= end, "log start {start} past the log end {end}");

    // Every batch from the start, as fetches read them.
    let mut offset = start;
    let mut boundaries = Vec::new();
    for _ in 0..256 {
        if offset >= end {
            break;
        }
        let Ok(plan) = log.read(offset, 1 << 16, end, true) else { break };
        let Ok(bytes) = plan.execute() else { break };
        let mut moved = false;
        for item in Batches::new(&bytes) {
            let Ok((h, _)) = item else { break };
            if h.next_offset() > offset {
                boundaries.push(h.base_offset);
                offset = h.next_offset();
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    for ts in [-1, 0, NOW, i64::MAX] {
        let _ = log.batch_for_timestamp(ts);
    }
    let _ = log.batch_with_max_timestamp();
    let _ = log.read_range(log.first_batch_offset(), end, 1 << 16);

    // Compaction over what was recovered.
    if let Some(plan) = log.clean_plan(end, NOW) {
        if let Ok(cleaned) = plan.execute(NOW) {
            let _ = log.clean_swap(cleaned, NOW);
        }
    }
    let _ = log.retention_point(NOW);

    // Raft cutting the log back at a batch boundary, then a write.
    if let Some(&cut) = boundaries.get(boundaries.len() / 2).filter(|_| boundaries.len() > 1) {
        if log.truncate_from(cut, NOW).is_err() {
            return;
        }
    }
    let (batch, h) = runnel_fuzz::small_batch();
    if log.append(&batch, &h, NOW).is_err() {
        return;
    }
    let end = log.log_end_offset();
    if log.close().is_err() {
        return;
    }
    drop(log);
    let again = Log::open(dir.path(), config, NOW).expect("a cleanly closed log opens again");
    assert_eq!(again.log_end_offset(), end, "a cleanly closed log keeps its end");
});
