//! Log compaction's contract: after a pass, each key's latest record is still there at the
//! offset it was written to, older ones are gone, tombstones go only once they are old,
//! every codec survives the rewrite, the producer state is unchanged, and a crash at any
//! point of the swap leaves either the old or the new segments, never a mix.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use runnel_storage::{Log, LogConfig};
use runnel_wire::batch::{BatchHeader, Batches};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};

/// One batch of (key, value) records; a `None` value is a tombstone.
fn keyed(records: &[(&str, Option<&str>)], ts: i64, pid: i64, seq: i32, codec: i16) -> Vec<u8> {
    let mut b = BatchBuilder::new(ts);
    for (k, v) in records {
        b.push(ts, Some(k.as_bytes()), v.map(str::as_bytes));
    }
    let producer = ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: seq };
    b.finish(codec, producer).expect("encode")
}

fn compacted() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 200,
        compact: true,
        delete: false,
        min_cleanable_dirty_ratio: 0.01,
        ..LogConfig::default()
    }
}

/// Every record a consumer reading from the start sees: (offset, key, value).
fn consume(log: &Log) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    let mut from = log.log_start_offset();
    while from < log.log_end_offset() {
        let bytes = log.read(from, 1 << 20, log.log_end_offset(), true).expect("plan").execute().expect("read");
        let mut next = from;
        for item in Batches::new(&bytes) {
            let (h, range) = item.expect("whole batch");
            BatchHeader::validate(&bytes[range.clone()]).expect("a rewritten batch is valid");
            let mut b = Bytes::copy_from_slice(&bytes[range]);
            let set = RecordBatchDecoder::decode(&mut b).expect("decode");
            for r in set.records {
                let text = |b: Option<Bytes>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
                out.push((r.offset, text(r.key).expect("keyed"), text(r.value)));
            }
            next = h.next_offset();
        }
        if next == from {
            break;
        }
        from = next;
    }
    out
}

fn clean(log: &mut Log, now_ms: i64) -> runnel_storage::CleanStats {
    let plan = log.clean_plan(log.log_end_offset(), now_ms).expect("something to clean");
    let cleaned = plan.execute(now_ms).expect("execute");
    log.clean_swap(cleaned, now_ms).expect("swap")
}

/// Writes `rounds` rounds of updates to keys k0..k9 and returns, per key, the offset and
/// value of its last write.
fn write_updates(log: &mut Log, rounds: usize, compression: i16) -> BTreeMap<String, (i64, String)> {
    let mut latest = BTreeMap::new();
    for round in 0..rounds {
        let owned: Vec<(String, String)> = (0..10).map(|k| (format!("k{k}"), format!("v{round}-{k}"))).collect();
        for pair in owned.chunks(5) {
            let recs: Vec<(&str, Option<&str>)> = pair.iter().map(|(k, v)| (k.as_str(), Some(v.as_str()))).collect();
            let b = keyed(&recs, 1_000, -1, -1, compression);
            let h = BatchHeader::validate_for_append(&b).expect("valid");
            let info = log.append(&b, &h, 0).expect("append");
            for (i, (k, v)) in pair.iter().enumerate() {
                latest.insert(k.clone(), (info.base_offset + i as i64, v.clone()));
            }
        }
    }
    latest
}

#[test]
fn keeps_the_latest_record_per_key_at_its_offset_for_every_codec() {
    for compression in [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = Log::open(dir.path(), compacted(), 0).expect("open");
        write_updates(&mut log, 30, compression);
        let before = log.segment_count();
        assert!(before > 5, "{compression:?}: small segments roll");
        let stats = clean(&mut log, 10_000);
        assert!(stats.records_removed > 0 && stats.bytes_after < stats.bytes_before, "{compression:?}: {stats:?}");
        // Like Kafka, a pass groups segments by their size before cleaning, so the small
        // cleaned segments merge on the next pass.
        let latest = write_updates(&mut log, 30, compression);
        let end = log.log_end_offset();
        let stats = clean(&mut log, 10_000);
        assert!(stats.segments_after < stats.segments_before, "{compression:?}: cleaned segments merge: {stats:?}");
        assert_eq!(log.log_end_offset(), end, "compaction never moves the log end");
        let seen = consume(&log);
        // Records in the active segment are not compacted yet; the latest of each key is
        // present exactly once at its original offset, and offsets only grow.
        for (k, (offset, value)) in &latest {
            let hits: Vec<_> = seen.iter().filter(|(o, key, _)| key == k && o == offset).collect();
            assert_eq!(hits.len(), 1, "{compression:?}: {k} at {offset}");
            assert_eq!(hits[0].2.as_deref(), Some(value.as_str()));
        }
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{compression:?}: offsets ascend");
        let compacted_part: Vec<_> = seen.iter().filter(|(o, _, _)| *o < log.cleaner_point()).collect();
        let mut keys: Vec<&String> = compacted_part.iter().map(|(_, k, _)| k).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "{compression:?}: one record per key in the cleaned part");
        // Reopening reads the same thing.
        log.close().expect("close");
        drop(log);
        let log = Log::open(dir.path(), compacted(), 0).expect("reopen");
        assert_eq!(consume(&log), seen, "{compression:?}: survives reopen");
    }
}

