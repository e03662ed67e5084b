//! Reads of partition logs that might wait for the disk, kept off the runtime's threads.
//!
//! A fetch at the log's tail reads pages the broker has just written and synced: they are in
//! the page cache, and reading them (or handing them to the socket with `sendfile`) on a
//! runtime thread costs a copy, never a wait. A fetch behind the tail (its first batch is
//! found by reading batch headers from the file), or one whose pages have left the page cache
//! (`log.cache.tail.bytes`, or the kernel's reclaim), may wait for the disk: such a read runs
//! on Tokio's blocking pool, at most `num.io.threads` at a time (Kafka's name for the threads
//! that do its requests' disk I/O), and the others wait their turn without holding a thread.

use std::io;

use runnel_metrics::DiskRead;
use runnel_storage::{ReadPlan, Span};
use tokio::sync::Semaphore;

/// The permits for reads that might wait for the disk.
pub struct DiskReads {
    permits: Semaphore,
}

impl DiskReads {
    /// At most `most` reads at a time (at least one).
    pub fn new(most: usize) -> DiskReads {
        DiskReads { permits: Semaphore::new(most.max(1)) }
    }

    /// Carries out `plan` with `read`, which is told whether the span's pages are all in
    /// the page cache (or the kernel cannot tell): here when the plan knows its first batch
    /// and its pages are cached, else on the blocking pool.
    pub async fn read<T: Send + 'static>(
        &self,
        plan: ReadPlan,
        read: impl FnOnce(Span, bool) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        if !plan.seeks() {
            // The plan knows its first batch: finding the span reads nothing.
            let span = plan.find()?;
            if span.cached() != Some(false) {
                return read(span, true);
            }
            return self.run(DiskRead::Uncached, move || read(span, false)).await;
        }
        let find_and_read = move || {
            let span = plan.find()?;
            let cached = span.cached() != Some(false);
            read(span, cached)
        };
        self.run(DiskRead::Behind, find_and_read).await
    }

    /// Runs `read` on the blocking pool once a permit is free, counted under `why`.
    pub async fn run<T: Send + 'static>(
        &self,
        why: DiskRead,
        read: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let _permit = self.permits.acquire().await.map_err(io::Error::other)?;
        runnel_metrics::get().disk_read(why);
        tokio::task::spawn_blocking(read).await.map_err(io::Error::other)?
    }
}
