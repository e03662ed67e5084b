//! Replica placement over nested failure domains (region ⊃ zone ⊃ rack ⊃ host), and the
//! checks a placement must pass.

use std::collections::{BTreeMap, HashMap, HashSet};

use kafka_protocol::error::ResponseError;

use crate::records::BrokerInfo;

/// The failure domain of each broker at the outermost level where registered brokers
/// differ (each broker is its own domain when all locations agree): (level name, broker id
/// -> domain path such as "us-east1/us-east1-b").
fn spanning_domains(brokers: &[BrokerInfo]) -> (String, HashMap<i32, String>) {
    let depth = brokers.iter().map(|b| b.location.len()).max().unwrap_or(0);
    for level in 0..depth {
        let path =
            |b: &BrokerInfo| b.location.iter().take(level + 1).map(|(_, v)| v.as_str()).collect::<Vec<_>>().join("/");
        let domains: HashMap<i32, String> = brokers.iter().map(|b| (b.id, path(b))).collect();
        if domains.values().collect::<HashSet<_>>().len() > 1 {
            let name = brokers.iter().find_map(|b| b.location.get(level).map(|(k, _)| k.clone())).unwrap_or_default();
            return (name, domains);
        }
    }
    ("broker".into(), brokers.iter().map(|b| (b.id, b.id.to_string())).collect())
}

/// Why an assignment would not survive losing one failure domain (at the outermost level
/// the brokers span), if it would not: a partition of RF 3 or more with so many replicas in
/// one domain that the others are not a majority. RF 1 and 2 never survive a loss and are
/// taken as chosen.
pub fn placement_risk(brokers: &[BrokerInfo], replicas: &[Vec<i32>]) -> Option<String> {
    let (level, domain) = spanning_domains(brokers);
    let spanned = domain.values().collect::<HashSet<_>>().len();
    for (p, reps) in replicas.iter().enumerate() {
        let rf = reps.len();
        if rf < 3 {
            continue;
        }
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for r in reps {
            *count.entry(domain.get(r).map_or("?", String::as_str)).or_default() += 1;
        }
        let Some((d, n)) = count.into_iter().max_by_key(|(_, n)| *n) else { continue };
        if rf - n < rf / 2 + 1 {
            return Some(format!(
                "partition {p} would have {n} of its {rf} replicas in {level} {d}, and losing that {level} would lose \
                 the partition's quorum ({spanned} {level}s are registered): add {level}s, lower the replication \
                 factor, or create the topic with placement.unsafe.allow=true"
            ));
        }
    }
    None
}

/// Replica assignment over failure domains: brokers are ordered so that neighbours differ
/// at the outermost level first (one per region, then one per zone inside each, ...).
/// Partition `p` starts at position `p`, so leaders (first replicas) rotate over all
/// brokers, and takes each next replica from the least used domain of the outermost level
/// the brokers span (the next broker in order among those), so replicas spread evenly over
/// regions even when regions have different numbers of brokers.
pub fn place(brokers: &[BrokerInfo], partitions: i32, rf: usize) -> Vec<Vec<i32>> {
    fn interleave(mut brokers: Vec<&BrokerInfo>, level: usize) -> Vec<&BrokerInfo> {
        if brokers.len() <= 1 || brokers.iter().all(|b| b.location.len() <= level) {
            brokers.sort_by_key(|b| b.id);
            return brokers;
        }
        let mut domains: BTreeMap<String, Vec<&BrokerInfo>> = BTreeMap::new();
        for b in brokers {
            let key = b.location.get(level).map(|(_, v)| v.clone()).unwrap_or_default();
            domains.entry(key).or_default().push(b);
        }
        let mut lists: Vec<Vec<&BrokerInfo>> = domains.into_values().map(|d| interleave(d, level + 1)).collect();
        let mut out = Vec::new();
        let mut i = 0;
        while lists.iter().any(|l| i < l.len()) {
            for l in &mut lists {
                if let Some(b) = l.get(i) {
                    out.push(*b);
                }
            }
            i += 1;
        }
        out
    }
    let order = interleave(brokers.iter().collect(), 0);
    let (_, domain) = spanning_domains(brokers);
    let n = order.len();
    (0..partitions as usize)
        .map(|p| {
            let mut chosen: Vec<i32> = Vec::with_capacity(rf);
            let mut used: HashMap<&str, usize> = HashMap::new();
            while chosen.len() < rf.min(n) {
                let next = (0..n)
                    .map(|i| order[(p + i) % n].id)
                    .filter(|id| !chosen.contains(id))
                    .min_by_key(|id| domain.get(id).map_or(0, |d| used.get(d.as_str()).copied().unwrap_or(0)));
                let Some(id) = next else { break };
                if let Some(d) = domain.get(&id) {
                    *used.entry(d.as_str()).or_default() += 1;
                }
                chosen.push(id);
            }
            chosen
        })
        .collect()
}

