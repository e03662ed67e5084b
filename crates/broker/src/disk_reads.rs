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
use std::sync::Arc;

use runnel_metrics::DiskRead;
use runnel_storage::{ReadPlan, Span};
use tokio::sync::Semaphore;

/// The permits for reads that might wait for the disk.
pub struct DiskReads {
    permits: Arc<Semaphore>,
}

impl DiskReads {
    /// At most `most` reads at a time (at least one).
    pub fn new(most: usize) -> DiskReads {
        DiskReads { permits: Arc::new(Semaphore::new(most.max(1))) }
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

    /// Runs `read` on the blocking pool once a permit is free, counted under `why`. The
    /// read holds its permit to its end, even when the caller stops waiting for it (a
    /// connection closed meanwhile).
    pub async fn run<T: Send + 'static>(
        &self,
        why: DiskRead,
        read: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let permit = self.permits.clone().acquire_owned().await.map_err(io::Error::other)?;
        runnel_metrics::get().disk_read(why);
        let read = move || {
            let _permit = permit;
            read()
        };
        tokio::task::spawn_blocking(read).await.map_err(io::Error::other)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_the_permitted_reads_run_at_once_even_when_callers_stop_waiting() {
        let reads = Arc::new(DiskReads::new(2));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut waiting = Vec::new();
        for i in 0..8 {
            let (reads, running, most) = (reads.clone(), running.clone(), most.clone());
            let read = move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(30));
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(i)
            };
            waiting.push(tokio::spawn(async move { reads.run(DiskRead::Behind, read).await }));
        }
        // Half the callers stop waiting while their reads run or wait for a permit.
        tokio::time::sleep(Duration::from_millis(10)).await;
        for w in waiting.iter().step_by(2) {
            w.abort();
        }
        let mut done = 0;
        for w in waiting {
            if let Ok(read) = w.await {
                assert!(read.expect("read") < 8);
                done += 1;
            }
        }
        assert!(done >= 4, "{done} reads answered");
        // The aborted callers' reads that had started still end before the last permit.
        let _last = reads.permits.acquire_many(2).await.expect("permits");
        assert_eq!(running.load(Ordering::SeqCst), 0);
        assert_eq!(most.load(Ordering::SeqCst), 2, "never more than two at once");
    }
}
