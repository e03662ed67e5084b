//! Entries a leader reads back from its log for a follower behind (one that was away, or a
//! new replica), without waiting for the disk on the driver's task. raft-rs asks the log for
//! them (`Storage::entries`) while the driver holds the group, and a read of pages no longer
//! in the page cache there would hold up every group of the broker. When those pages are not
//! all cached, the log answers `LogTemporarilyUnavailable` (raft-rs's asynchronous fetch)
//! and asks the driver to read them into the page cache off its task; once they are read,
//! the driver calls `on_entries_fetched`, raft-rs asks again, and the log reads them from
//! the cache.
//!
//! What is read ahead is [`WARM_BYTES`] from the entry's mark (entries are found from the
//! mark at most `offsets::STRIDE` - 1 entries before them), on into the next segment when
//! that one ends first: a follower catching up asks for the entries after those next, so
//! one read serves several of its appends.

use raft::GetEntriesContext;
use runnel_storage::WarmPlan;

use super::RaftLog;

/// Bytes read into the page cache at a time, from the mark before the first entry asked.
pub const WARM_BYTES: usize = 8 << 20;

/// Reads of one group's log under way at most; past them, entries are read where asked.
const WARMS_MAX: usize = 4;

/// Callers waiting for one read at most (raft-rs asks once per follower it sends to, and
/// again while it waits).
const WAITERS_MAX: usize = 8;

/// A read of the log into the page cache, for the entries from `low` on.
pub struct Warm {
    pub low: u64,
    pub plan: WarmPlan,
}

#[derive(Default)]
pub(crate) struct Warming {
    /// Reads asked for and not yet handed to the driver.
    asked: Vec<Warm>,
    /// Reads under way, by the first entry asked, with the callers waiting for them.
    waiting: Vec<(u64, Vec<GetEntriesContext>)>,
    /// The first entry of the read that ended last: the next ask for it reads at once,
    /// cached or not (pages gone again meanwhile must not make it ask for ever).
    done: Option<u64>,
}

impl RaftLog {
    /// Whether the entries from `low` must be read into the page cache first (`context`
    /// then waits for that read). Only a caller that can wait (raft-rs sending appends)
    /// is made to.
    pub(super) fn must_wait(&self, low: u64, high: u64, context: GetEntriesContext) -> bool {
        if !context.can_async() {
            return false;
        }
        let mut w = self.warming.borrow_mut();
        if w.done == Some(low) {
            w.done = None;
            return false;
        }
        if let Some((_, waiters)) = w.waiting.iter_mut().find(|(l, _)| *l == low) {
            // raft-rs asks again at each answer or heartbeat from the follower; a caller
            // past the bound is not called back, and asks again at the next.
            if waiters.len() < WAITERS_MAX {
                waiters.push(context);
            }
            return true;
        }
        if w.waiting.len() >= WARMS_MAX {
            return false;
        }
        let Some(from) = self.offsets.at_or_before(low) else { return false };
        let to = self.end_offset_in_memory(high - 1).unwrap_or(self.log.log_end_offset());
        let Ok(plan) = self.log.plan_warm(from, to, WARM_BYTES) else { return false };
        if !plan.may_wait() {
            return false;
        }
        w.asked.push(Warm { low, plan });
        w.waiting.push((low, vec![context]));
        true
    }

    /// Whether reads were asked for and not yet taken.
    pub fn wants_warms(&self) -> bool {
        !self.warming.borrow().asked.is_empty()
    }

    /// The reads asked for since the last call, for the driver to start.
    pub fn take_warms(&self) -> Vec<Warm> {
        std::mem::take(&mut self.warming.borrow_mut().asked)
    }

    /// The read for the entries from `low` ended (or will not be made): the callers that
    /// waited for it, to call back.
    pub fn warmed(&self, low: u64) -> Vec<GetEntriesContext> {
        let mut w = self.warming.borrow_mut();
        let Some(i) = w.waiting.iter().position(|(l, _)| *l == low) else { return Vec::new() };
        w.done = Some(low);
        w.waiting.swap_remove(i).1
    }
}
