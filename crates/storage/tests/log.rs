//! The partition log's contract: offsets assigned in order, reads return whole committed
//! batches, a crash's torn tail is cut on reopen, retention and DeleteRecords move the log
//! start, idempotent retries are answered from the log without a second copy, and the
//! written pages are handed to the page-cache tail once each.

use runnel_storage::{AppendError, Log, LogConfig, ProducerError, ReadError};
use runnel_wire::batch::{BatchHeader, Batches};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use std::io::Write;

/// `n` unkeyed 100-byte records with timestamps ts, ts+1, ...
fn batch(n: usize, ts: i64, pid: i64, seq: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new(ts);
    let value = [b'x'; 100];
    for i in 0..n {
        b.push(ts + i as i64, None, Some(&value));
    }
    b.finish(CODEC_NONE, ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: seq }).expect("encode")
}

fn append(log: &mut Log, b: &[u8]) -> Result<runnel_storage::AppendInfo, AppendError> {
    let h = BatchHeader::validate_for_append(b).expect("valid");
    log.append(b, &h, 0)
}

/// Reads like a consumer: one segment per read, from `from` to the log end.
fn read_all(log: &Log, mut from: i64) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    while from < log.log_end_offset() {
        let plan = log.read(from, 1 << 30, log.log_end_offset(), true).expect("read");
        let bytes = plan.execute().expect("execute");
        let batches: Vec<BatchHeader> = Batches::new(&bytes).map(|r| r.expect("whole batch").0).collect();
        from = batches.last().expect("progress").next_offset();
        out.extend(batches);
    }
    out
}

fn small_segments() -> LogConfig {
    LogConfig { segment_bytes: 2000, index_interval_bytes: 500, ..LogConfig::default() }
}

#[test]
fn appends_get_consecutive_offsets_and_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("open");
    for i in 0..50 {
        let info = append(&mut log, &batch(3, i * 10, -1, 0)).expect("append");
        assert_eq!((info.base_offset, info.last_offset), (i * 3, i * 3 + 2));
    }
    assert!(log.segment_count() > 5, "small segments roll");
    assert_eq!(log.log_end_offset(), 150);
    // A read from the middle of a batch starts at that batch.
    let got = log.read(31, 1 << 20, 150, true).expect("plan").execute().expect("read");
    let first = Batches::new(&got).next().expect("one").expect("whole").0;
    assert_eq!(first.base_offset, 30);
    // The upper bound (high watermark) cuts the read.
    let got = log.read(0, 1 << 20, 9, true).expect("plan").execute().expect("read");
    let offsets: Vec<i64> = Batches::new(&got).map(|r| r.expect("b").0.base_offset).collect();
    assert_eq!(offsets, vec![0, 3, 6]);
    // max_bytes smaller than one batch still returns that batch when min_one is set.
    let got = log.read(0, 1, 150, true).expect("plan").execute().expect("read");
    assert_eq!(Batches::new(&got).count(), 1);
    assert!(log.read(0, 1, 150, false).expect("plan").execute().expect("read").is_empty());
    assert!(matches!(log.read(151, 100, 150, true), Err(ReadError::OffsetOutOfRange { .. })));
}

#[test]
fn reopen_after_crash_truncates_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let mut log = Log::open(dir.path(), small_segments(), 0).expect("open");
        for _ in 0..20 {
            append(&mut log, &batch(2, 0, -1, 0)).expect("append");
        }
        // no close(): like kill -9
    }
    let newest = newest_segment(dir.path());
    let mut f = std::fs::OpenOptions::new().append(true).open(&newest).expect("open segment");
    f.write_all(&batch(2, 0, -1, 0)[..40]).expect("torn write");
    drop(f);
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(read_all(&log, 0).len(), 20);
    let info = append(&mut log, &batch(2, 0, -1, 0)).expect("append after recovery");
    assert_eq!(info.base_offset, 40);

    // A flipped bit in the last batch is caught by its CRC and cut as well.
    log.close().expect("close");
    drop(log);
    std::fs::remove_file(dir.path().join("checkpoint")).expect("forget the clean point");
    let newest = newest_segment(dir.path());
    let bytes = std::fs::read(&newest).expect("read");
    let mut corrupt = bytes.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    std::fs::write(&newest, &corrupt).expect("corrupt");
    let log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert_eq!(log.log_end_offset(), 40);
}

fn newest_segment(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max()
        .expect("a segment")
}

