//! One transactional id's state and the rules that move it, as Kafka's transaction
//! coordinator has them (transactions version 1). Pure: no locks, no log, no clock of its
//! own; the coordinator writes each new state durably before it takes effect.
//!
//! ```text
//! Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
//!   ▲                        │    └──EndTxn(abort), timeout, fence──▶ PrepareAbort ──markers──▶ CompleteAbort
//!   └── InitProducerId (epoch + 1) from Empty or Complete*; AddPartitions from Complete* starts anew
//! ```

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError as E;
use runnel_wire::TxnEnd;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl State {
    /// The name Kafka's tools show (DescribeTransactions, ListTransactions).
    pub fn kafka_name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::Ongoing => "Ongoing",
            State::PrepareCommit => "PrepareCommit",
            State::PrepareAbort => "PrepareAbort",
            State::CompleteCommit => "CompleteCommit",
            State::CompleteAbort => "CompleteAbort",
        }
    }

    /// The markers are being written.
    pub fn is_prepared(self) -> bool {
        matches!(self, State::PrepareCommit | State::PrepareAbort)
    }

    /// How a prepared transaction ends.
    pub fn ending(self) -> Option<TxnEnd> {
        match self {
            State::PrepareCommit => Some(TxnEnd::Commit),
            State::PrepareAbort => Some(TxnEnd::Abort),
            _ => None,
        }
    }
}

/// A topic partition.
pub type Tp = (String, i32);

/// What the coordinator keeps per transactional id (and writes to `__transaction_state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMeta {
    pub producer_id: i64,
    /// -1 until the first InitProducerId completes.
    pub producer_epoch: i16,
    /// The epoch before the last bump: a producer retrying InitProducerId with it (KIP-360)
    /// gets the current one back instead of being fenced.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: State,
    /// The partitions the open (or ending) transaction wrote to.
    pub partitions: BTreeSet<Tp>,
    /// When the current transaction started (its first AddPartitions), ms since the epoch.
    pub start_ms: i64,
    pub update_ms: i64,
}

/// What InitProducerId decides.
#[derive(Debug, PartialEq, Eq)]
pub enum Init {
    /// Write this state and answer with its id and epoch.
    Bump(TxnMeta),
    /// The producer retried a bump that already happened: answer with the current id and
    /// epoch, nothing to write.
    Current,
    /// The epoch is exhausted: a new producer id is needed (the caller allocates one).
    NewId,
    /// An open transaction must be aborted first: write this state (epoch bumped, so the
    /// old producer is fenced; PrepareAbort), write the markers, and answer
    /// CONCURRENT_TRANSACTIONS so the producer retries once the abort is done.
    Fence(TxnMeta),
}

