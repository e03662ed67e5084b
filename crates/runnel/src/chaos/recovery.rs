//! After brokers were cut off and let back in (an isolated region, leader or follower):
//! how long until their replicas had caught up with what was committed at the heal, and
//! until every partition was led by its preferred leader again. Asked of the cluster
//! itself, so it measures Apache Kafka (`--attach`) the same way: each replica's high
//! watermark as a fetch from it reports (Fetch v11+ reads from followers, KIP-392), and
//! the leaders Metadata names. And while a region is cut off: whether metadata stays
//! writable (a topic created through a broker outside it).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use runnel_client::{topic_name, FETCH_VERSION};
use runnel_verify::router::Router;
use runnel_verify::Recovery;

/// How often the cluster is asked.
const POLL: Duration = Duration::from_millis(250);
/// The longest one attempt to create the metadata probe's topic may take.
const METADATA_ATTEMPT_MAX: Duration = Duration::from_secs(5);

/// The high watermark `broker` reports for `partition`, if it answers.
async fn high_watermark(router: &mut Router, addr: &str, topic: &str, partition: i32) -> Option<i64> {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(vec![
            FetchPartition::default().with_partition(partition).with_fetch_offset(0).with_partition_max_bytes(1),
        ])]);
    let resp = router.call_at(addr, &req, FETCH_VERSION).await.ok()?;
    let p = resp.responses.first()?.partitions.first()?;
    (p.error_code == 0 && p.high_watermark >= 0).then_some(p.high_watermark)
}

/// Watches from the heal (`healed`) until both are seen or `deadline` passes. `cut` are
/// the brokers that were cut off.
pub async fn watch(bootstrap: String, topic: String, cut: Vec<u16>, healed: Instant, deadline: Instant) -> Recovery {
    let mut router = Router::new(&bootstrap, &topic, "runnel-chaos-recovery", Duration::from_secs(2));
    let cut: BTreeSet<i32> = cut.into_iter().map(i32::from).collect();
    let mut out = Recovery::default();
    // partition → the leader's high watermark at the heal (what must be caught up with).
    let mut target: Option<Vec<i64>> = None;
    while Instant::now() < deadline && (out.caught_up_ms.is_none() || out.leaders_back_ms.is_none()) {
        let since = || Some(healed.elapsed().as_millis() as u64);
        let listed = match router.refresh().await {
            Ok(()) => router.replicas().await,
            Err(e) => Err(e),
        };
        let Ok(partitions) = listed else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        let addrs: std::collections::HashMap<i32, String> = router.brokers().into_iter().collect();
        if out.leaders_back_ms.is_none() && partitions.iter().all(|(leader, r)| r.first() == Some(leader)) {
            out.leaders_back_ms = since();
        }
        if target.is_none() {
            let mut hws = Vec::new();
            for (p, (leader, _)) in partitions.iter().enumerate() {
                match addrs.get(leader) {
                    Some(a) => match high_watermark(&mut router, a, &topic, p as i32).await {
                        Some(hw) => hws.push(hw),
                        None => break,
                    },
                    None => break,
                }
            }
            if hws.len() == partitions.len() {
                target = Some(hws);
            }
        }
        if let (Some(t), None) = (&target, out.caught_up_ms) {
            let mut all = true;
            'parts: for (p, (_, replicas)) in partitions.iter().enumerate() {
                for b in replicas.iter().filter(|b| cut.contains(b)) {
                    let hw = match addrs.get(b) {
                        Some(a) => high_watermark(&mut router, a, &topic, p as i32).await,
                        None => None,
                    };
                    if hw.is_none_or(|hw| hw < t[p]) {
                        all = false;
                        break 'parts;
                    }
                }
            }
            if all {
                out.caught_up_ms = since();
            }
        }
        tokio::time::sleep(POLL).await;
    }
    out
}

/// While a region is cut off: how soon after `since` a metadata change commits through the
/// brokers outside it (`outside`, asked in turn): a one-partition topic created, with
/// replication factor 1 so that placement never refuses it. None when none did before
/// `deadline`. Kafka's metadata quorum is asked the same way.
pub async fn metadata_write(outside: Vec<String>, since: Instant, deadline: Instant) -> Option<u64> {
    let topic = format!("runnel-chaos-metadata-{}-{}", std::process::id(), since.elapsed().as_nanos());
    for addr in outside.iter().cycle() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let attempt = async {
            let c = runnel_client::Cluster::connect(addr, "runnel-chaos-metadata").await?;
            c.create_topic(&topic, 1, 1, &Default::default()).await
        };
        // Each attempt bounded as a client's request is: one that hangs (on a broker whose
        // controller was cut off, say) is given up and made again.
        match tokio::time::timeout(left.min(METADATA_ATTEMPT_MAX), attempt).await {
            Ok(Ok(())) => return Some(since.elapsed().as_millis() as u64),
            // An earlier attempt committed, and its answer was lost.
            Ok(Err(e)) if format!("{e:#}").contains("TopicAlreadyExists") => {
                return Some(since.elapsed().as_millis() as u64)
            }
            Ok(Err(_)) => tokio::time::sleep(POLL).await,
            Err(_) => {}
        }
    }
    None
}
