//! `runnel verify`'s checker: given the history of a queue workload (every send with its
//! outcome and acknowledged offset, every poll with the records it returned), find the
//! anomalies Jepsen's Kafka checker looks for. `workload` records such a history against a
//! live cluster; the checker is pure so it can be tested with planted anomalies.
//!
//! Model: every send carries a value unique to the run. A send is `Ok` (acknowledged, with
//! the offset the broker gave), `Failed` (the broker said no: it must never be read) or
//! `Unknown` (timeout, connection lost: it may or may not be there). Polls are listed per
//! consumer in the order they happened; a consumer reads partitions it is assigned from
//! some offset on, and a `final_read` consumer reads every partition from the start to the
//! end once the workload has stopped, so what it does not see is not in the log.
//!
//! Modules: `history` (what a run recorded), `checker` and `impact` (judging it), `chart`
//! (drawing it), and the workload that records it: `workload` (producers, consumers, the
//! final read), `txn` (the transactional producers), `copier` (their consume-transform-produce step), `group` (consumer-group members),
//! `fetch` (one round of fetches, shared by every reader), `router` (where to send each request), `config`. It talks to the cluster
//! through `runnel-client`; `runnel chaos` drives the same workload while injecting faults.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (append, replicate, batched
//! fsync) → commit → response. This crate checks, from outside, that what that path
//! acknowledged is what consumers read.

pub mod chart;
pub mod checker;
mod config;
mod copier;
mod fetch;
mod group;
pub mod history;
pub mod impact;
pub mod router;
mod txn;
pub mod workload;

pub use checker::{check, Anomaly, Report};
pub use config::{ClientRegion, VerifyConfig};
pub use history::{CopierRecord, FaultWindow, History, Op, OpKind, Outcome, Poll, Recovery, Send, TxnRecord};
