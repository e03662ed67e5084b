//! Transactions as the log derives them: the last stable offset stops at the oldest open
//! transaction, markers end them, aborted ones are listed for the range a fetch reads, and
//! all of it comes back the same after a reopen, a truncation and a snapshot restore.

use runnel_storage::{AbortedTxn, Log, LogConfig};
use runnel_wire::batch::BatchHeader;
use runnel_wire::build::{BatchBuilder, ProducerFields};
use runnel_wire::marker::marker_batch;
use runnel_wire::TxnEnd;

fn data(pid: i64, seq: i32, transactional: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new(0);
    b.push(0, Some(b"k"), Some(b"v"));
    let producer = ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: seq };
    if transactional {
        b.finish_transactional(0, producer).expect("batch")
    } else {
        b.finish(0, producer).expect("batch")
    }
}

fn append(log: &mut Log, batch: &[u8]) -> i64 {
    let h = BatchHeader::validate(batch).expect("valid");
    log.append(batch, &h, 0).expect("append").base_offset
}

fn end(log: &mut Log, pid: i64, how: TxnEnd) -> i64 {
    log.check_marker(pid, 0).expect("not fenced");
    append(log, &marker_batch(pid, 0, 1, how, 0))
}

/// (last stable offset at the log end, aborted transactions, open transactions).
fn state(log: &Log) -> (i64, Vec<AbortedTxn>, Vec<(i64, i64)>) {
    let end = log.log_end_offset();
    (log.last_stable_offset(end), log.aborted_transactions(0, end), log.open_transactions())
}

#[test]
fn transactions_survive_reopen_truncation_and_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig { segment_bytes: 300, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    append(&mut log, &data(9, 0, false)); // 0: plain idempotent
    append(&mut log, &data(1, 0, true)); // 1: txn of producer 1
    append(&mut log, &data(2, 0, true)); // 2: txn of producer 2
    append(&mut log, &data(1, 1, true)); // 3
    assert_eq!(log.last_stable_offset(4), 1);
    assert_eq!(log.last_stable_offset(1), 1);
    assert_eq!(log.last_stable_offset(0), 0);
    assert_eq!(end(&mut log, 1, TxnEnd::Abort), 4);
    // The marker is written but not below the watermark: still unstable.
    assert_eq!(log.last_stable_offset(4), 1);
    assert_eq!(log.last_stable_offset(5), 2);
    log.settle_transactions(5);
    append(&mut log, &data(3, 0, true)); // 5: txn of producer 3
    assert_eq!(end(&mut log, 2, TxnEnd::Commit), 6);
    let aborted = vec![AbortedTxn { producer_id: 1, first_offset: 1, last_offset: 4 }];
    let before = (5, aborted.clone(), vec![(3, 5)]);
    assert_eq!(state(&log), before);
    assert_eq!(log.aborted_transactions(5, 7), vec![]);
    assert!(log.segment_count() > 1, "the markers are spread over segments");

    log.close().expect("close");
    let mut log = Log::open(dir.path(), config, 0).expect("reopen");
    assert_eq!(state(&log), before, "rebuilt from the log on open");

    // Raft replaced the tail from offset 4: the abort marker and what followed are gone.
    log.truncate_from(4, 0).expect("truncate");
    assert_eq!(state(&log), (1, vec![], vec![(1, 1), (2, 2)]));

    // A snapshot restore from a prefix holding the whole log rebuilds the same state.
    let (mut prefix, mut from) = (Vec::new(), 0);
    while from < 4 {
        let bytes = log.read_range(from, 4, 1 << 20).expect("read");
        from = runnel_wire::Batches::new(&bytes).filter_map(Result::ok).last().expect("a batch").0.next_offset();
        prefix.extend(bytes);
    }
    let other = tempfile::tempdir().expect("tempdir");
    let mut restored = Log::open(other.path(), config, 0).expect("open");
    restored.restore(&prefix, &log.producer_snapshot(0), 0, 4, 0).expect("restore");
    assert_eq!(state(&restored), state(&log));

    // A snapshot without batches (retention deleted them at the leader) carries the
    // producers instead: idempotence and open transactions survive, and a reopen keeps them.
    let bare = tempfile::tempdir().expect("tempdir");
    let mut restored = Log::open(bare.path(), config, 0).expect("open");
    restored.restore(&[], &log.producer_snapshot(4), 4, 4, 0).expect("restore");
    let check = |l: &Log| {
        let retry = BatchHeader::validate(&data(9, 0, false)).expect("valid");
        assert_eq!(l.check_producer(&retry, &[]).expect("checked"), Some((0, 0)), "a retry is a duplicate");
        assert_eq!(l.open_transactions(), vec![(1, 1), (2, 2)]);
        assert_eq!(l.last_stable_offset(10), 1);
    };
    check(&restored);
    restored.close().expect("close");
    check(&Log::open(bare.path(), config, 0).expect("reopen"));
}

