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

/// A layout over regions and how it is used, for the traffic between regions.
#[derive(Debug, Clone, Serialize)]
pub struct TrafficInput {
    /// Produce load, MB/s (what producers send; each byte once).
    pub target_mb_s: f64,
    pub record_bytes: f64,
    pub replication_factor: u32,
    /// Regions the replicas spread over (one replica per region first).
    pub regions: u32,
    /// Consumer groups per region, each reading everything.
    pub groups_per_region: u32,
    /// Share of writes whose partition is led in the producer's own region: 1 with leaders
    /// kept where the writers are (`leader.preference`), 1/regions with leaders spread.
    pub local_leader_share: f64,
    /// Consumers read from the replica in their region (KIP-392) rather than the leader.
    pub follower_fetching: bool,
    /// Price of one GB moved between regions (any currency).
    pub gb_price: Option<f64>,
}

/// Bytes between regions, MB/s, and what they cost.
#[derive(Debug, Clone, Serialize)]
pub struct Traffic {
    /// Producers to leaders in other regions.
    pub produce_mb_s: f64,
    /// Leaders to followers in other regions.
    pub replication_mb_s: f64,
    /// Consumers reading from brokers in other regions.
    pub consume_mb_s: f64,
    pub total_mb_s: f64,
    /// GB between regions per GB produced.
    pub gb_per_gb_produced: f64,
    /// Data each region stores per day, GB (its replicas of everything).
    pub stored_gb_per_day_per_region: f64,
    pub cost_per_gb_produced: Option<f64>,
    pub cost_per_million_records: Option<f64>,
    pub cost_per_month: Option<f64>,
}

/// What a layout moves between regions: producers' writes to leaders elsewhere, the
/// leaders' replication to followers in other regions, and consumers' reads from brokers in
/// other regions. Replicas spread one per region first, so a leader's region holds
/// ceil(rf / regions) of them.
pub fn inter_region(i: &TrafficInput) -> Result<Traffic, String> {
    if !(i.target_mb_s > 0.0 && i.record_bytes > 0.0) || i.regions == 0 || i.replication_factor == 0 {
        return Err("load, record size, regions and replication factor must be positive".into());
    }
    if !(0.0..=1.0).contains(&i.local_leader_share) {
        return Err("the share of local leaders must be in [0, 1]".into());
    }
    let (r, rf) = (i.regions, i.replication_factor);
    let produce = i.target_mb_s * (1.0 - i.local_leader_share) * f64::from(u32::from(r > 1));
    let replicas_elsewhere = if r > 1 { rf - rf.div_ceil(r) } else { 0 };
    let replication = i.target_mb_s * f64::from(replicas_elsewhere);
    // A region with a replica serves its consumers locally when they fetch from followers;
    // reading from leaders, a group reads locally only what is led in its region.
    let regions_with_replica = rf.min(r);
    let groups = f64::from(i.groups_per_region);
    let consume = if i.follower_fetching {
        i.target_mb_s * groups * f64::from(r - regions_with_replica)
    } else {
        i.target_mb_s * groups * f64::from(r - 1)
    };
    let total = produce + replication + consume;
    let per_gb = total / i.target_mb_s;
    let cost_per_gb = i.gb_price.map(|p| p * per_gb);
    let records_per_gb = 1e9 / i.record_bytes;
    Ok(Traffic {
        produce_mb_s: produce,
        replication_mb_s: replication,
        consume_mb_s: consume,
        total_mb_s: total,
        gb_per_gb_produced: per_gb,
        stored_gb_per_day_per_region: i.target_mb_s * f64::from(rf) / f64::from(r) * 86_400.0 / 1e3,
        cost_per_gb_produced: cost_per_gb,
        cost_per_million_records: cost_per_gb.map(|c| c * 1e6 / records_per_gb),
        cost_per_month: i.gb_price.map(|p| p * total / 1e3 * 86_400.0 * 30.0),
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

    fn layout() -> TrafficInput {
        TrafficInput {
            target_mb_s: 100.0,
            record_bytes: 1000.0,
            replication_factor: 3,
            regions: 3,
            groups_per_region: 1,
            local_leader_share: 1.0,
            follower_fetching: true,
            gb_price: Some(0.02),
        }
    }

    #[test]
    fn leaders_near_writers_and_reads_from_followers_leave_only_replication() {
        let t = inter_region(&layout()).expect("traffic");
        assert_eq!((t.produce_mb_s, t.replication_mb_s, t.consume_mb_s), (0.0, 200.0, 0.0));
        assert!((t.gb_per_gb_produced - 2.0).abs() < 1e-12);
        // 2 GB between regions per GB produced at 0.02 a GB; a million 1 kB records is 1 GB.
        assert!((t.cost_per_million_records.expect("priced") - 0.04).abs() < 1e-12);
        assert!((t.stored_gb_per_day_per_region - 8640.0).abs() < 1e-9);
    }

    #[test]
    fn leaders_spread_and_reads_from_leaders_cost_more() {
        let kafka = TrafficInput { local_leader_share: 1.0 / 3.0, follower_fetching: false, ..layout() };
        let t = inter_region(&kafka).expect("traffic");
        // 2/3 of writes cross, replication as before, and each group reads 2/3 from afar
        // (3 groups x 100 MB/s x 2/3 = 200 MB/s).
        assert!((t.produce_mb_s - 200.0 / 3.0).abs() < 1e-9);
        assert_eq!((t.replication_mb_s, t.consume_mb_s), (200.0, 200.0));
        let one_region = inter_region(&TrafficInput { regions: 1, ..kafka }).expect("traffic");
        assert_eq!(one_region.total_mb_s, 0.0);
    }

    #[test]
    fn refuses_what_cannot_be_placed_and_keeps_rf_minimum() {
        assert!(size(&SizeInput { domains: 2, ..input() }).is_err());
        let tiny = size(&SizeInput { target_mb_s: 1.0, domains: 1, ..input() }).expect("size");
        assert_eq!(tiny.brokers, 3, "at least one broker per replica");
    }
}
