//! Queues of Raft messages, bounded in messages and in bytes: each peer's outbound queue
//! and a driver's inbound one. A count alone does not bound memory, since an append may
//! carry up to 1 MiB of entries: a peer that stops reading (paused, or behind a full
//! link) or a driver waiting on a slow disk would otherwise hold thousands of them.
//! A message that does not fit is dropped, never waited for; Raft resends what matters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use raft::eraftpb::Message;
use tokio::sync::mpsc;

/// A message for one group.
pub type Envelope = (u64, Message);

/// What a message counts for against a byte bound: its entries' and snapshot's data, and a
/// fixed amount for the rest.
pub fn size_of(msg: &Message) -> usize {
    let entries: usize = msg.entries.iter().map(|e| e.data.len() + e.context.len() + 32).sum();
    64 + entries + msg.snapshot.as_ref().map_or(0, |s| s.data.len())
}

/// A queue that holds at most `max_messages` messages and `max_bytes` bytes (by
/// [`size_of`]); a single message larger than `max_bytes` still fits an empty queue.
pub fn channel(max_messages: usize, max_bytes: usize) -> (Sender, Receiver) {
    let (tx, rx) = mpsc::channel(max_messages);
    let bytes = Arc::new(AtomicUsize::new(0));
    (Sender { tx, bytes: bytes.clone(), max_bytes }, Receiver { rx, bytes })
}

#[derive(Clone)]
pub struct Sender {
    /// Each message travels with its size, counted once.
    tx: mpsc::Sender<(Envelope, usize)>,
    bytes: Arc<AtomicUsize>,
    max_bytes: usize,
}

impl Sender {
    /// Queues `envelope` if it fits; false if it was dropped (full, or no receiver).
    pub fn try_send(&self, envelope: Envelope) -> bool {
        let size = size_of(&envelope.1);
        self.try_send_counted(envelope, size)
    }

    /// Queues `envelope` counted as `size` bytes (its [`size_of`], or more when it keeps a
    /// larger buffer alive).
    pub fn try_send_counted(&self, envelope: Envelope, size: usize) -> bool {
        // Counted before it is queued, so the receiver never takes off more than was added.
        let before = self.bytes.fetch_add(size, Ordering::Relaxed);
        if before > 0 && before + size > self.max_bytes {
            self.bytes.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        if self.tx.try_send((envelope, size)).is_err() {
            self.bytes.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        true
    }
}

pub struct Receiver {
    rx: mpsc::Receiver<(Envelope, usize)>,
    bytes: Arc<AtomicUsize>,
}

impl Receiver {
    fn took(&self, (envelope, size): (Envelope, usize)) -> Envelope {
        self.bytes.fetch_sub(size, Ordering::Relaxed);
        envelope
    }

    /// The next message; None once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Envelope> {
        let e = self.rx.recv().await?;
        Some(self.took(e))
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Option<Envelope> {
        let e = self.rx.try_recv().ok()?;
        Some(self.took(e))
    }

    /// Waits for a message, then appends it and whatever else is queued, up to `limit`
    /// messages, to `buf`. Returns how many; 0 once every sender is gone.
    pub async fn recv_many(&mut self, buf: &mut Vec<Envelope>, limit: usize) -> usize {
        let Some(first) = self.recv().await else { return 0 };
        buf.push(first);
        let mut n = 1;
        while n < limit {
            let Some(e) = self.try_recv() else { break };
            buf.push(e);
            n += 1;
        }
        n
    }

    /// Drops everything queued.
    pub fn clear(&mut self) {
        while self.try_recv().is_some() {}
    }

    pub fn is_closed(&self) -> bool {
        self.rx.is_closed()
    }

    /// Bytes queued now (by [`size_of`]).
    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::Entry;

    fn append(bytes: usize) -> Message {
        let e = Entry { data: vec![0u8; bytes].into(), ..Entry::default() };
        Message { to: 2, entries: vec![e].into(), ..Message::default() }
    }

    #[tokio::test]
    async fn full_in_bytes_drops_until_the_receiver_takes() {
        let (tx, mut rx) = channel(100, 10_000);
        assert!(tx.try_send((1, append(4000))));
        assert!(tx.try_send((1, append(4000))));
        assert!(!tx.try_send((1, append(4000))), "past the byte bound");
        assert!(tx.try_send((1, Message::default())), "a small one still fits");
        let mut got = Vec::new();
        assert_eq!(rx.recv_many(&mut got, 10).await, 3);
        assert_eq!(rx.queued_bytes(), 0);
        assert!(tx.try_send((1, append(4000))));
        assert!(rx.recv().await.is_some());
        assert_eq!(rx.queued_bytes(), 0);
    }

    #[tokio::test]
    async fn full_in_messages_drops_and_counts_nothing() {
        let (tx, mut rx) = channel(2, 1 << 20);
        assert!(tx.try_send((1, Message::default())));
        assert!(tx.try_send((1, Message::default())));
        assert!(!tx.try_send((1, append(100))));
        assert_eq!(rx.queued_bytes(), 2 * size_of(&Message::default()));
        rx.clear();
        assert_eq!(rx.queued_bytes(), 0);
        assert!(rx.try_recv().is_none());
    }

    #[test]
    fn one_message_larger_than_the_bound_fits_an_empty_queue() {
        let (tx, mut rx) = channel(10, 1000);
        assert!(tx.try_send((1, append(5000))));
        assert!(!tx.try_send((1, Message::default())));
        rx.clear();
        drop(rx);
        assert!(!tx.try_send((1, Message::default())), "no receiver");
        assert_eq!(tx.bytes.load(Ordering::Relaxed), 0);
    }
}
