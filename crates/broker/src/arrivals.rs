//! Where long polls wait for data: Fetch and ShareFetch wait here for the partitions they
//! read, and the Raft hook wakes a partition's waiters when its high watermark moves.
//!
//! Waiters are spread over [`SHARDS`] notifiers picked by the partition's Raft group id,
//! so a commit wakes the fetches of that partition (and of the few others that share its
//! notifier), not every long poll on the broker: with many consumers each reading its own
//! partitions, one broker-wide notification made every waiting fetch read all of its
//! partitions again at every commit.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// Notifiers partitions are spread over. A fetch waits on at most this many.
pub const SHARDS: usize = 256;

pub struct Arrivals {
    shards: Box<[Notify]>,
    /// Woken at shutdown; every watch waits on it too.
    all: Notify,
}

impl Default for Arrivals {
    fn default() -> Arrivals {
        Arrivals { shards: (0..SHARDS).map(|_| Notify::new()).collect(), all: Notify::new() }
    }
}

impl Arrivals {
    fn shard(group: u64) -> usize {
        (group % SHARDS as u64) as usize
    }

    /// The high watermark of `group` moved: its waiters read again.
    pub fn moved(&self, group: u64) {
        self.shards[Arrivals::shard(group)].notify_waiters();
    }

    /// Every waiter reads again (the broker is shutting down).
    pub fn wake_all(&self) {
        self.all.notify_waiters();
    }

    /// Starts watching `groups`: a move of any of them from now on ends
    /// [`Watch::changed`]. Take it before reading, so that no move between the read and
    /// the wait is missed.
    pub fn watch(&self, groups: impl IntoIterator<Item = u64>) -> Watch<'_> {
        let mut seen = [false; SHARDS];
        let mut all = Box::pin(self.all.notified());
        all.as_mut().enable();
        let mut waits = vec![all];
        for g in groups {
            let s = Arrivals::shard(g);
            if !std::mem::replace(&mut seen[s], true) {
                let mut w = Box::pin(self.shards[s].notified());
                w.as_mut().enable();
                waits.push(w);
            }
        }
        Watch { waits }
    }
}

/// Moves watched since [`Arrivals::watch`].
pub struct Watch<'a> {
    waits: Vec<Pin<Box<Notified<'a>>>>,
}

impl Watch<'_> {
    /// Resolves once a watched group moved, or at [`Arrivals::wake_all`].
    pub async fn changed(mut self) {
        std::future::poll_fn(|cx| {
            // Every wait is polled, so each is registered with this task's waker.
            let mut ready = false;
            for w in self.waits.iter_mut() {
                ready |= w.as_mut().poll(cx).is_ready();
            }
            if ready {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn woken(w: Watch<'_>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), w.changed()).await.is_ok()
    }

    #[tokio::test]
    async fn a_move_wakes_only_the_fetches_watching_its_group() {
        let a = Arrivals::default();
        let (one, two) = (a.watch([1, 7]), a.watch([2]));
        a.moved(7);
        assert!(woken(one).await);
        assert!(!woken(two).await);
    }

    #[tokio::test]
    async fn a_move_between_watch_and_wait_is_not_missed() {
        let a = Arrivals::default();
        let w = a.watch([3]);
        a.moved(3 + SHARDS as u64); // the same notifier
        assert!(woken(w).await);
    }

    #[tokio::test]
    async fn a_move_before_the_watch_does_not_count_and_wake_all_wakes_every_watch() {
        let a = Arrivals::default();
        a.moved(5);
        assert!(!woken(a.watch([5])).await);
        let (one, two, none) = (a.watch([5]), a.watch([9, 200]), a.watch([]));
        a.wake_all();
        assert!(woken(one).await);
        assert!(woken(two).await);
        assert!(woken(none).await);
    }
}
