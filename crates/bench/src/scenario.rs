//! Named workloads from the published Kafka and Redpanda benchmarks (see MEASURING.md).
//! Command-line knobs given with a scenario override its settings.

use crate::Workload;

pub const NAMES: &[&str] = &["durable-512", "tiny-8", "lz4-1k", "latency-1k", "keyed-many", "partitions-N"];

/// The workload of a scenario; `partitions-N` takes its partition count from the name.
pub fn scenario(name: &str) -> Option<Workload> {
    let base = Workload { replication_factor: 3, acks: -1, idempotent: true, ..Workload::default() };
    let w = match name {
        "durable-512" => {
            Workload { partitions: 12, record_bytes: (512, 512), batch_bytes: 128 << 10, linger_ms: 5, ..base }
        }
        "tiny-8" => Workload { partitions: 100, record_bytes: (8, 8), batch_bytes: 128 << 10, linger_ms: 5, ..base },
        "lz4-1k" => Workload {
            partitions: 72,
            record_bytes: (1024, 1024),
            compression: "lz4".into(),
            codec: 3,
            batch_bytes: 128 << 10,
            linger_ms: 50,
            ..base
        },
        "latency-1k" => Workload { partitions: 1, record_bytes: (100, 100), rate: Some(1000.0), linger_ms: 0, ..base },
        "keyed-many" => Workload {
            partitions: 24,
            producers: 50,
            record_bytes: (1024, 1024),
            keys: Some(10_000),
            batch_bytes: 64 << 10,
            linger_ms: 5,
            ..base
        },
        other => {
            let n: i32 = other.strip_prefix("partitions-")?.parse().ok().filter(|n| *n > 0)?;
            Workload { partitions: n, record_bytes: (1024, 1024), batch_bytes: 64 << 10, linger_ms: 5, ..base }
        }
    };
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_scenario_exists() {
        for name in NAMES {
            let name = name.replace('N', "1000");
            assert!(scenario(&name).is_some(), "{name}");
        }
        assert_eq!(scenario("partitions-250").map(|w| w.partitions), Some(250));
        assert!(scenario("partitions-x").is_none() && scenario("nope").is_none());
        assert_eq!(scenario("lz4-1k").map(|w| w.codec), crate::codec("lz4"));
    }
}
