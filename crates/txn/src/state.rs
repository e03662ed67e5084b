//! One transactional id's state and the rules that move it, as Kafka's transaction
//! coordinator has them, for both transaction versions: 1, and 2 (KIP-890 part 2: the
//! producer epoch is bumped at every commit and abort, so a late write of an ended
//! transaction is fenced on its partition). Pure: no locks, no log, no clock of its own;
//! the coordinator writes each new state durably before it takes effect.
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
    /// The current transaction is of version 2 (its client added partitions through its
    /// produces, and ends it with EndTxn v5+).
    #[serde(default)]
    pub tv2: bool,
    /// Version 2, epoch run out: the producer id the producer continues with once this
    /// ending completes (at epoch 0).
    #[serde(default)]
    pub next_producer_id: Option<i64>,
    /// The producer id before that change, so a retried EndTxn from it is answered.
    #[serde(default)]
    pub prev_producer_id: Option<i64>,
}

/// The highest epoch a producer is given (the one past it is kept for fencing it).
const LAST_CLIENT_EPOCH: i16 = i16::MAX - 1;

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

/// What EndTxn decides.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// Write this prepared state, then the markers.
    Prepare(TxnMeta),
    /// A retry of an ending that completed: answer success with the current id and epoch.
    Retried,
    /// Version 2 with the epoch run out: a new producer id is needed first (the caller
    /// allocates one and asks again).
    NeedProducerId,
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
            tv2: false,
            next_producer_id: None,
            prev_producer_id: None,
        }
    }

    /// InitProducerId. `expected`: the (id, epoch) a producer that already had one sends
    /// (KIP-360, and a Kafka 4 client bumping its epoch itself); in Kafka's order: the id
    /// must be this one (or the one before a new id, from its last epoch), a transaction
    /// still ending answers CONCURRENT_TRANSACTIONS, then the epoch must be the current one
    /// (bumped) or the one before the last bump (a retry, answered with the current one).
    pub fn init(&self, timeout_ms: i32, expected: Option<(i64, i16)>, now_ms: i64) -> Result<Init, E> {
        if let Some((pid, epoch)) = expected {
            let known = self.producer_epoch < 0
                || pid == self.producer_id
                || (self.prev_producer_id == Some(pid) && epoch >= LAST_CLIENT_EPOCH);
            if !known {
                return Err(E::ProducerFenced);
            }
        }
        match self.state {
            State::PrepareCommit | State::PrepareAbort => Err(E::ConcurrentTransactions),
            State::Ongoing => Ok(Init::Fence(self.fenced(now_ms))),
            State::Empty | State::CompleteCommit | State::CompleteAbort => {
                match expected {
                    Some((pid, epoch)) if self.producer_epoch >= 0 => {
                        let current = pid == self.producer_id && epoch == self.producer_epoch;
                        let retried = (pid == self.producer_id && epoch == self.last_producer_epoch)
                            || (self.prev_producer_id == Some(pid) && self.producer_epoch == 0);
                        if retried && !current {
                            return Ok(Init::Current);
                        }
                        if !current {
                            return Err(E::ProducerFenced);
                        }
                    }
                    _ => {}
                }
                match self.bumped(now_ms) {
                    Some(mut next) => {
                        next.state = State::Empty;
                        next.partitions.clear();
                        next.timeout_ms = timeout_ms;
                        next.start_ms = -1;
                        Ok(Init::Bump(next))
                    }
                    None => Ok(Init::NewId),
                }
            }
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

    /// The open transaction aborted by the coordinator (a new instance of the producer, or
    /// its timeout): the epoch is bumped so the producer that left it is fenced. Version 2
    /// bumps twice, as Kafka does, so that epoch is not mistaken for a retry of the end
    /// (which is answered with the epoch after it). It may reach `i16::MAX`, which no
    /// producer is given: the next InitProducerId then gets a new producer id.
    fn fenced(&self, now_ms: i64) -> TxnMeta {
        let by = if self.tv2 { 2 } else { 1 };
        let epoch = self.producer_epoch.saturating_add(by).max(self.producer_epoch);
        TxnMeta {
            producer_epoch: epoch,
            last_producer_epoch: if epoch == self.producer_epoch { self.last_producer_epoch } else { epoch - 1 },
            state: State::PrepareAbort,
            update_ms: now_ms,
            ..self.clone()
        }
    }

    /// The producer id and epoch the producer goes on with once this state is durable
    /// (EndTxn v5 answers them).
    pub fn continues_as(&self) -> (i64, i16) {
        match self.next_producer_id {
            Some(id) => (id, 0),
            None => (self.producer_id, self.producer_epoch),
        }
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
    /// `tv2`: the partitions come from the producer's own produce or offset commit
    /// (transactions version 2) rather than from AddPartitionsToTxn.
    pub fn add(
        &self,
        producer_id: i64,
        epoch: i16,
        parts: &[Tp],
        tv2: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMeta>, E> {
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
                tv2,
                ..self.clone()
            })),
        }
    }

    /// EndTxn. `tv2`: the request is of transactions version 2 (EndTxn v5+), which bumps
    /// the epoch; `next_id`: a producer id allocated after [`Ending::NeedProducerId`].
    pub fn end(
        &self,
        producer_id: i64,
        epoch: i16,
        end: TxnEnd,
        tv2: bool,
        next_id: Option<i64>,
        now_ms: i64,
    ) -> Result<Ending, E> {
        if !tv2 {
            return self.end_v1(producer_id, epoch, end, now_ms);
        }
        let current = producer_id == self.producer_id && epoch == self.producer_epoch;
        // A retry of an ending whose answer (the next epoch, or the next id) was lost.
        let retry_bump = producer_id == self.producer_id && epoch.checked_add(1) == Some(self.producer_epoch);
        let retry_overflow =
            self.prev_producer_id == Some(producer_id) && epoch == LAST_CLIENT_EPOCH && self.producer_epoch == 0;
        if producer_id != self.producer_id && !retry_overflow {
            return Err(E::InvalidProducerIdMapping);
        }
        let retry = retry_bump || retry_overflow;
        let valid = match self.state {
            State::Empty | State::Ongoing => current,
            State::PrepareCommit | State::PrepareAbort => retry_bump,
            State::CompleteCommit | State::CompleteAbort => current || retry,
        };
        if !valid {
            return Err(E::ProducerFenced);
        }
        let commit = end == TxnEnd::Commit;
        let keep = match (self.state, commit) {
            (State::Ongoing, _) => true,
            (State::CompleteCommit, true) | (State::CompleteAbort, false) if retry => return Ok(Ending::Retried),
            // Version 2 may abort a transaction that added nothing (its every produce failed).
            (State::Empty | State::CompleteCommit | State::CompleteAbort, false) if !retry => false,
            (State::PrepareCommit, true) | (State::PrepareAbort, false) => return Err(E::ConcurrentTransactions),
            _ => return Err(E::InvalidTxnState),
        };
        let next_producer_id = if self.producer_epoch >= LAST_CLIENT_EPOCH {
            match next_id {
                Some(id) => Some(id),
                None => return Ok(Ending::NeedProducerId),
            }
        } else {
            None
        };
        Ok(Ending::Prepare(TxnMeta {
            producer_epoch: self.producer_epoch + 1,
            last_producer_epoch: self.producer_epoch,
            state: if commit { State::PrepareCommit } else { State::PrepareAbort },
            partitions: if keep { self.partitions.clone() } else { BTreeSet::new() },
            start_ms: if keep { self.start_ms } else { now_ms },
            update_ms: now_ms,
            tv2: true,
            next_producer_id,
            ..self.clone()
        }))
    }

    /// EndTxn of transactions version 1: the epoch stays.
    fn end_v1(&self, producer_id: i64, epoch: i16, end: TxnEnd, now_ms: i64) -> Result<Ending, E> {
        self.check_producer(producer_id, epoch)?;
        let commit = end == TxnEnd::Commit;
        match (self.state, commit) {
            (State::Ongoing, _) => Ok(Ending::Prepare(TxnMeta {
                state: if commit { State::PrepareCommit } else { State::PrepareAbort },
                update_ms: now_ms,
                tv2: false,
                ..self.clone()
            })),
            (State::CompleteCommit, true) | (State::CompleteAbort, false) => Ok(Ending::Retried),
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
        let (producer_id, producer_epoch) = self.continues_as();
        let prev_producer_id = match self.next_producer_id {
            Some(_) => Some(self.producer_id),
            None => self.prev_producer_id,
        };
        Some(TxnMeta {
            state,
            partitions: BTreeSet::new(),
            update_ms: now_ms,
            producer_id,
            producer_epoch,
            next_producer_id: None,
            prev_producer_id,
            ..self.clone()
        })
    }

    /// An open transaction past its timeout: fenced (epoch bumped) and aborted, as Kafka's
    /// coordinator does, so the producer that left it cannot go on writing.
    pub fn timed_out(&self, now_ms: i64) -> Option<TxnMeta> {
        if self.state != State::Ongoing || self.start_ms.saturating_add(self.timeout_ms as i64) > now_ms {
            return None;
        }
        Some(self.fenced(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> Tp {
        (t.to_string(), p)
    }

    impl Ending {
        fn prepared(self) -> TxnMeta {
            match self {
                Ending::Prepare(m) => m,
                other => panic!("{other:?}"),
            }
        }
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
        let m = m.add(7, 0, &[tp("a", 0)], false, 10).expect("add").expect("written");
        assert_eq!((m.state, m.start_ms), (State::Ongoing, 10));
        assert_eq!(m.add(7, 0, &[tp("a", 0)], false, 11), Ok(None), "already in");
        let m = m.add(7, 0, &[tp("b", 1)], false, 12).expect("add").expect("written");
        assert_eq!(m.partitions.len(), 2);
        let p = m.end(7, 0, TxnEnd::Commit, false, None, 20).expect("end").prepared();
        assert_eq!(p.state, State::PrepareCommit);
        assert_eq!(p.add(7, 0, &[tp("a", 0)], false, 21), Err(E::ConcurrentTransactions));
        assert_eq!(p.end(7, 0, TxnEnd::Commit, false, None, 21), Err(E::ConcurrentTransactions));
        assert_eq!(p.end(7, 0, TxnEnd::Abort, false, None, 21), Err(E::InvalidTxnState));
        let c = p.completed(30).expect("complete");
        assert_eq!((c.state, c.partitions.len()), (State::CompleteCommit, 0));
        assert_eq!(c.end(7, 0, TxnEnd::Commit, false, None, 31), Ok(Ending::Retried), "a retried commit succeeds");
        assert_eq!(c.end(7, 0, TxnEnd::Abort, false, None, 31), Err(E::InvalidTxnState));
        let next = c.add(7, 0, &[tp("c", 2)], false, 40).expect("add").expect("written");
        assert_eq!((next.state, next.start_ms, next.partitions.len()), (State::Ongoing, 40, 1));
    }

    #[test]
    fn producers_are_checked_and_fenced() {
        let m = ready().add(7, 0, &[tp("a", 0)], false, 10).expect("add").expect("written");
        assert_eq!(m.add(8, 0, &[], false, 11), Err(E::InvalidProducerIdMapping));
        assert_eq!(m.add(7, 1, &[], false, 11), Err(E::ProducerFenced));
        assert_eq!(m.end(7, 3, TxnEnd::Commit, false, None, 11), Err(E::ProducerFenced));
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
        assert_eq!(again.add(7, 0, &[tp("a", 0)], false, 16), Err(E::ProducerFenced));
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
        let m = ready().add(7, 0, &[tp("a", 0)], false, 1_000).expect("add").expect("written");
        assert_eq!(m.timed_out(60_999), None);
        let t = m.timed_out(61_000).expect("timed out");
        assert_eq!((t.state, t.producer_epoch), (State::PrepareAbort, 1));
        let mut old = ready();
        old.producer_epoch = i16::MAX - 1;
        assert_eq!(old.init(60_000, None, 2), Ok(Init::NewId));
        let renewed = old.renewed(8, 60_000, 3);
        assert_eq!((renewed.producer_id, renewed.producer_epoch, renewed.state), (8, 0, State::Empty));
    }

    #[test]
    fn version_2_bumps_the_epoch_at_every_end_and_answers_retries() {
        let m = ready().add(7, 0, &[tp("a", 0)], true, 10).expect("add").expect("written");
        assert!(m.tv2);
        let p = m.end(7, 0, TxnEnd::Commit, true, None, 20).expect("end").prepared();
        assert_eq!((p.state, p.producer_epoch, p.last_producer_epoch), (State::PrepareCommit, 1, 0));
        assert_eq!(p.continues_as(), (7, 1), "EndTxn v5 answers the next epoch");
        // The answer was lost: the retry waits for the markers, then succeeds.
        assert_eq!(p.end(7, 0, TxnEnd::Commit, true, None, 21), Err(E::ConcurrentTransactions));
        assert_eq!(p.end(7, 1, TxnEnd::Commit, true, None, 21), Err(E::ProducerFenced));
        let c = p.completed(30).expect("complete");
        assert_eq!((c.state, c.producer_epoch), (State::CompleteCommit, 1));
        assert_eq!(c.end(7, 0, TxnEnd::Commit, true, None, 31), Ok(Ending::Retried));
        assert_eq!(c.end(7, 0, TxnEnd::Abort, true, None, 31), Err(E::InvalidTxnState));
        assert_eq!(c.end(7, 1, TxnEnd::Commit, true, None, 31), Err(E::InvalidTxnState), "nothing to commit");
        // The old epoch is fenced from the next transaction; the new one starts it.
        assert_eq!(c.add(7, 0, &[tp("a", 0)], true, 32), Err(E::ProducerFenced));
        let next = c.add(7, 1, &[tp("b", 0)], true, 33).expect("add").expect("written");
        assert_eq!((next.state, next.start_ms, next.partitions.len()), (State::Ongoing, 33, 1));
        // A producer whose every produce failed may abort a transaction that added nothing.
        let empty = c.end(7, 1, TxnEnd::Abort, true, None, 34).expect("end").prepared();
        assert_eq!((empty.state, empty.producer_epoch, empty.partitions.len()), (State::PrepareAbort, 2, 0));
        let aborted = empty.completed(35).expect("complete");
        assert_eq!(aborted.end(7, 1, TxnEnd::Abort, true, None, 36), Ok(Ending::Retried));
        assert_eq!(aborted.end(7, 0, TxnEnd::Abort, true, None, 36), Err(E::ProducerFenced));
    }

    #[test]
    fn version_2_fences_two_epochs_ahead_so_a_fenced_end_is_no_retry() {
        let m = ready().add(7, 0, &[tp("a", 0)], true, 10).expect("add").expect("written");
        let fenced = match m.init(60_000, None, 11).expect("init") {
            Init::Fence(f) => f,
            other => panic!("{other:?}"),
        };
        assert_eq!((fenced.state, fenced.producer_epoch), (State::PrepareAbort, 2));
        let aborted = fenced.completed(12).expect("complete");
        assert_eq!(aborted.end(7, 0, TxnEnd::Abort, true, None, 13), Err(E::ProducerFenced));
        assert_eq!(aborted.end(7, 0, TxnEnd::Commit, true, None, 13), Err(E::ProducerFenced));
        let timed_out = m.timed_out(60_010).expect("timed out");
        assert_eq!((timed_out.state, timed_out.producer_epoch), (State::PrepareAbort, 2));
    }

    #[test]
    fn a_client_bumping_its_epoch_while_its_commit_ends_waits_then_gets_the_current_one() {
        // Transactions version 2: EndTxn moved the epoch to 1; the client's own bump comes
        // with the epoch it had (0) while the markers are still being written.
        let m = ready().add(7, 0, &[tp("a", 0)], true, 10).expect("add").expect("written");
        let p = m.end(7, 0, TxnEnd::Commit, true, None, 20).expect("end").prepared();
        assert_eq!(p.init(60_000, Some((7, 0)), 21), Err(E::ConcurrentTransactions));
        let c = p.completed(22).expect("complete");
        assert_eq!(c.init(60_000, Some((7, 0)), 23), Ok(Init::Current));
        assert_eq!(c.init(60_000, Some((8, 0)), 23), Err(E::ProducerFenced));
        match c.init(60_000, Some((7, 1)), 24).expect("init") {
            Init::Bump(b) => assert_eq!(b.producer_epoch, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn version_2_moves_to_a_new_producer_id_when_the_epoch_runs_out() {
        let mut m = ready().add(7, 0, &[tp("a", 0)], true, 10).expect("add").expect("written");
        m.producer_epoch = LAST_CLIENT_EPOCH;
        assert_eq!(m.end(7, LAST_CLIENT_EPOCH, TxnEnd::Commit, true, None, 20), Ok(Ending::NeedProducerId));
        let p = m.end(7, LAST_CLIENT_EPOCH, TxnEnd::Commit, true, Some(9), 21).expect("end").prepared();
        assert_eq!((p.producer_id, p.producer_epoch), (7, i16::MAX), "markers at the epoch past the last");
        assert_eq!(p.continues_as(), (9, 0));
        let c = p.completed(30).expect("complete");
        assert_eq!((c.producer_id, c.producer_epoch, c.prev_producer_id), (9, 0, Some(7)));
        assert_eq!(c.end(7, LAST_CLIENT_EPOCH, TxnEnd::Commit, true, None, 31), Ok(Ending::Retried));
        assert_eq!(c.continues_as(), (9, 0));
        assert_eq!(c.end(7, 3, TxnEnd::Commit, true, None, 31), Err(E::InvalidProducerIdMapping));
        c.add(9, 0, &[tp("a", 0)], true, 32).expect("add").expect("written");
    }
}
