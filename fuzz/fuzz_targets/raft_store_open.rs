//! A replica's directory as the Raft store finds it on open (`crates/raft/src/store.rs`):
//! its `raft.state` (term, vote, commit, snapshot point, configurations), the log's
//! checkpoint and segments. `RaftLog::open` parses the state and rebuilds the entry index
//! from the batches that survive recovery; then raft-rs's `Storage` calls read it back
//! (terms, entries as Raft entries, including control batches decoded as Raft's own,
//! snapshots with the cleaned prefix), it closes and opens again to the same state, and a
//! replica (`Replica::open`, raft-rs's `RawNode`) starts on it.
//!
//! Input: a first byte of flags (bit 0: recompute batch CRCs), then files separated by
//! `runnel_fuzz::SEPARATOR`: `raft.state`, `checkpoint` (each not written when empty),
//! then segments, each starting with its 8-byte base offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raft::{GetEntriesContext, Storage};
use runnel_raft::{RaftLog, Replica, ReplicaConfig};
use runnel_storage::LogConfig;

const NOW: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let files = runnel_fuzz::files(rest);
    if files.len() < 2 {
        return;
    }
    let dir = runnel_fuzz::scratch_dir();
    for (name, body) in [("raft.state", files[0]), ("checkpoint", files[1])] {
        if !body.is_empty() {
            std::fs::write(dir.path().join(name), body).expect("write");
        }
    }
    runnel_fuzz::write_segments(dir.path(), &files[2..], flags & 1 != 0);
    let config = LogConfig::default();
    let Ok(mut store) = RaftLog::open(dir.path(), config, &[1], NOW) else { return };
    let (first, last) = (store.first(), store.last());
    assert!(first <= last + 1, "first index {first} past last {last} + 1");
    for i in first.saturating_sub(1)..=last.min(first.saturating_add(64)) {
        let _ = store.term(i);
        let _ = store.offset_of(i);
        let _ = store.end_offset_of(i);
    }
    if first <= last {
        let high = last.min(first.saturating_add(64)) + 1;
        let _ = store.entries(first, high, Some(1 << 20), GetEntriesContext::empty(false));
    }
    let _ = store.snapshot(first - 1, 0);
    for epoch in [0, 1, u64::MAX] {
        let _ = store.end_offset_for_epoch(epoch);
    }
    let _ = store.index_of(store.log().log_start_offset());
    let hard = store.hard_state().clone();
    if store.close().is_err() {
        return;
    }
    drop(store);
    let again = RaftLog::open(dir.path(), config, &[1], NOW).expect("a cleanly closed store opens again");
    assert_eq!((again.first(), again.last()), (first, last), "reopening keeps the entries");
    assert_eq!(again.hard_state().term, hard.term);
    let voters = again.conf_state().voters.clone();
    drop(again);
    let id = voters.first().copied().unwrap_or(1);
    let _ = Replica::open(dir.path(), config, &ReplicaConfig::new(id, voters), NOW);
});
