//! Where a topic's leaders should be: the topic config `leader.preference` (default: the
//! broker setting of the same name, `none`). It lists failure domains in order, each as
//! `label:value` (`region:us-east1`, `zone:us-east1-b`, `rack:r7`): a partition's leader
//! should be its replica in the first listed domain that has a healthy one, else in the
//! next, and so on. Placement puts such a replica first in each new partition's replica
//! list, and each broker's leader loop (`preferred_leader` in the broker) hands leadership
//! to the best-ranked replica that is alive and caught up, and back once a better-ranked
//! one returns.

use std::collections::HashMap;

use crate::records::BrokerInfo;

/// The setting's value meaning no preference.
pub const NONE: &str = "none";

/// Parses `none` (or empty) or `label:value,label:value,...`.
pub fn parse(s: &str) -> Result<Vec<(String, String)>, String> {
    let s = s.trim();
    if s.is_empty() || s == NONE {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(str::trim)
        .map(|part| match part.split_once(':') {
            Some((label, value)) if !label.trim().is_empty() && !value.trim().is_empty() => {
                Ok((label.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(format!("{part}: expected label:value (region:us-east1), or none")),
        })
        .collect()
}

/// `replicas` in order of preference: those in the first listed domain, then the second,
/// ..., then the rest, each group in replica-list order. Unchanged with no preference.
pub fn ranked(
    replicas: &[i32],
    preference: &[(String, String)],
    locations: &HashMap<i32, Vec<(String, String)>>,
) -> Vec<i32> {
    let rank = |id: &i32| {
        let loc = locations.get(id);
        preference
            .iter()
            .position(|(label, value)| loc.is_some_and(|l| l.iter().any(|(k, v)| k == label && v == value)))
            .unwrap_or(preference.len())
    };
    let mut out = replicas.to_vec();
    out.sort_by_key(rank); // stable: replica-list order within a rank
    out
}

/// Reorders each partition's replicas so that the first (the one that leads a new
/// partition, and the preferred leader) is the best-ranked one.
pub fn order_assignment(assignment: &mut [Vec<i32>], preference: &[(String, String)], brokers: &[BrokerInfo]) {
    if preference.is_empty() {
        return;
    }
    let locations: HashMap<i32, Vec<(String, String)>> = brokers.iter().map(|b| (b.id, b.location.clone())).collect();
    for replicas in assignment {
        *replicas = ranked(replicas, preference, &locations);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::parse_location;

    #[test]
    fn replicas_rank_by_the_first_listed_domain_they_are_in() {
        let locations: HashMap<i32, Vec<(String, String)>> =
            [(1, "region=west,zone=west-a"), (2, "region=east,zone=east-a"), (3, "region=north,zone=north-a")]
                .into_iter()
                .map(|(id, l)| (id, parse_location(l).expect("location")))
                .collect();
        let pref = parse("region:east, region:north").expect("parses");
        assert_eq!(ranked(&[1, 2, 3], &pref, &locations), vec![2, 3, 1]);
        assert_eq!(ranked(&[3, 1], &pref, &locations), vec![3, 1]);
        assert_eq!(ranked(&[1, 2, 3], &[], &locations), vec![1, 2, 3]);
        assert_eq!(ranked(&[1, 2, 3], &parse("zone:north-a").expect("parses"), &locations), vec![3, 1, 2]);
    }

    #[test]
    fn the_setting_parses_or_says_what_is_wrong() {
        assert_eq!(parse("none"), Ok(vec![]));
        assert_eq!(parse(""), Ok(vec![]));
        assert!(parse("us-east1").is_err());
        assert!(parse("region:").is_err());
    }
}