/// A manual assignment: every partition's replicas distinct, registered, and as many as
/// every other partition's.
pub(crate) fn check_assignment(a: &[Vec<i32>], brokers: &[BrokerInfo]) -> Result<(), (ResponseError, String)> {
    let bad = |msg: String| Err((ResponseError::InvalidReplicaAssignment, msg));
    let rf = a.first().map_or(0, |r| r.len());
    for (p, replicas) in a.iter().enumerate() {
        if replicas.is_empty() || replicas.len() != rf {
            return bad("All partitions should have the same number of replicas".into());
        }
        if let Some(id) = replicas.iter().find(|id| !brokers.iter().any(|b| b.id == **id)) {
            return bad(format!("Partition {p} names broker {id}, which is not registered"));
        }
        if (1..replicas.len()).any(|i| replicas[..i].contains(&replicas[i])) {
            return bad(format!("Partition {p} names a broker twice"));
        }
    }
    Ok(())
}

/// (topic, partition) → replica list.
pub type Assignment = BTreeMap<(String, i32), Vec<i32>>;

/// Decommission's plan: each partition with a replica on `gone` gets, in its place, a broker
/// of `racks` (live brokers and their racks) outside its replica list: one in `gone`'s rack
/// first (the spread over failure domains stays as it was), then the least loaded
/// (counting the moves already planned), then the lowest id. The partitions to move, with
/// their new replica lists.
pub fn replace_broker(
    racks: &BTreeMap<i32, Option<String>>,
    assignment: &Assignment,
    gone: i32,
) -> Result<Assignment, String> {
    let mut load: HashMap<i32, usize> = racks.keys().map(|b| (*b, 0)).collect();
    for replicas in assignment.values() {
        for b in replicas {
            *load.entry(*b).or_default() += 1;
        }
    }
    let home = racks.get(&gone).cloned().flatten();
    let mut moves = Assignment::new();
    for ((topic, p), replicas) in assignment.iter().filter(|(_, r)| r.contains(&gone)) {
        let choice = racks
            .iter()
            .filter(|(b, _)| **b != gone && !replicas.contains(b))
            .min_by_key(|(b, rack)| (home.is_none() || **rack != home, load.get(b).copied().unwrap_or(0), **b))
            .map(|(b, _)| *b);
        let Some(to) = choice else {
            return Err(format!("{topic}-{p} has replicas on {replicas:?} and no other live broker to move to"));
        };
        *load.entry(to).or_default() += 1;
        moves.insert((topic.clone(), *p), replicas.iter().map(|b| if *b == gone { to } else { *b }).collect());
    }
    Ok(moves)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: i32, loc: &str) -> BrokerInfo {
        BrokerInfo::located(id, loc).expect("location")
    }

    #[test]
    fn placement_balances_uneven_regions_and_refuses_what_a_region_loss_would_break() {
        let uneven = vec![
            b(0, "region=a,zone=a1"),
            b(1, "region=a,zone=a2"),
            b(2, "region=a,zone=a3"),
            b(3, "region=a,zone=a4"),
            b(4, "region=b,zone=b1"),
            b(5, "region=c,zone=c1"),
        ];
        let assignment = place(&uneven, 12, 3);
        for reps in &assignment {
            let mut regions: Vec<&str> = reps.iter().map(|r| uneven[*r as usize].location[0].1.as_str()).collect();
            regions.sort();
            assert_eq!(regions, ["a", "b", "c"], "one replica per region: {reps:?}");
        }
        assert_eq!(placement_risk(&uneven, &assignment), None);

        let two_regions = vec![b(0, "region=a,zone=a1"), b(1, "region=a,zone=a2"), b(2, "region=b,zone=b1")];
        let risk = placement_risk(&two_regions, &place(&two_regions, 3, 3)).expect("two regions cannot hold RF 3");
        assert!(risk.contains("2 of its 3 replicas in region a"), "{risk}");
        assert_eq!(placement_risk(&two_regions, &place(&two_regions, 3, 2)), None, "RF 2 is taken as chosen");
        // RF 5 over three regions: 2+2+1, any region lost leaves a majority of 3.
        let five: Vec<BrokerInfo> = (0..6).map(|i| b(i, &format!("region=r{},zone=z{i}", i % 3))).collect();
        assert_eq!(placement_risk(&five, &place(&five, 6, 5)), None);
        // One region, three zones: the zones are the domains.
        let zones = vec![b(0, "region=a,zone=a1"), b(1, "region=a,zone=a2"), b(2, "region=a,zone=a3")];
        assert_eq!(placement_risk(&zones, &place(&zones, 3, 3)), None);
        // No locations at all: brokers are the domains.
        let bare = vec![b(0, ""), b(1, ""), b(2, "")];
        assert_eq!(placement_risk(&bare, &place(&bare, 3, 3)), None);
    }

    #[test]
    fn placement_spreads_over_the_outermost_domain_first() {
        let brokers = vec![
            b(0, "region=a,zone=a1"),
            b(1, "region=a,zone=a2"),
            b(2, "region=b,zone=b1"),
            b(3, "region=b,zone=b2"),
            b(4, "region=c,zone=c1"),
            b(5, "region=c,zone=c2"),
        ];
        let region = |id: i32| brokers[id as usize].location[0].1.clone();
        let assignment = place(&brokers, 12, 3);
        for reps in &assignment {
            let mut regions: Vec<String> = reps.iter().map(|r| region(*r)).collect();
            regions.sort();
            regions.dedup();
            assert_eq!(regions.len(), 3, "one replica per region: {reps:?}");
        }
        let mut leaders: Vec<i32> = assignment.iter().map(|r| r[0]).collect();
        leaders.sort();
        leaders.dedup();
        assert_eq!(leaders.len(), 6, "leaders rotate over every broker");
    }

    #[test]
    fn a_decommissioned_broker_is_replaced_in_its_rack_first_then_by_load() {
        let racks: BTreeMap<i32, Option<String>> = [
            (0, Some("a".into())),
            (1, Some("b".into())),
            (2, Some("a".into())),
            (3, Some("c".into())),
            (4, Some("c".into())),
        ]
        .into_iter()
        .collect();
        let assignment: Assignment = [
            (("t".to_string(), 0), vec![0, 1, 3]),
            (("t".to_string(), 1), vec![1, 3, 4]),
            (("t".to_string(), 2), vec![0, 2, 1]),
        ]
        .into_iter()
        .collect();
        let moves = replace_broker(&racks, &assignment, 0).unwrap();
        // Partition 0 keeps a replica in rack a (broker 2); partition 2 already has 2, so
        // the least loaded broker outside its list takes it (4: one replica; 3 has two).
        assert_eq!(moves.len(), 2);
        assert_eq!(moves[&("t".to_string(), 0)], vec![2, 1, 3]);
        assert_eq!(moves[&("t".to_string(), 2)], vec![4, 2, 1]);
        assert!(replace_broker(&racks, &assignment, 9).unwrap().is_empty());
        let full: BTreeMap<i32, Option<String>> = [(0, None), (1, None), (3, None)].into_iter().collect();
        assert!(replace_broker(&full, &assignment, 0).is_err());
    }
}
