//! A replica's side of reading entries into the page cache for followers behind
//! (`store/warm.rs`): the reads its log asked for, and the callbacks once they are done.

use crate::store::Warm;

use super::Replica;

impl Replica {
    /// The reads of the log asked for since the last call, for the driver to start off its
    /// task.
    pub fn take_warms(&self) -> Vec<Warm> {
        self.node.store().take_warms()
    }

    /// Whether reads were asked for and not yet taken.
    pub fn wants_warms(&self) -> bool {
        self.node.store().wants_warms()
    }

    /// The read of the entries from `low` ended, or will not be made: raft-rs sends the
    /// appends that waited for it (reading the entries where it asks, now). True when any
    /// did, so that the group's messages go out.
    pub fn warmed(&mut self, low: u64) -> bool {
        let waiting = self.node.store().warmed(low);
        let any = !waiting.is_empty();
        for context in waiting {
            self.node.on_entries_fetched(context);
        }
        any
    }
}