#[test]
fn producers_outlive_the_segments_retention_deletes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig { segment_bytes: 200, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    append(&mut log, &data(7, 0, false)); // producer 7 writes only here
    for i in 0..6 {
        append(&mut log, &data(8, i, false));
    }
    assert!(log.segment_count() > 2);
    log.delete_records_before(5).expect("delete");
    assert!(log.first_batch_offset() > 0, "the first segment is gone");
    log.close().expect("close");
    let log = Log::open(dir.path(), config, 0).expect("reopen");
    let retry = BatchHeader::validate(&data(7, 0, false)).expect("valid");
    assert_eq!(log.check_producer(&retry, &[]).expect("checked"), Some((0, 0)), "producer 7 remembered");
    let gap = BatchHeader::validate(&data(7, 3, false)).expect("valid");
    assert!(log.check_producer(&gap, &[]).is_err(), "a sequence gap is still seen");
}

#[test]
fn a_marker_from_an_older_epoch_is_fenced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), LogConfig::default(), 0).expect("open");
    let mut b = BatchBuilder::new(0);
    b.push(0, None, Some(b"v"));
    let batch = b
        .finish_transactional(0, ProducerFields { producer_id: 1, producer_epoch: 3, base_sequence: 0 })
        .expect("batch");
    append(&mut log, &batch);
    assert!(log.check_marker(1, 2).is_err());
    assert!(log.check_marker(1, 3).is_ok());
    assert!(log.check_marker(7, 0).is_ok(), "an unknown producer's marker is written (it ends nothing)");
}

/// Transactions version 2: the marker carries the next epoch. It ends the transaction,
/// moves the producer there, and a late batch of the ended transaction is fenced; the
/// next transaction (at the new epoch) is a new one to its coordinator.
#[test]
fn a_marker_at_the_next_epoch_fences_the_ended_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), LogConfig::default(), 0).expect("open");
    let at = |epoch: i16, seq: i32| {
        let mut b = BatchBuilder::new(0);
        b.push(0, None, Some(b"v"));
        b.finish_transactional(0, ProducerFields { producer_id: 1, producer_epoch: epoch, base_sequence: seq })
            .expect("batch")
    };
    append(&mut log, &at(0, 0));
    assert!(log.in_transaction(1, 0));
    assert!(!log.in_transaction(1, 1), "a transaction at the next epoch is not this one");
    log.check_marker(1, 1).expect("a marker at the next epoch");
    append(&mut log, &marker_batch(1, 1, 1, TxnEnd::Commit, 0));
    assert!(!log.in_transaction(1, 0) && !log.in_transaction(1, 1));
    let late = at(0, 1);
    let h = BatchHeader::validate(&late).expect("valid");
    assert!(log.check_producer(&h, &[]).is_err(), "a late batch of the ended transaction is fenced");
    let ahead = at(1, 3);
    let h = BatchHeader::validate(&ahead).expect("valid");
    assert!(log.check_producer(&h, &[]).is_err(), "the new epoch starts at sequence 0");
    append(&mut log, &at(1, 0));
    assert!(log.in_transaction(1, 1));
    assert_eq!(log.open_transactions(), vec![(1, 2)]);
}

fn keyed(key: &str, value: &str, pid: i64, seq: i32, transactional: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new(0);
    b.push(0, Some(key.as_bytes()), Some(value.as_bytes()));
    let producer = ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: seq };
    if transactional {
        b.finish_transactional(0, producer).expect("batch")
    } else {
        b.finish(0, producer).expect("batch")
    }
}

/// (offset, value) of every data record left in the log.
fn values(log: &Log) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while from < log.log_end_offset() {
        // One read returns batches of one segment.
        let bytes = log.read_range(from, log.log_end_offset(), 1 << 20).expect("read");
        for item in runnel_wire::Batches::new(&bytes) {
            let (h, range) = item.expect("batch");
            from = h.next_offset();
            if h.is_control() {
                continue;
            }
            for r in runnel_storage::records_of(&h, &bytes[range]).expect("records").iter() {
                out.push((r.offset, String::from_utf8_lossy(r.value.unwrap_or_default()).into_owned()));
            }
        }
    }
    out
}