#[test]
fn tombstones_stay_until_delete_retention_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig { delete_retention_ms: 1_000, ..compacted() };
    let mut log = Log::open(dir.path(), cfg, 0).expect("open");
    for round in 0..20 {
        let v = format!("v{round}");
        let recs: Vec<(&str, Option<&str>)> = vec![("a", Some(&v)), ("b", Some(&v)), ("gone", Some(&v))];
        let b = keyed(&recs, 1_000, -1, -1, CODEC_NONE);
        log.append(&b, &BatchHeader::validate_for_append(&b).expect("valid"), 0).expect("append");
    }
    let b = keyed(&[("gone", None)], 1_000, -1, -1, CODEC_NONE);
    let tomb = log.append(&b, &BatchHeader::validate_for_append(&b).expect("valid"), 0).expect("append").base_offset;
    // Push the tombstone out of the active segment.
    for round in 0..20 {
        let v = format!("w{round}");
        let b = keyed(&[("a", Some(&v))], 1_000, -1, -1, CODEC_NONE);
        log.append(&b, &BatchHeader::validate_for_append(&b).expect("valid"), 0).expect("append");
    }
    // Young tombstone: "gone" is reduced to its tombstone.
    clean(&mut log, 1_500);
    let seen = consume(&log);
    let gone: Vec<_> = seen.iter().filter(|(_, k, _)| k == "gone").collect();
    assert_eq!(gone.len(), 1);
    assert_eq!((gone[0].0, gone[0].2.clone()), (tomb, None));
    // Later (new dirty data to trigger a pass), the tombstone itself goes.
    for round in 0..20 {
        let v = format!("x{round}");
        let b = keyed(&[("b", Some(&v))], 5_000, -1, -1, CODEC_NONE);
        log.append(&b, &BatchHeader::validate_for_append(&b).expect("valid"), 0).expect("append");
    }
    clean(&mut log, 10_000);
    assert!(consume(&log).iter().all(|(_, k, _)| k != "gone"), "old tombstone removed");
}

#[test]
fn producer_state_survives_compaction_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), compacted(), 0).expect("open");
    // Producer 7 writes key "p" once; everyone else overwrites it later.
    let first = keyed(&[("p", Some("from-7"))], 1_000, 7, 0, CODEC_NONE);
    let info = log.append(&first, &BatchHeader::validate_for_append(&first).expect("valid"), 0).expect("append");
    write_updates(&mut log, 5, CODEC_NONE);
    for i in 0..20 {
        let v = format!("later{i}");
        let b = keyed(&[("p", Some(&v))], 1_000, -1, -1, CODEC_NONE);
        log.append(&b, &BatchHeader::validate_for_append(&b).expect("valid"), 0).expect("append");
    }
    clean(&mut log, 10_000);
    assert!(consume(&log).iter().all(|(_, _, v)| v.as_deref() != Some("from-7")), "overwritten record removed");
    log.close().expect("close");
    drop(log);
    let mut log = Log::open(dir.path(), compacted(), 0).expect("reopen");
    // A retry of producer 7's batch is still recognised (its emptied batch was kept).
    let again = log.append(&first, &BatchHeader::validate_for_append(&first).expect("valid"), 0).expect("retry");
    assert!(again.duplicate, "retry after compaction is a duplicate");
    assert_eq!(again.base_offset, info.base_offset);
}

#[test]
fn a_pass_interrupted_before_the_swap_leaves_the_old_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = Log::open(dir.path(), compacted(), 0).expect("open");
    write_updates(&mut log, 20, CODEC_NONE);
    let before = consume(&log);
    let plan = log.clean_plan(log.log_end_offset(), 10_000).expect("plan");
    let cleaned = plan.execute(10_000).expect("execute");
    // Crash: the .cleaned files exist, nothing was swapped.
    drop(cleaned);
    drop(log);
    let leftovers = || {
        std::fs::read_dir(dir.path())
            .expect("ls")
            .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".cleaned")))
            .count()
    };
    assert!(leftovers() > 0);
    let log = Log::open(dir.path(), compacted(), 0).expect("reopen");
    assert_eq!(leftovers(), 0, "unfinished files removed");
    assert_eq!(consume(&log), before, "old segments intact");
}

#[test]
fn a_compression_bomb_is_refused_at_the_decompression_bound() {
    // One keyed record whose value is 65 MiB of zeros: some tens of KiB with zstd, a batch
    // any client could send to a compacted topic. Reading its records (the key check on
    // produce, the cleaner) stops at runnel_wire's bound instead of inflating it all.
    let value = vec![0u8; runnel_wire::build::DECOMPRESSED_BYTES_MAX + (1 << 20)];
    let mut b = BatchBuilder::new(1);
    b.push(1, Some(b"k"), Some(&value));
    let batch = b.finish(CODEC_ZSTD, ProducerFields::NONE).expect("batch");
    drop(value);
    assert!(batch.len() < 1 << 20, "the bomb is small: {} bytes", batch.len());
    let h = BatchHeader::validate_for_append(&batch).expect("a valid batch");
    let err = runnel_storage::all_records_keyed(&h, &batch).expect_err("refused");
    assert!(err.to_string().contains("more than"), "{err}");
    // A batch within the bound still reads.
    let ok = keyed(&[("k", Some("v"))], 1, -1, -1, CODEC_ZSTD);
    let h = BatchHeader::validate_for_append(&ok).expect("valid");
    assert!(runnel_storage::all_records_keyed(&h, &ok).expect("readable"));
}