#[test]
fn idempotent_retries_are_not_stored_twice_even_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), LogConfig::default(), 0).expect("open");
    let b0 = batch(5, 0, 42, 0);
    assert_eq!(append(&mut log, &b0).expect("first").base_offset, 0);
    let again = append(&mut log, &b0).expect("retry");
    assert!(again.duplicate);
    assert_eq!((again.base_offset, again.last_offset), (0, 4));
    assert!(matches!(
        append(&mut log, &batch(1, 0, 42, 7)),
        Err(AppendError::Producer(ProducerError::OutOfOrder { expected: 5, got: 7 }))
    ));
    drop(log);
    let mut log = Log::open(dir.path(), LogConfig::default(), 0).expect("reopen");
    assert!(append(&mut log, &b0).expect("retry after restart").duplicate);
    assert_eq!(append(&mut log, &batch(1, 0, 42, 5)).expect("next").base_offset, 5);
    assert_eq!(log.log_end_offset(), 6);
}

#[test]
fn retention_and_delete_records_move_the_log_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = small_segments();
    cfg.retention_bytes = 4000;
    let mut log = Log::open(dir.path(), cfg, 0).expect("open");
    for i in 0..60 {
        append(&mut log, &batch(2, 1000 + i, -1, 0)).expect("append");
    }
    let before = log.segment_count();
    assert!(log.enforce_retention(0).expect("retention") > 0);
    assert!(log.segment_count() < before);
    assert!(log.size_bytes() <= 4000 + 2000);
    let start = log.log_start_offset();
    assert!(start > 0);
    assert_eq!(read_all(&log, start)[0].base_offset, start);
    assert!(matches!(log.read(start - 1, 10, 120, true), Err(ReadError::OffsetOutOfRange { .. })));

    assert_eq!(log.delete_records_before(101).expect("delete records"), 101);
    drop(log);
    let log = Log::open(dir.path(), cfg, 0).expect("reopen");
    assert_eq!(log.log_start_offset(), 101, "log start survives a restart");

    // By timestamp: first batch with a record at or after ts.
    let b = log.batch_for_timestamp(1055).expect("planned").execute().expect("read").expect("found");
    let h = BatchHeader::parse(&b).expect("header");
    assert!(h.max_timestamp >= 1055 && h.base_timestamp <= 1055);
    let m = log.batch_with_max_timestamp().expect("planned").execute().expect("read").expect("found");
    assert_eq!(BatchHeader::parse(&m).expect("header").max_timestamp, 1060);
}

#[test]
fn time_retention_rolls_and_deletes_an_expired_active_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig { retention_ms: 1000, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), cfg, 0).expect("open");
    append(&mut log, &batch(2, 5_000, -1, 0)).expect("append");
    assert_eq!(log.enforce_retention(5_500).expect("not yet"), 0);
    assert_eq!(log.enforce_retention(10_000).expect("expired"), 1);
    assert_eq!(log.log_start_offset(), 2);
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn replicated_appends_and_truncation_at_any_batch_boundary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("open");
    // Batches from a leader, stamped at the log end as they are written (the bytes given
    // are not changed); producer state follows them.
    let mut bases = Vec::new();
    for i in 0..40 {
        let b = batch(2, i, 7, i as i32 * 2);
        let base = log.log_end_offset();
        let h = log.append_at_end(&b, 3, 0).expect("append");
        assert_eq!((h.base_offset, h.partition_leader_epoch), (base, 3));
        assert_eq!(b, batch(2, i, 7, i as i32 * 2));
        bases.push(base);
    }
    let written = read_all(&log, 0);
    assert!(written.iter().all(|h| h.partition_leader_epoch == 3));
    assert!(log.segment_count() > 3);
    // Cut one batch at a time from the top: every batch boundary, segment starts included.
    for k in (20..40).rev() {
        log.truncate_from(bases[k], 0).expect("truncate");
        assert_eq!(log.log_end_offset(), bases[k]);
    }
    let kept: Vec<i64> = read_all(&log, 0).iter().map(|h| h.base_offset).collect();
    assert_eq!(kept, bases[..20].to_vec());
    // Producer state was rebuilt: the next sequence after the 20 kept batches is 40.
    let next = batch(2, 99, 7, 40);
    let h = BatchHeader::validate_for_append(&next).expect("valid");
    assert_eq!(log.check_producer(&h, &[]).expect("in order"), None);
    let dup = batch(2, 99, 7, 38);
    let hd = BatchHeader::validate_for_append(&dup).expect("valid");
    assert_eq!(log.check_producer(&hd, &[]).expect("dup"), Some((bases[19], bases[19] + 1)));
    drop(log);
    let log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert_eq!(log.log_end_offset(), bases[20]);
}

