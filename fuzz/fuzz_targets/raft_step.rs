//! Messages from a Raft peer handed to a replica, as the driver does with what the
//! transport reads: the input is one transport frame (`decode_frame`), every message in it
//! is stepped into a fresh replica (Raft id 2 of voters 1, 2, 3) in a scratch directory,
//! and the driver's rounds follow (`Replica::collect` writes entries and snapshots to the
//! Kafka log, `persisted` after the sync). That covers what a peer's bytes reach past the
//! decoder: raft-rs's step, entries becoming batches (`RaftLog::append`), snapshot data
//! (`decode_snapshot`, `Log::restore`), configuration changes and DeleteRecords entries.
//! A message's group id picks the replica kind: odd ids deliver committed entries (the
//! metadata group), even ones do not (a partition).
//!
//! raft-rs assumes its peers are correct and panics on messages no correct peer sends;
//! `Replica::step` refuses those first (crates/raft/tests/hostile_peer.rs lists what this
//! target found).
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_raft::transport::decode_frame;
use runnel_raft::{Replica, ReplicaConfig};
use runnel_storage::LogConfig;

const ME: u64 = 2;

fuzz_target!(|data: &[u8]| {
    let mut messages = Vec::new();
    let _ = decode_frame(&bytes::Bytes::copy_from_slice(data), |envelope| messages.push(envelope));
    if messages.is_empty() || messages.len() > 64 {
        return;
    }
    let dir = runnel_fuzz::scratch_dir();
    let mut cfg = ReplicaConfig::new(ME, vec![1, 2, 3]);
    cfg.deliver_committed = messages[0].0 & 1 == 1;
    let now = 1_700_000_000_000;
    let mut replica = Replica::open(dir.path(), LogConfig::default(), &cfg, now).expect("a new replica opens");
    for (_, mut m) in messages {
        // The driver routes by group and the transport by `to`: whatever arrives here is
        // for this replica.
        m.to = ME;
        let _ = replica.step(m);
        let mut out = Vec::new();
        for _ in 0..4 {
            match replica.collect(now, &mut out) {
                Ok(Some(c)) => {
                    let _ = replica.persisted(c, &mut out);
                }
                Ok(None) => break,
                Err(_) => break,
            }
        }
        let _ = replica.take_applied();
        let _ = (replica.high_watermark(), replica.committed_index(), replica.leader());
    }
    let _ = replica.close();
});
