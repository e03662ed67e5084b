//! The group coordinator's records in `__consumer_offsets`
//! (`crates/coordinator/src/records.rs`), read back as a coordinator does when it takes a
//! partition over: `Coordinator::load_partition` replays them (offset commits, classic
//! group metadata, KIP-848 groups and members; tombstones), then every group is listed,
//! described and its offsets fetched, and offsets retention runs over what was read.
//!
//! First byte, bit 0 clear: the rest is the partition's log (batches), read as
//! `crates/broker/src/offsets_log.rs` `read_all` does (Raft's control batches skipped, each
//! batch decoded by `kafka-protocol`, keyed records kept; records of transactions held
//! until their marker, dropped by an abort, left open at the end), with CRCs recomputed
//! first. Bit 0 set: the rest is (u32 key length, key, i32 value length or -1, value)
//! pairs, quicker for the fuzzer to mutate; bit 1 then makes them the records of an open
//! transaction instead.
#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use libfuzzer_sys::fuzz_target;
use runnel_coordinator::{Coordinator, CoordinatorConfig, GroupLog, LogFuture, Replay};
use runnel_wire::marker::txn_end;
use runnel_wire::{Batches, TxnEnd};

type Pairs = Vec<(Bytes, Option<Bytes>)>;

/// A one-partition offsets log that holds the fuzz input.
struct Fixed(Pairs, Vec<(i64, Pairs)>);

impl GroupLog for Fixed {
    fn partitions(&self) -> i32 {
        1
    }
    fn append(&self, _: i32, _: Pairs) -> LogFuture {
        Box::pin(async { Ok(()) })
    }
    fn append_txn(&self, _: i32, _: i64, _: i16, _: Pairs) -> LogFuture {
        Box::pin(async { Ok(()) })
    }
    fn read_all(&self, _: i32) -> Result<Replay, String> {
        Ok(Replay { records: self.0.clone(), open: self.1.clone() })
    }
    fn leads(&self, _: i32) -> bool {
        true
    }
}

/// `InternalLog::read_all` on a log's bytes.
fn read_log(bytes: &[u8]) -> (Pairs, Vec<(i64, Pairs)>) {
    let mut out = Vec::new();
    let mut open: std::collections::HashMap<i64, Pairs> = Default::default();
    for item in Batches::new(bytes) {
        let Ok((h, range)) = item else { break };
        if h.is_control() {
            if let (Some(end), Some(records)) = (txn_end(&h, &bytes[range]), open.remove(&h.producer_id)) {
                if end == TxnEnd::Commit {
                    out.extend(records);
                }
            }
            continue;
        }
        let Ok(set) = RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(&bytes[range])) else { break };
        let records = set.records.into_iter().filter_map(|r| r.key.map(|k| (k, r.value)));
        if h.is_transactional() {
            open.entry(h.producer_id).or_default().extend(records);
        } else {
            out.extend(records);
        }
    }
    (out, open.into_iter().collect())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (pairs, open) = match mode & 3 {
        1 => (runnel_fuzz::pairs(Bytes::copy_from_slice(rest)), Vec::new()),
        3 => (Vec::new(), vec![(7, runnel_fuzz::pairs(Bytes::copy_from_slice(rest)))]),
        _ => {
            let mut log = rest.to_vec();
            runnel_fuzz::fix_crcs(&mut log);
            read_log(&log)
        }
    };
    let c = Coordinator::new(Arc::new(Fixed(pairs, open)), CoordinatorConfig::default());
    let _ = c.load_partition(0);
    for g in c.list() {
        let _ = c.describe(&g.group_id);
        let _ = c.describe_consumer(&g.group_id);
        let _ = c.fetch(&g.group_id, None);
        let _ = c.unstable(&g.group_id, &[("t".to_string(), 0)]);
    }
    c.complete_txn(0, 7, true);
    // Retention over the commit timestamps just read (KIP-211).
    runtime().block_on(c.expire_offsets());
});

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}