/// Found while fuzzing (docs/fuzzing.md): a compressed batch may claim up to 2^31 records
/// (its records are not counted on produce), so a few of them would make one segment span
/// more offsets than its index's 32-bit relative offsets hold. As in Kafka, the segment
/// rolls first, and every batch stays findable by offset.
#[test]
fn a_segment_never_spans_more_than_i32_max_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), LogConfig::default(), 0).expect("open");
    // The header claims 2^30 records (last offset delta at bytes 23..27, record count at
    // 57..61); the CRC no longer matches, which appending does not check again.
    let mut b = batch(1, 1_000, -1, -1);
    b[23..27].copy_from_slice(&((1i32 << 30) - 1).to_be_bytes());
    b[57..61].copy_from_slice(&(1i32 << 30).to_be_bytes());
    let h = BatchHeader::parse(&b).expect("parses");
    assert_eq!((h.last_offset_delta, h.records_count), ((1 << 30) - 1, 1 << 30));
    let mut bases = Vec::new();
    for _ in 0..5 {
        bases.push(log.append(&b, &h, 1_000).expect("append").base_offset);
    }
    assert_eq!(bases, (0..5).map(|i| i << 30).collect::<Vec<i64>>());
    assert!(log.segment_count() >= 3, "{} segments for {} offsets", log.segment_count(), 5i64 << 30);
    for base in bases {
        let bytes = log.read(base, 1 << 20, log.log_end_offset(), true).expect("read").execute().expect("execute");
        let first = Batches::new(&bytes).next().map(|r| r.expect("whole batch").0.base_offset);
        assert_eq!(first, Some(base), "the batch at {base} is found by its offset");
    }
}

/// A close in steps records a clean shutdown as a one-step close does; a log that rolled
/// (writing its own checkpoint) between the steps closes the one-step way instead, so an
/// older checkpoint never replaces a newer one.
#[test]
fn a_close_in_steps_leaves_a_clean_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("open");
    for i in 0..5 {
        append(&mut log, &batch(3, i, -1, 0)).expect("append");
    }
    assert!(!log.synced_to_end());
    let files = log.close_stage().expect("stage");
    runnel_storage::sync_files(&files, false).expect("sync");
    log.close_commit().expect("commit");
    drop(log);
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert!(log.synced_to_end());
    assert_eq!(log.log_end_offset(), 15);
    let _ = log.close_stage().expect("stage");
    for i in 0..20 {
        append(&mut log, &batch(3, i, -1, 0)).expect("append rolls");
    }
    log.close_commit().expect("falls back to a full close");
    drop(log);
    let log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert!(log.synced_to_end());
    assert_eq!(log.log_end_offset(), 75);
}

/// A log whose checkpoint already records a clean shutdown, with nothing appended since it
/// was read or written, closes without writing a file; one that moved writes it again.
#[test]
fn an_unchanged_log_closes_without_writing() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = || std::fs::metadata(dir.path().join("checkpoint")).map(|m| m.ino()).ok();
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("open");
    assert_eq!(log.close_stage().expect("stage").len(), 2, "a new log has no checkpoint");
    assert!(log.close_commit().expect("commit"), "put in place");
    let first = checkpoint().expect("written");
    assert!(log.close_stage().expect("stage").is_empty(), "the checkpoint says it all");
    assert!(!log.close_commit().expect("commit"));
    drop(log);
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert!(log.close_stage().expect("stage").is_empty(), "nothing appended since the open");
    assert!(!log.close_commit().expect("commit"));
    assert_eq!(checkpoint(), Some(first), "the file was left in place");
    append(&mut log, &batch(3, 0, -1, 0)).expect("append");
    let files = log.close_stage().expect("stage");
    assert_eq!(files.len(), 2, "an append since");
    runnel_storage::sync_files(&files, false).expect("sync");
    assert!(log.close_commit().expect("commit"));
    assert_ne!(checkpoint(), Some(first));
    // A deletion writes the checkpoint a close would write next.
    append(&mut log, &batch(3, 1, -1, 0)).expect("append");
    log.close().expect("close");
    log.delete_records_before(3).expect("delete");
    assert!(log.close_stage().expect("stage").is_empty());
    assert!(!log.close_commit().expect("commit"));
    drop(log);
    let log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert!(log.synced_to_end());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (3, 6));
    // A checkpoint that says less than the log holds (a crash after appends) is rewritten.
    drop(log);
    std::fs::write(dir.path().join("checkpoint"), "v2 3 3 0\n").expect("write");
    let mut log = Log::open(dir.path(), small_segments(), 0).expect("reopen");
    assert_eq!(log.close_stage().expect("stage").len(), 2, "the recovery point is behind the end");
    assert!(log.close_commit().expect("commit"));
    drop(log);
    assert_eq!(std::fs::read_to_string(dir.path().join("checkpoint")).expect("read"), "v2 6 3 0\n");
}

