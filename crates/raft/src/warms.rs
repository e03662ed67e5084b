//! The reads of entries into the page cache that the driver has under way, for followers
//! behind (`store/warm.rs`). Owned by the driver's task, which starts them where it holds a
//! group and learns here when each has ended.

use std::task::Poll;

use tracing::warn;

use runnel_storage::WarmPlan;

use crate::replica::Replica;
use crate::rounds::SyncFuture;

/// Reads under way at most, all groups together (each reads up to `store::WARM_BYTES`, a
/// piece at a time). Past them, the appends that asked send what they read where asked.
const RUNNING_MAX: usize = 32;

#[derive(Default)]
pub(crate) struct Warms {
    /// (group, first entry asked, the read).
    running: Vec<(u64, u64, SyncFuture)>,
}

impl Warms {
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Starts the reads that `rep` (group `g`) asked for with `read` (the host's
    /// `Disk::warm`). True when `rep` has messages to send: appends called back because too
    /// many reads were under way.
    pub fn start(&mut self, g: u64, rep: &mut Replica, read: impl Fn(WarmPlan) -> SyncFuture) -> bool {
        let mut called_back = false;
        for w in rep.take_warms() {
            if self.running.len() >= RUNNING_MAX {
                called_back |= rep.warmed(w.low);
                continue;
            }
            self.running.push((g, w.low, read(w.plan)));
        }
        called_back
    }

    /// The next read to end: its group and the first entry it was for. Cancel safe: a read
    /// leaves the set only once it has ended.
    pub async fn next(&mut self) -> (u64, u64) {
        std::future::poll_fn(|cx| {
            for i in 0..self.running.len() {
                if let Poll::Ready(done) = self.running[i].2.as_mut().poll(cx) {
                    let (g, low, _) = self.running.swap_remove(i);
                    if let Err(e) = done {
                        warn!(group = g, error = %e, "reading entries ahead for a follower");
                    }
                    return Poll::Ready((g, low));
                }
            }
            Poll::Pending
        })
        .await
    }
}