impl TxnMeta {
    /// A transactional id seen for the first time, with its newly allocated producer id.
    pub fn new(producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMeta {
        TxnMeta {
            producer_id,
            producer_epoch: -1,
            last_producer_epoch: -1,
            timeout_ms,
            state: State::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            update_ms: now_ms,
        }
    }

    /// InitProducerId. `expected`: the (id, epoch) a producer that already had one sends
    /// (KIP-360); it must be the current one, or the one just before a bump it retries.
    pub fn init(&self, timeout_ms: i32, expected: Option<(i64, i16)>, now_ms: i64) -> Result<Init, E> {
        if let Some((pid, epoch)) = expected {
            let current = pid == self.producer_id && epoch == self.producer_epoch;
            let retried = pid == self.producer_id && epoch == self.last_producer_epoch && self.last_producer_epoch >= 0;
            if retried && self.state == State::Empty {
                return Ok(Init::Current);
            }
            if !current {
                return Err(E::ProducerFenced);
            }
        }
        match self.state {
            State::PrepareCommit | State::PrepareAbort => Err(E::ConcurrentTransactions),
            State::Ongoing => {
                let mut next = self.bumped(now_ms).ok_or(E::ConcurrentTransactions)?;
                next.state = State::PrepareAbort;
                Ok(Init::Fence(next))
            }
            State::Empty | State::CompleteCommit | State::CompleteAbort => match self.bumped(now_ms) {
                Some(mut next) => {
                    next.state = State::Empty;
                    next.partitions.clear();
                    next.timeout_ms = timeout_ms;
                    next.start_ms = -1;
                    Ok(Init::Bump(next))
                }
                None => Ok(Init::NewId),
            },
        }
    }

    /// The same id with the next epoch; None when the epoch is exhausted.
    fn bumped(&self, now_ms: i64) -> Option<TxnMeta> {
        let epoch = self.producer_epoch.checked_add(1).filter(|e| *e < i16::MAX)?;
        Some(TxnMeta {
            producer_epoch: epoch,
            last_producer_epoch: self.producer_epoch,
            update_ms: now_ms,
            ..self.clone()
        })
    }

    /// The state a new producer id starts in (its epoch exhausted, or a new id).
    pub fn renewed(&self, producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMeta {
        TxnMeta { producer_epoch: 0, last_producer_epoch: -1, ..TxnMeta::new(producer_id, timeout_ms, now_ms) }
    }

    /// Checks that a request comes from the current producer.
    pub fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), E> {
        if producer_id != self.producer_id {
            return Err(E::InvalidProducerIdMapping);
        }
        if epoch != self.producer_epoch {
            return Err(E::ProducerFenced);
        }
        Ok(())
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the new state to write, or None when every
    /// partition is already in the open transaction.
    pub fn add(&self, producer_id: i64, epoch: i16, parts: &[Tp], now_ms: i64) -> Result<Option<TxnMeta>, E> {
        self.check_producer(producer_id, epoch)?;
        match self.state {
            State::PrepareCommit | State::PrepareAbort => Err(E::ConcurrentTransactions),
            State::Ongoing if parts.iter().all(|p| self.partitions.contains(p)) => Ok(None),
            State::Ongoing => {
                let mut next = self.clone();
                next.partitions.extend(parts.iter().cloned());
                next.update_ms = now_ms;
                Ok(Some(next))
            }
            State::Empty | State::CompleteCommit | State::CompleteAbort => Ok(Some(TxnMeta {
                state: State::Ongoing,
                partitions: parts.iter().cloned().collect(),
                start_ms: now_ms,
                update_ms: now_ms,
                ..self.clone()
            })),
        }
    }

    /// EndTxn: the prepared state to write, or None for a retry of an end that already
    /// completed (answered with success, nothing to write).
    pub fn end(&self, producer_id: i64, epoch: i16, end: TxnEnd, now_ms: i64) -> Result<Option<TxnMeta>, E> {
        self.check_producer(producer_id, epoch)?;
        let commit = end == TxnEnd::Commit;
        match (self.state, commit) {
            (State::Ongoing, _) => Ok(Some(TxnMeta {
                state: if commit { State::PrepareCommit } else { State::PrepareAbort },
                update_ms: now_ms,
                ..self.clone()
            })),
            (State::CompleteCommit, true) | (State::CompleteAbort, false) => Ok(None),
            (State::PrepareCommit, true) | (State::PrepareAbort, false) => Err(E::ConcurrentTransactions),
            _ => Err(E::InvalidTxnState),
        }
    }

    /// The markers are all written: the completed state.
    pub fn completed(&self, now_ms: i64) -> Option<TxnMeta> {
        let state = match self.state {
            State::PrepareCommit => State::CompleteCommit,
            State::PrepareAbort => State::CompleteAbort,
            _ => return None,
        };
        Some(TxnMeta { state, partitions: BTreeSet::new(), update_ms: now_ms, ..self.clone() })
    }

    /// An open transaction past its timeout: fenced (epoch bumped) and aborted, as Kafka's
    /// coordinator does, so the producer that left it cannot go on writing.
    pub fn timed_out(&self, now_ms: i64) -> Option<TxnMeta> {
        if self.state != State::Ongoing || self.start_ms.saturating_add(self.timeout_ms as i64) > now_ms {
            return None;
        }
        let mut next = self.bumped(now_ms).unwrap_or_else(|| self.clone());
        next.state = State::PrepareAbort;
        next.update_ms = now_ms;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> Tp {
        (t.to_string(), p)
    }

    fn ready() -> TxnMeta {
        let fresh = TxnMeta::new(7, 60_000, 0);
        match fresh.init(60_000, None, 1).expect("init") {
            Init::Bump(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_transaction_commits_and_the_next_one_starts_anew() {
        let m = ready();
        assert_eq!((m.producer_epoch, m.state), (0, State::Empty));
        let m = m.add(7, 0, &[tp("a", 0)], 10).expect("add").expect("written");
        assert_eq!((m.state, m.start_ms), (State::Ongoing, 10));
        assert_eq!(m.add(7, 0, &[tp("a", 0)], 11), Ok(None), "already in");
        let m = m.add(7, 0, &[tp("b", 1)], 12).expect("add").expect("written");
        assert_eq!(m.partitions.len(), 2);
        let p = m.end(7, 0, TxnEnd::Commit, 20).expect("end").expect("prepared");
        assert_eq!(p.state, State::PrepareCommit);
        assert_eq!(p.add(7, 0, &[tp("a", 0)], 21), Err(E::ConcurrentTransactions));
        assert_eq!(p.end(7, 0, TxnEnd::Commit, 21), Err(E::ConcurrentTransactions));
        assert_eq!(p.end(7, 0, TxnEnd::Abort, 21), Err(E::InvalidTxnState));
        let c = p.completed(30).expect("complete");
        assert_eq!((c.state, c.partitions.len()), (State::CompleteCommit, 0));
        assert_eq!(c.end(7, 0, TxnEnd::Commit, 31), Ok(None), "a retried commit succeeds");
        assert_eq!(c.end(7, 0, TxnEnd::Abort, 31), Err(E::InvalidTxnState));
        let next = c.add(7, 0, &[tp("c", 2)], 40).expect("add").expect("written");
        assert_eq!((next.state, next.start_ms, next.partitions.len()), (State::Ongoing, 40, 1));
    }

    #[test]
    fn producers_are_checked_and_fenced() {
        let m = ready().add(7, 0, &[tp("a", 0)], 10).expect("add").expect("written");
        assert_eq!(m.add(8, 0, &[], 11), Err(E::InvalidProducerIdMapping));
        assert_eq!(m.add(7, 1, &[], 11), Err(E::ProducerFenced));
        assert_eq!(m.end(7, 3, TxnEnd::Commit, 11), Err(E::ProducerFenced));
        // A new instance with the same transactional id aborts the open transaction first.
        let fenced = match m.init(60_000, None, 12).expect("init") {
            Init::Fence(f) => f,
            other => panic!("{other:?}"),
        };
        assert_eq!((fenced.state, fenced.producer_epoch), (State::PrepareAbort, 1));
        assert_eq!(fenced.init(60_000, None, 13), Err(E::ConcurrentTransactions));
        let aborted = fenced.completed(14).expect("complete");
        let again = match aborted.init(60_000, None, 15).expect("init") {
            Init::Bump(m) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!((again.state, again.producer_epoch), (State::Empty, 2));
        // The old instance, at epoch 0, is fenced everywhere.
        assert_eq!(again.add(7, 0, &[tp("a", 0)], 16), Err(E::ProducerFenced));
        assert_eq!(again.init(60_000, Some((7, 0)), 16), Err(E::ProducerFenced));
        // KIP-360: the current producer bumps its own epoch; a retry of that bump gets it back.
        let bumped = match again.init(60_000, Some((7, 2)), 17).expect("init") {
            Init::Bump(m) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(bumped.producer_epoch, 3);
        assert_eq!(bumped.init(60_000, Some((7, 2)), 18), Ok(Init::Current));
    }

    #[test]
    fn open_transactions_time_out_and_epochs_run_out() {
        let m = ready().add(7, 0, &[tp("a", 0)], 1_000).expect("add").expect("written");
        assert_eq!(m.timed_out(60_999), None);
        let t = m.timed_out(61_000).expect("timed out");
        assert_eq!((t.state, t.producer_epoch), (State::PrepareAbort, 1));
        let mut old = ready();
        old.producer_epoch = i16::MAX - 1;
        assert_eq!(old.init(60_000, None, 2), Ok(Init::NewId));
        let renewed = old.renewed(8, 60_000, 3);
        assert_eq!((renewed.producer_id, renewed.producer_epoch, renewed.state), (8, 0, State::Empty));
    }
}
