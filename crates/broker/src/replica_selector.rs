//! Which replica a consumer reads from (KIP-392, fetch from follower). A consumer that sets
//! `client.rack` sends it in every Fetch (v11+). The leader of a partition compares it with
//! the locations of the partition's replicas and, when a caught-up follower is nearer to the
//! consumer than the leader itself, answers with no records and `preferred_read_replica`
//! set to it; the consumer then fetches from that follower, which serves what it knows to be
//! committed (`Partition::read` on a follower).
//!
//! Kafka's `RackAwareReplicaSelector` matches `client.rack` against each broker's one
//! `broker.rack`. Here a broker's location is nested (`region=..,zone=..,rack=..`), so the
//! consumer's `client.rack` names any level of it: a rack, a zone, a region (the value of
//! any label of some broker's location), or a whole path (`region=us-east1,zone=us-east1-b`).
//! It resolves to the path down to that level, and the nearest replica is the one whose
//! location shares the most leading levels with it: a consumer in zone `us-east1-b` reads
//! from a replica in that zone, else from one elsewhere in `us-east1`, else from the leader.

use std::collections::HashMap;

use runnel_controller::{parse_location, BrokerInfo};

/// `replica.selector.class`: the nearest replica by location (the default here).
pub const RACK_AWARE: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
/// `replica.selector.class`: consumers always read from the leader (Kafka's default).
pub const LEADER: &str = "org.apache.kafka.common.replica.LeaderSelector";

type Location = Vec<(String, String)>;

/// A consumer's place in the cluster's failure domains, and the brokers' locations, for
/// one Fetch request.
#[derive(Debug)]
pub struct ClientPlace {
    path: Location,
    brokers: HashMap<i32, Location>,
}

impl ClientPlace {
    /// None when `selector` keeps consumers on leaders, the consumer sent no rack, or no
    /// broker's location names it.
    pub fn resolve(selector: &str, rack: &str, brokers: Vec<BrokerInfo>) -> Option<ClientPlace> {
        let rack = rack.trim();
        if selector != RACK_AWARE || rack.is_empty() {
            return None;
        }
        let path = if rack.contains('=') {
            parse_location(rack).ok()?
        } else {
            brokers.iter().find_map(|b| {
                let level = b.location.iter().position(|(_, v)| v == rack)?;
                Some(b.location[..=level].to_vec())
            })?
        };
        if path.is_empty() {
            return None;
        }
        Some(ClientPlace { path, brokers: brokers.into_iter().map(|b| (b.id, b.location)).collect() })
    }

    /// How many leading levels of the consumer's path `broker`'s location shares.
    fn shared(&self, broker: i32) -> usize {
        let Some(loc) = self.brokers.get(&broker) else { return 0 };
        self.path.iter().zip(loc).take_while(|(a, b)| a == b).count()
    }

    /// The follower to send the consumer to instead of the leader, if one is strictly
    /// nearer to it than `leader` and holds `fetch_offset` (its acknowledged log ends at or
    /// past it; `ends` lists the voters that answered recently, as Kafka considers only
    /// in-sync replicas). Among equally near followers, the most caught-up one.
    pub fn preferred(&self, leader: i32, ends: &[(i32, i64)], fetch_offset: i64) -> Option<i32> {
        let at_leader = self.shared(leader);
        ends.iter()
            .filter(|&&(id, end)| id != leader && end >= fetch_offset)
            .map(|&(id, end)| (self.shared(id), end, -id))
            .max()
            .filter(|&(near, _, _)| near > at_leader)
            .map(|(_, _, id)| -id)
    }
}

/// A consumer's place, resolved the first time a leader needs it. Most fetches of a
/// consumer with a rack go to followers once it has been redirected, and a follower never
/// needs it: resolving it eagerly would copy the broker list on every fetch.
pub struct LazyPlace<F> {
    resolve: F,
    place: std::sync::OnceLock<Option<ClientPlace>>,
}

impl<F: Fn() -> Option<ClientPlace>> LazyPlace<F> {
    pub fn new(resolve: F) -> LazyPlace<F> {
        LazyPlace { resolve, place: std::sync::OnceLock::new() }
    }

    pub fn get(&self) -> Option<&ClientPlace> {
        self.place.get_or_init(&self.resolve).as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: i32, loc: &str) -> BrokerInfo {
        BrokerInfo::located(id, loc).expect("location")
    }

    fn cluster() -> Vec<BrokerInfo> {
        vec![
            broker(0, "region=east,zone=east-a"),
            broker(1, "region=west,zone=west-a"),
            broker(2, "region=north,zone=north-a"),
            broker(3, "region=east,zone=east-b"),
            broker(4, "region=west,zone=west-b"),
        ]
    }

    fn place(rack: &str) -> Option<ClientPlace> {
        ClientPlace::resolve(RACK_AWARE, rack, cluster())
    }

    #[test]
    fn a_follower_in_the_consumers_zone_is_preferred_over_a_remote_leader() {
        let p = place("west-a").expect("resolves");
        assert_eq!(p.preferred(0, &[(0, 100), (1, 100), (2, 100)], 50), Some(1));
        // The leader in the consumer's zone: no redirect.
        assert_eq!(p.preferred(1, &[(0, 100), (1, 100), (2, 100)], 50), None);
    }

    #[test]
    fn the_region_counts_when_no_replica_is_in_the_zone() {
        let p = place("west-b").expect("resolves");
        assert_eq!(p.preferred(0, &[(0, 100), (1, 100), (2, 100)], 50), Some(1));
        let p = place("region=north").expect("a path");
        assert_eq!(p.preferred(0, &[(0, 100), (1, 100), (2, 100)], 50), Some(2));
    }

    #[test]
    fn a_follower_behind_the_fetch_offset_or_silent_is_not_chosen() {
        let p = place("west-a").expect("resolves");
        assert_eq!(p.preferred(0, &[(0, 100), (1, 40), (2, 100)], 50), None);
        assert_eq!(p.preferred(0, &[(0, 100), (2, 100)], 50), None);
    }

    #[test]
    fn unknown_racks_and_the_leader_selector_keep_consumers_on_the_leader() {
        assert!(place("").is_none());
        assert!(place("south").is_none());
        assert!(ClientPlace::resolve(LEADER, "west-a", cluster()).is_none());
    }

    #[test]
    fn equally_near_followers_go_by_progress() {
        let brokers = vec![broker(0, "region=east"), broker(1, "region=west"), broker(2, "region=west")];
        let p = ClientPlace::resolve(RACK_AWARE, "west", brokers).expect("resolves");
        assert_eq!(p.preferred(0, &[(0, 100), (1, 90), (2, 95)], 50), Some(2));
    }
}