#[test]
fn a_located_slice_holds_exactly_the_batches_a_read_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig { segment_bytes: 64 * 1024, index_interval_bytes: 500, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    // Batches of 1 to 60 records: some headers share a window of the locator, some do not.
    let mut ts = 0;
    for i in 0..200 {
        let n = 1 + (i * 7) % 60;
        append(&mut log, &batch(n, ts, -1, 0)).expect("append");
        ts += n as i64;
    }
    let end = log.log_end_offset();
    let mut checked = 0;
    for from in (0..end).step_by(13) {
        for max_bytes in [1, 200, 4000, 5000, 70_000, 1 << 20] {
            for upper in [from, from + 1, from + 150, end] {
                for min_one in [true, false] {
                    let read = log.read(from, max_bytes, upper, min_one).expect("plan").execute().expect("read");
                    let slice = log.read(from, max_bytes, upper, min_one).expect("plan").locate().expect("locate");
                    // The last batches of a segment are located from memory; read from the
                    // file, their headers say the same.
                    let from_file = log
                        .read(from, max_bytes, upper, min_one)
                        .expect("plan")
                        .forget_known()
                        .locate()
                        .expect("locate");
                    assert_eq!(
                        slice.as_ref().map(|s| (s.pos, s.len, s.next_offset)),
                        from_file.map(|s| (s.pos, s.len, s.next_offset)),
                        "from {from} max {max_bytes} upper {upper}"
                    );
                    if let Some((first, _)) = Batches::new(&read).next().and_then(Result::ok) {
                        assert!(first.base_offset <= from && from <= first.last_offset(), "{from} in {first:?}");
                    }
                    match slice {
                        None => assert!(read.is_empty(), "from {from} max {max_bytes} upper {upper}"),
                        Some(s) => {
                            assert_eq!(s.read().expect("slice"), read, "from {from} max {max_bytes} upper {upper}");
                            let last = Batches::new(&read).map(|r| r.expect("whole").0).last().expect("a batch");
                            assert_eq!(s.next_offset, last.next_offset());
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 100, "{checked} non-empty reads compared");
}

/// Found by `tests/test_page_cache_tail.py` under load: a round whose entries rolled the log
/// more than once handed out only the last rolled segment, and the others stayed cached.
#[test]
fn a_read_is_planned_without_reading_the_file_and_finds_its_batch_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig { segment_bytes: 1 << 20, index_interval_bytes: 500, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    for i in 0..100 {
        append(&mut log, &batch(2, i * 2, -1, 0)).expect("append");
    }
    let end = log.log_end_offset();
    // Behind the last batches kept in memory, a plan finds its batch in the file; at the
    // tail it knows it already.
    let behind = log.read(11, 1 << 20, end, true).expect("plan");
    assert!(behind.seeks());
    assert!(!log.read(end - 3, 1 << 20, end, true).expect("plan").seeks());
    let first = |bytes: &[u8]| Batches::new(bytes).next().expect("a batch").expect("whole").0;
    assert_eq!(first(&behind.execute().expect("read")).base_offset, 10);

    // With the file emptied behind the log's back, planning still succeeds (it reads
    // nothing: it runs under the partition lock), and the read fails when it is carried out.
    let seg = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a segment");
    let bytes = std::fs::read(&seg).expect("read segment");
    std::fs::OpenOptions::new().write(true).open(&seg).expect("open").set_len(0).expect("empty it");
    let plan = log.read(11, 1 << 20, end, true).expect("planned without a read");
    let e = plan.execute().expect_err("the file is empty");
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    let plan = log.read(end - 3, 1 << 20, end, true).expect("planned without a read");
    assert!(plan.execute().is_err(), "the file is empty");
    std::fs::write(&seg, bytes).expect("restore");
    assert_eq!(first(&log.read(11, 1 << 20, end, true).expect("plan").execute().expect("read")).base_offset, 10);
}

/// A Raft leader's read of a follower's entries into the page cache runs on into the next
/// segments while its bytes last, and only as far as the entries asked.
#[test]
fn a_warm_runs_on_into_the_next_segments_as_far_as_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig { segment_bytes: 20_000, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    for i in 0..60 {
        append(&mut log, &batch(10, i * 10, -1, 0)).expect("append");
    }
    let (segments, end) = (log.segment_count(), log.log_end_offset());
    assert!(segments >= 4, "{segments} segments");
    assert_eq!(log.plan_warm(0, end, 1 << 20).expect("plan").segments(), segments);
    assert_eq!(log.plan_warm(0, end, 100).expect("plan").segments(), 1, "the bytes ran out");
    assert_eq!(log.plan_warm(0, 10, 1 << 20).expect("plan").segments(), 1, "asked for the first batch");
    assert_eq!(log.plan_warm(end - 10, end, 1 << 20).expect("plan").segments(), 1, "the last segment");

    let files = runnel_storage::fault::drop_segment_pages(dir.path()).expect("drop pages");
    assert_eq!(files.len(), segments);
    let size = |f: &std::fs::File| f.metadata().expect("metadata").len();
    if files.iter().any(|f| runnel_storage::in_page_cache(f, 0, size(f)).is_none()) {
        return; // a kernel that cannot tell (before 6.5): nothing more to check
    }
    let plan = log.plan_warm(0, end, 1 << 20).expect("plan");
    assert!(plan.may_wait(), "dropped");
    plan.warm_up().expect("read in");
    assert!(files.iter().all(|f| runnel_storage::in_page_cache(f, 0, size(f)) == Some(true)), "every segment read in");
    assert!(!log.plan_warm(0, end, 1 << 20).expect("plan").may_wait());
}

#[test]
fn take_written_hands_out_every_segment_rolled_since_the_last_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig { segment_bytes: 20_000, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    for i in 0..60 {
        append(&mut log, &batch(10, i * 10, -1, 0)).expect("append");
    }
    let segments = log.segment_count();
    assert!(segments >= 4, "{segments} segments");
    let mut w = Vec::new();
    log.take_written(&mut w);
    // One range per segment, each from its start: every rolled one whole, the active one
    // up to its last whole page.
    assert_eq!(w.len(), segments, "{w:?}");
    assert!(w.iter().all(|r| r.range().0 == 0), "{w:?}");
    let pages: u64 = w.iter().map(|r| (r.range().1 - r.range().0) / 4096).sum();
    assert!(pages >= log.size_bytes() / 4096, "{pages} pages of {} bytes", log.size_bytes());
    let mut again = Vec::new();
    log.take_written(&mut again);
    assert!(again.is_empty(), "handed out once: {again:?}");

    // A log whose writes no one takes (no page-cache tail) holds a bounded number: here
    // every append rolls, 59 times, and the newest 16 rolled rests are kept (the active
    // segment holds less than a page, so nothing of it).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), LogConfig { segment_bytes: 1, ..LogConfig::default() }, 0).expect("open");
    for i in 0..60 {
        append(&mut log, &batch(10, i * 10, -1, 0)).expect("append");
    }
    assert_eq!(log.segment_count(), 60);
    let mut w = Vec::new();
    log.take_written(&mut w);
    assert_eq!(w.len(), 16, "{w:?}");
}

#[test]
fn take_written_hands_out_each_whole_page_once_including_a_rolled_segments_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig { segment_bytes: 20_000, ..LogConfig::default() };
    let mut log = Log::open(dir.path(), config, 0).expect("open");
    let mut taken = Vec::new();
    // Not yet a whole page: nothing.
    append(&mut log, &batch(10, 0, -1, 0)).expect("append");
    log.take_written(&mut taken);
    assert!(taken.is_empty(), "{taken:?}");
    let (mut next, mut pages) = (0, 0u64);
    let mut rolled = 0;
    for i in 1..60 {
        append(&mut log, &batch(10, i * 10, -1, 0)).expect("append");
        let mut w = Vec::new();
        log.take_written(&mut w);
        for r in &w {
            let (from, to) = r.range();
            // Contiguous with what came before in the same file, whole pages (a rolled
            // segment's last partial page included).
            assert_eq!(from % 4096, 0, "{w:?}");
            assert_eq!(to % 4096, 0, "{w:?}");
            if from == 0 && next != 0 {
                rolled += 1;
            } else {
                assert_eq!(from, next, "{w:?}");
            }
            next = to;
            pages += (to - from) / 4096;
        }
        assert!(w.len() <= 2);
        taken.extend(w);
    }
    assert!(log.segment_count() >= 3, "the segments rolled");
    assert!(rolled >= 1, "a new segment's pages came after a rolled one's");
    assert!(pages >= log.size_bytes() / 4096 - 1, "{pages} pages of {} bytes", log.size_bytes());
    // Dropping them from the page cache leaves the data.
    taken.iter().for_each(|w| w.evict());
    assert_eq!(read_all(&log, 0).len(), 60);
}