#[test]
fn compaction_drops_aborted_records_and_stops_at_the_stable_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 200,
        compact: true,
        delete: false,
        min_cleanable_dirty_ratio: 0.01,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    append(&mut log, &keyed("k", "committed", 9, 0, false)); // 0
    append(&mut log, &keyed("k", "aborted", 1, 0, true)); // 1
    end(&mut log, 1, TxnEnd::Abort); // 2
    append(&mut log, &keyed("j", "open", 2, 0, true)); // 3: still open
    append(&mut log, &keyed("j", "after", 9, 1, false)); // 4
    for i in 0..4 {
        append(&mut log, &keyed("x", "filler", 9, 2 + i, false));
    }
    let hw = log.log_end_offset();
    assert_eq!(log.last_stable_offset(hw), 3);
    let plan = log.clean_plan(hw, 0).expect("a pass is due");
    let cleaned = plan.execute(0).expect("clean");
    log.clean_swap(cleaned, 0).expect("swap");
    let left = values(&log);
    assert!(left.contains(&(0, "committed".into())), "an aborted record hides nothing: {left:?}");
    assert!(!left.iter().any(|(_, v)| v == "aborted"), "aborted records go: {left:?}");
    assert!(left.contains(&(3, "open".into())) && left.contains(&(4, "after".into())), "{left:?}");
    assert!(log.cleaner_point() <= 3, "nothing at or past the stable offset is cleaned");
    // The transaction state is unchanged by the pass, and after a reopen.
    let before = state(&log);
    log.close().expect("close");
    let log = Log::open(dir.path(), config, 0).expect("reopen");
    assert_eq!(state(&log), before);
}

/// Markers in the log (control batches).
fn markers(log: &Log) -> usize {
    let (mut n, mut from) = (0, 0);
    while from < log.log_end_offset() {
        let bytes = log.read_range(from, log.log_end_offset(), 1 << 20).expect("read");
        for item in runnel_wire::Batches::new(&bytes) {
            let (h, _) = item.expect("batch");
            from = h.next_offset();
            n += h.is_control() as usize;
        }
    }
    n
}

/// Kafka's rule: a marker goes once its transaction has nothing left in the log and the
/// marker is `delete.retention.ms` old. Transactions that overwrite one key (offsets under
/// exactly-once) then leave one marker, not one each.
#[test]
fn compaction_removes_the_markers_of_transactions_with_nothing_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        segment_bytes: 200,
        compact: true,
        delete: false,
        min_cleanable_dirty_ratio: 0.01,
        delete_retention_ms: 1_000,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    for (seq, value) in ["v0", "v1", "v2"].iter().enumerate() {
        append(&mut log, &keyed("k", value, 1, seq as i32, true));
        end(&mut log, 1, TxnEnd::Commit);
    }
    let filler = |log: &mut Log, from: i32| {
        for i in 0..4 {
            append(log, &keyed(&format!("x{i}"), "filler", 9, from + i, false));
        }
    };
    filler(&mut log, 0);
    // Younger than delete.retention.ms (markers are stamped at 0): every marker stays.
    let hw = log.log_end_offset();
    let cleaned = log.clean_plan(hw, 500).expect("a pass is due").execute(500).expect("clean");
    log.clean_swap(cleaned, 500).expect("swap");
    assert_eq!(markers(&log), 3);
    assert_eq!(values(&log).iter().filter(|(_, v)| v.starts_with('v')).count(), 1, "{:?}", values(&log));
    // Old enough: the first two transactions have nothing left, the last one has v2.
    filler(&mut log, 4);
    let hw = log.log_end_offset();
    let cleaned = log.clean_plan(hw, 10_000).expect("a pass is due").execute(10_000).expect("clean");
    let stats = log.clean_swap(cleaned, 10_000).expect("swap");
    assert_eq!((stats.markers_removed, markers(&log)), (2, 1));
    assert!(values(&log).contains(&(4, "v2".into())), "{:?}", values(&log));
    let before = state(&log);
    assert_eq!(before.2, vec![], "no transaction looks open");
    log.close().expect("close");
    let log = Log::open(dir.path(), config, 0).expect("reopen");
    assert_eq!(state(&log), before, "the same state rebuilt from the log");
}
