//! Group commit: one task fsyncs, for every request that arrived while the previous round
//! ran, each touched partition's active segment once; then it moves those partitions' high
//! watermarks and answers the waiting acks=all requests. Under load one round covers many
//! requests and many partitions, so the fsync cost is shared.
//!
//! With `log.fsync.scope=filesystem` (the default) a round that touched two or more files
//! issues one `syncfs` instead: it writes back every dirty page of the filesystem and
//! commits the journal once, where an fdatasync per file commits it once per file. Since
//! Linux 5.8 syncfs reports writeback errors like fsync does.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Notify};
use tracing::error;

use crate::partition::Partition;

/// Bound on queued flush requests; producers wait (backpressure) when it is full.
pub const FLUSH_QUEUE_MAX: usize = 4096;

pub struct FlushRequest {
    /// (partition, log end offset right after this request's append).
    pub items: Vec<(Arc<Partition>, i64)>,
    pub done: Option<oneshot::Sender<Result<(), String>>>,
}

#[derive(Clone)]
pub struct Flusher {
    tx: mpsc::Sender<FlushRequest>,
}

impl Flusher {
    pub fn start(data_arrived: Arc<Notify>, syncfs: bool) -> Flusher {
        let (tx, rx) = mpsc::channel(FLUSH_QUEUE_MAX);
        tokio::spawn(run(rx, data_arrived, syncfs));
        Flusher { tx }
    }

    /// Queues a flush; resolves when the data is durable (or the flush failed).
    pub async fn flush(&self, items: Vec<(Arc<Partition>, i64)>) -> Result<(), String> {
        let (done, rx) = oneshot::channel();
        self.tx
            .send(FlushRequest { items, done: Some(done) })
            .await
            .map_err(|_| "broker is shutting down".to_string())?;
        rx.await.map_err(|_| "broker is shutting down".to_string())?
    }

    /// Queues a flush nobody waits for (acks=0/1): it still moves the high watermark.
    pub async fn flush_in_background(&self, items: Vec<(Arc<Partition>, i64)>) {
        let _ = self.tx.send(FlushRequest { items, done: None }).await;
    }
}

async fn run(mut rx: mpsc::Receiver<FlushRequest>, data_arrived: Arc<Notify>, syncfs: bool) {
    let mut round = Vec::new();
    while rx.recv_many(&mut round, FLUSH_QUEUE_MAX).await > 0 {
        let mut upto: HashMap<usize, (Arc<Partition>, i64)> = HashMap::new();
        for req in &round {
            for (p, off) in &req.items {
                let e = upto.entry(Arc::as_ptr(p) as usize).or_insert_with(|| (p.clone(), *off));
                e.1 = e.1.max(*off);
            }
        }
        let targets: Vec<(Arc<Partition>, i64)> = upto.into_values().collect();
        let files: Vec<_> = targets.iter().filter_map(|(p, _)| Some(p.local_log()?.sync_handle())).collect();
        let synced = tokio::task::spawn_blocking(move || runnel_storage::sync_files(&files, syncfs)).await;
        let result = match synced {
            Ok(Ok(())) => {
                for (p, off) in &targets {
                    p.advance_high_watermark(*off);
                }
                data_arrived.notify_waiters();
                Ok(())
            }
            Ok(Err(e)) => {
                // The write's fate is unknown: the client must treat it as failed.
                error!(error = %e, "fsync failed");
                Err(format!("fsync failed: {e}"))
            }
            Err(e) => Err(format!("fsync task failed: {e}")),
        };
        for req in round.drain(..) {
            if let Some(done) = req.done {
                let _ = done.send(result.clone());
            }
        }
    }
}
