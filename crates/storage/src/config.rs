//! A log's settings: the storage side of the topic configs (segment size and age,
//! retention, compaction), and when a segment rolls.

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogConfig {
    /// Roll to a new segment before the active one would grow past this.
    pub segment_bytes: u64,
    /// Roll the active segment once it is this old (and not empty).
    pub segment_ms: i64,
    /// Each segment rolls up to this much earlier than `segment_ms` (a fixed share per
    /// segment), so partitions created together do not all roll at once.
    pub segment_jitter_ms: i64,
    /// Delete segments whose newest record is older than this; negative: keep forever.
    pub retention_ms: i64,
    /// Delete the oldest segments while the log is bigger than this; negative: no limit.
    pub retention_bytes: i64,
    /// Bytes between two sparse offset-index entries.
    pub index_interval_bytes: u64,
    /// `cleanup.policy` has `delete`: retention by time and size applies.
    pub delete: bool,
    /// `cleanup.policy` has `compact`: the cleaner keeps the latest record per key.
    pub compact: bool,
    /// Clean once the dirty part is at least this share of the cleanable log.
    pub min_cleanable_dirty_ratio: f64,
    /// Tombstones stay readable this long before the cleaner removes them.
    pub delete_retention_ms: i64,
    /// Records younger than this are never compacted.
    pub min_compaction_lag_ms: i64,
    /// Dirty records older than this are compacted whatever the dirty ratio.
    pub max_compaction_lag_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_jitter_ms: 0,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            delete: true,
            compact: false,
            min_cleanable_dirty_ratio: 0.5,
            delete_retention_ms: 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

/// How much earlier than `segment_ms` the segment starting at `base_offset` rolls: a
/// share of `segment.jitter.ms` (at most `segment.ms` - 1) fixed by the base offset.
pub(crate) fn roll_jitter(c: &LogConfig, base_offset: i64) -> i64 {
    let span = c.segment_jitter_ms.min(c.segment_ms - 1);
    if span <= 0 {
        return 0;
    }
    // splitmix64 of the base offset: evenly spread, the same after a restart.
    let mut z = (base_offset as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % (span as u64 + 1)) as i64
}

/// Largest segment the u32 positions of the offset index can address.
pub const SEGMENT_BYTES_MAX: u64 = i32::MAX as u64;
