//! `runnel bench size`: from a measured per-broker throughput and a target load, how many
//! brokers a cluster needs, and what it costs given the user's prices.
//!
//! The per-broker figure is what one broker sustained for clients in a cluster with the
//! target replication factor (a cluster run's produce MB/s divided by its broker count), so
//! replication traffic is already in it. The cluster must carry the target with
//! `headroom` to spare, and still carry it after losing a whole failure domain (with `d`
//! domains, (d-1)/d of the brokers remain); brokers are spread evenly over the domains and
//! there are at least as many as the replication factor.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct SizeInput {
    pub per_broker_mb_s: f64,
    pub target_mb_s: f64,
    pub record_bytes: f64,
    pub replication_factor: u32,
    /// Failure domains at the level replicas spread over (zones, or regions).
    pub domains: u32,
    /// Share of capacity kept free (0.3 = run at 70 %).
    pub headroom: f64,
    pub broker_hour_price: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizeOutput {
    pub brokers: u32,
    pub brokers_per_domain: u32,
    pub utilisation_normal: f64,
    pub utilisation_after_domain_loss: f64,
    pub cost_per_hour: Option<f64>,
    pub cost_per_million_records: Option<f64>,
}

pub fn size(i: &SizeInput) -> Result<SizeOutput, String> {
    if !(i.per_broker_mb_s > 0.0 && i.target_mb_s > 0.0 && i.record_bytes > 0.0) {
        return Err("throughputs and record size must be positive".into());
    }
    if !(0.0..1.0).contains(&i.headroom) {
        return Err("headroom must be in [0, 1)".into());
    }
    let d = i.domains.max(1);
    if i.replication_factor > d && d > 1 {
        return Err(format!(
            "replication factor {} cannot put each replica in a different one of {d} failure domains",
            i.replication_factor
        ));
    }
    let usable = i.per_broker_mb_s * (1.0 - i.headroom);
    let mut need = (i.target_mb_s / usable).ceil();
    if d > 1 {
        need = need.max((i.target_mb_s / usable * d as f64 / (d - 1) as f64).ceil());
    }
    let mut brokers = (need as u32).max(i.replication_factor).max(1);
    brokers = brokers.div_ceil(d) * d;
    let per_domain = brokers / d;
    let capacity = |n: u32| n as f64 * i.per_broker_mb_s;
    let remaining = if d > 1 { brokers - per_domain } else { brokers };
    let cost_per_hour = i.broker_hour_price.map(|p| p * brokers as f64);
    let records_per_hour = i.target_mb_s * 1e6 / i.record_bytes * 3600.0;
    Ok(SizeOutput {
        brokers,
        brokers_per_domain: per_domain,
        utilisation_normal: i.target_mb_s / capacity(brokers),
        utilisation_after_domain_loss: i.target_mb_s / capacity(remaining),
        cost_per_hour,
        cost_per_million_records: cost_per_hour.map(|c| c / (records_per_hour / 1e6)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> SizeInput {
        SizeInput {
            per_broker_mb_s: 100.0,
            target_mb_s: 500.0,
            record_bytes: 1000.0,
            replication_factor: 3,
            domains: 3,
            headroom: 0.3,
            broker_hour_price: Some(0.5),
        }
    }

    #[test]
    fn sizes_for_load_headroom_and_domain_loss() {
        let o = size(&input()).expect("size");
        // 500 / 70 = 7.2 -> 8; surviving one of 3 zones: 7.2 * 3/2 = 10.7 -> 11 -> 12 (4 per zone).
        assert_eq!((o.brokers, o.brokers_per_domain), (12, 4));
        assert!(o.utilisation_after_domain_loss <= 0.7 + 1e-9);
        assert_eq!(o.cost_per_hour, Some(6.0));
        // 500 MB/s of 1 kB records = 1.8e9 records/hour.
        let per_million = o.cost_per_million_records.expect("priced");
        assert!((per_million - 6.0 / 1800.0).abs() < 1e-12);
    }

    #[test]
    fn refuses_what_cannot_be_placed_and_keeps_rf_minimum() {
        assert!(size(&SizeInput { domains: 2, ..input() }).is_err());
        let tiny = size(&SizeInput { target_mb_s: 1.0, domains: 1, ..input() }).expect("size");
        assert_eq!(tiny.brokers, 3, "at least one broker per replica");
    }
}
