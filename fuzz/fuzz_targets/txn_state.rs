//! Transactions' state as read from disk. First byte, bit 0 clear: the rest is
//! `__transaction_state` records, (u32 key length, key, i32 value length or -1, value)
//! pairs (`crates/txn/src/records.rs`), loaded as a transaction coordinator taking the
//! partition over does (`TxnCoordinator::load_partition`), then every id is listed and
//! described, the endings under way resumed and the timeouts run. Bit 0 set: the rest is a
//! producer snapshot (`producers.snapshot`, or the producers section of a Raft snapshot),
//! loaded into a producer table (`ProducerTable::load`), which must encode back to what
//! loads the same.
#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use runnel_coordinator::{GroupLog, LogFuture, Replay};
use runnel_storage::ProducerTable;
use runnel_txn::{BoxFuture, MarkerWrite, TxnConfig, TxnCoordinator, TxnHost};

type Pairs = Vec<(Bytes, Option<Bytes>)>;

/// A one-partition transaction log that holds the fuzz input.
struct Fixed(Pairs);

impl GroupLog for Fixed {
    fn partitions(&self) -> i32 {
        1
    }
    fn append(&self, _: i32, _: Pairs) -> LogFuture {
        Box::pin(async { Ok(()) })
    }
    fn append_txn(&self, _: i32, _: i64, _: i16, _: Pairs) -> LogFuture {
        Box::pin(async { Err("no transactional records here".into()) })
    }
    fn read_all(&self, _: i32) -> Result<Replay, String> {
        Ok(Replay { records: self.0.clone(), open: Vec::new() })
    }
    fn leads(&self, _: i32) -> bool {
        true
    }
}

/// Markers always land; producer ids count up.
struct Host;

impl TxnHost for Host {
    fn write_markers(&self, _: MarkerWrite) -> BoxFuture<Vec<((String, i32), String)>> {
        Box::pin(async { Vec::new() })
    }
    fn allocate_producer_id(&self) -> BoxFuture<Result<i64, String>> {
        Box::pin(async { Ok(1) })
    }
    fn coordinator_epoch(&self, _: i32) -> Option<i32> {
        Some(1)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 1 {
        let mut table = ProducerTable::default();
        if table.load(rest).is_ok() {
            let again = table.encode_below(i64::MAX);
            let mut copy = ProducerTable::default();
            copy.load(&again).expect("a table's own encoding loads");
            assert_eq!(copy.encode_below(i64::MAX).len(), again.len());
        }
        return;
    }
    let pairs = runnel_fuzz::pairs(Bytes::copy_from_slice(rest));
    let c = Arc::new(TxnCoordinator::new(Arc::new(Fixed(pairs)), Arc::new(Host), TxnConfig::default()));
    if c.load_partition(0).is_err() {
        return;
    }
    runtime().block_on(async {
        c.resume(0);
        for t in c.list(&[], &[]) {
            let _ = c.describe(&t.transactional_id);
            let _ = c.verify(&t.transactional_id, t.producer_id, 0, &("t".to_string(), 0));
        }
        c.expire(true).await;
        tokio::task::yield_now().await;
    });
});

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}
