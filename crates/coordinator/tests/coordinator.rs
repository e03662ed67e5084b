//! The classic group protocol as Kafka's coordinator runs it (KIP-394 member ids, KIP-345
//! static membership, generation fencing, session expiry), and the durability contract:
//! everything a coordinator acknowledged is rebuilt by a new coordinator replaying the log.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError as E;
use runnel_coordinator::{
    Coordinator, CoordinatorConfig, GroupLog, HeartbeatIn, JoinRequest, JoinResult, LogFuture, Replay, Topics,
};

/// An in-memory log with the GroupLog contract: appends are immediately durable.
/// (key, value) records of one partition; a None value is a tombstone.
type Records = Vec<(Bytes, Option<Bytes>)>;

/// Leads every partition but those in the second field (moved to another broker); the
/// third holds the records of open transactions (partition, producer id) until
/// [`MemLog::end_txn`] ends them.
#[derive(Default)]
struct MemLog(
    Mutex<BTreeMap<i32, Records>>,
    Mutex<std::collections::BTreeSet<i32>>,
    Mutex<BTreeMap<(i32, i64), Records>>,
);

impl MemLog {
    /// A transaction marker: a commit puts the transaction's records in effect here.
    fn end_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        let records = self.2.lock().expect("lock").remove(&(partition, producer_id)).unwrap_or_default();
        if commit {
            self.0.lock().expect("lock").entry(partition).or_default().extend(records);
        }
    }
}

impl GroupLog for MemLog {
    fn partitions(&self) -> i32 {
        4
    }
    fn append(&self, partition: i32, records: Vec<(Bytes, Option<Bytes>)>) -> LogFuture {
        self.0.lock().expect("lock").entry(partition).or_default().extend(records);
        Box::pin(std::future::ready(Ok(())))
    }
    fn append_txn(&self, partition: i32, producer_id: i64, _epoch: i16, records: Records) -> LogFuture {
        self.2.lock().expect("lock").entry((partition, producer_id)).or_default().extend(records);
        Box::pin(std::future::ready(Ok(())))
    }
    fn read_all(&self, partition: i32) -> Result<Replay, String> {
        let records = self.0.lock().expect("lock").get(&partition).cloned().unwrap_or_default();
        let open = self.2.lock().expect("lock");
        let open = open.iter().filter(|((p, _), _)| *p == partition).map(|((_, pid), r)| (*pid, r.clone())).collect();
        Ok(Replay { records, open })
    }
    fn leads(&self, partition: i32) -> bool {
        !self.1.lock().expect("lock").contains(&partition)
    }
}

/// A coordinator that has read the log back and serves every partition (one broker).
fn serving(log: Arc<dyn GroupLog>, config: CoordinatorConfig) -> Coordinator {
    let c = Coordinator::new(log, config);
    c.load().expect("load");
    c
}

fn config() -> CoordinatorConfig {
    CoordinatorConfig { session_timeout_ms_min: 10, initial_rebalance_delay_ms: 0, ..CoordinatorConfig::default() }
}

fn join_req(member_id: &str, instance: Option<&str>, session_ms: i32) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_string(),
        instance_id: instance.map(str::to_string),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: session_ms,
        rebalance_timeout_ms: 2_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"meta"))],
        require_known_member_id: true,
    }
}

/// First join: MEMBER_ID_REQUIRED with an id, then the real join.
async fn join_new(c: &Arc<Coordinator>, group: &str) -> JoinResult {
    let first = c.join(group, join_req("", None, 10_000)).await;
    assert_eq!(first.error, E::MemberIdRequired.code());
    c.join(group, join_req(&first.member_id, None, 10_000)).await
}

#[tokio::test]
async fn two_members_join_sync_and_rebalance_when_one_leaves() {
    let c = Arc::new(serving(Arc::new(MemLog::default()), config()));
    let a = join_new(&c, "g").await;
    assert_eq!((a.error, a.generation, a.leader.clone()), (0, 1, a.member_id.clone()));
    let s = c.sync("g", 1, &a.member_id, None, vec![(a.member_id.clone(), Bytes::from_static(b"A"))]).await;
    assert_eq!((s.error, s.assignment.as_ref()), (0, b"A".as_ref()));

    // A second member joins: the first learns through its heartbeat and rejoins.
    let c2 = c.clone();
    let b_join = tokio::spawn(async move { join_new(&c2, "g").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(c.heartbeat("g", 1, &a.member_id, None), Err(E::RebalanceInProgress));
    let a2 = c.join("g", join_req(&a.member_id, None, 10_000)).await;
    let b = b_join.await.expect("join task");
    assert_eq!((a2.generation, b.generation), (2, 2));
    assert_eq!(a2.members.len(), 2, "the leader sees every member");
    assert!(b.members.is_empty(), "followers see none");

    let c3 = c.clone();
    let b_id = b.member_id.clone();
    let b_sync = tokio::spawn(async move { c3.sync("g", 2, &b_id, None, vec![]).await });
    let sa = c
        .sync(
            "g",
            2,
            &a.member_id,
            None,
            vec![(a.member_id.clone(), Bytes::from_static(b"A2")), (b.member_id.clone(), Bytes::from_static(b"B2"))],
        )
        .await;
    assert_eq!(sa.assignment.as_ref(), b"A2");
    assert_eq!(b_sync.await.expect("sync task").assignment.as_ref(), b"B2");
    assert_eq!(c.describe("g").expect("owned").expect("group").state, "Stable");

    // Old generations are fenced; unknown members are refused.
    assert_eq!(c.heartbeat("g", 1, &a.member_id, None), Err(E::IllegalGeneration));
    assert_eq!(c.heartbeat("g", 2, "nobody", None), Err(E::UnknownMemberId));

    // One leaves: the other must rejoin, alone, in generation 3.
    assert_eq!(c.leave("g", &[(b.member_id.clone(), None)]).await, Ok(vec![Ok(())]));
    assert_eq!(c.heartbeat("g", 2, &a.member_id, None), Err(E::RebalanceInProgress));
    let a3 = c.join("g", join_req(&a.member_id, None, 10_000)).await;
    assert_eq!((a3.generation, a3.members.len()), (3, 1));
}

#[tokio::test]
async fn a_silent_member_is_expired_after_its_session_timeout() {
    let c = Arc::new(serving(Arc::new(MemLog::default()), config()));
    let first = c.join("g", join_req("", None, 50)).await;
    let a = c.join("g", join_req(&first.member_id, None, 50)).await;
    c.sync("g", a.generation, &a.member_id, None, vec![]).await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    c.tick().await;
    let g = c.describe("g").expect("owned").expect("group");
    assert_eq!((g.state, g.members.len()), ("Empty", 0));
}

#[tokio::test]
async fn a_static_member_returns_without_a_rebalance_and_fences_its_old_id() {
    let c = Arc::new(serving(Arc::new(MemLog::default()), config()));
    // Static members skip MEMBER_ID_REQUIRED (KIP-345).
    let a = c.join("g", join_req("", Some("inst-a"), 10_000)).await;
    assert_eq!(a.error, 0);
    let b = {
        let c2 = c.clone();
        let t = tokio::spawn(async move { c2.join("g", join_req("", Some("inst-b"), 10_000)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let a_again = c.join("g", join_req(&a.member_id, Some("inst-a"), 10_000)).await;
        assert_eq!(a_again.generation, 2);
        t.await.expect("join")
    };
    let c2 = c.clone();
    let b_id = b.member_id.clone();
    let b_sync = tokio::spawn(async move { c2.sync("g", 2, &b_id, Some("inst-b"), vec![]).await });
    c.sync(
        "g",
        2,
        &a.member_id,
        Some("inst-a"),
        vec![(a.member_id.clone(), Bytes::from_static(b"A")), (b.member_id.clone(), Bytes::from_static(b"B"))],
    )
    .await;
    b_sync.await.expect("sync");
    // inst-b restarts: new member id, same generation, same assignment, no rebalance.
    let b2 = c.join("g", join_req("", Some("inst-b"), 10_000)).await;
    assert_eq!((b2.error, b2.generation), (0, 2));
    assert_ne!(b2.member_id, b.member_id);
    let s = c.sync("g", 2, &b2.member_id, Some("inst-b"), vec![]).await;
    assert_eq!(s.assignment.as_ref(), b"B");
    assert_eq!(c.describe("g").expect("owned").expect("group").state, "Stable");
    assert_eq!(c.heartbeat("g", 2, &b.member_id, Some("inst-b")), Err(E::FencedInstanceId));
}

#[tokio::test]
async fn commits_and_deletions_survive_a_new_coordinator() {
    let log = Arc::new(MemLog::default());
    let c = serving(log.clone(), config());
    // A consumer outside any group commits with generation -1.
    let r = c
        .commit("solo", -1, "", None, vec![("t".into(), 0, 42, 0, "m".into()), ("t".into(), 1, 7, 0, String::new())])
        .await;
    assert_eq!(r, Ok(vec![Ok(()), Ok(())]));
    c.commit("gone", -1, "", None, vec![("t".into(), 0, 1, 0, String::new())]).await.expect("commit");
    assert_eq!(c.delete("gone").await, Ok(()));
    assert_eq!(c.delete_offsets("solo", &[("t".into(), 1)]).await, Ok(vec![Ok(())]));
    let too_big = "x".repeat(5000);
    assert_eq!(
        c.commit("solo", -1, "", None, vec![("t".into(), 2, 1, 0, too_big)]).await,
        Ok(vec![Err(E::OffsetMetadataTooLarge)])
    );

    let fresh = serving(log, config());
    fresh.load().expect("replay");
    let got = fresh.fetch("solo", None).expect("owned");
    assert_eq!(got.len(), 1);
    let ((topic, partition), committed) = &got[0];
    let committed = committed.as_ref().expect("committed");
    assert_eq!((topic.as_str(), *partition, committed.offset, committed.metadata.as_str()), ("t", 0, 42, "m"));
    assert!(fresh.describe("gone").expect("owned").is_none(), "a deleted group stays deleted");
    assert_eq!(fresh.delete("gone").await, Err(E::GroupIdNotFound));
}

/// ConsumerProtocolSubscription v0: the topics a classic consumer subscribes to.
fn subscription(topics: &[&str]) -> Bytes {
    let mut b = vec![0u8, 0];
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t.as_bytes());
    }
    b.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(b)
}

fn committed(c: &Coordinator, group: &str, topic: &str) -> Option<i64> {
    c.fetch(group, Some(&[(topic.to_string(), 0)])).expect("owned")[0].1.as_ref().map(|v| v.offset)
}

fn listed(c: &Coordinator, group: &str) -> bool {
    c.list().iter().any(|g| g.group_id == group)
}

#[tokio::test]
async fn offsets_expire_after_retention_and_empty_groups_are_deleted() {
    let log = Arc::new(MemLog::default());
    let cfg = CoordinatorConfig { offsets_retention_ms: 300, ..config() };
    let c = Arc::new(serving(log.clone(), cfg.clone()));
    let commit = |group: &'static str, generation: i32, member: String, topic: &'static str| {
        let c = c.clone();
        async move {
            let r = c.commit(group, generation, &member, None, vec![(topic.into(), 0, 7, 0, String::new())]).await;
            assert_eq!(r.expect("commit"), vec![Ok(())]);
        }
    };
    // A group that only commits, and a classic group whose one member subscribes to "a"
    // but has offsets for "a" and "b".
    commit("solo", -1, String::new(), "t").await;
    let sub = |id: &str| JoinRequest {
        protocols: vec![("range".into(), subscription(&["a"]))],
        ..join_req(id, None, 10_000)
    };
    let first = c.join("g", sub("")).await;
    let m = c.join("g", sub(&first.member_id)).await;
    assert_eq!(c.sync("g", m.generation, &m.member_id, None, vec![]).await.error, 0);
    commit("g", m.generation, m.member_id.clone(), "a").await;
    commit("g", m.generation, m.member_id.clone(), "b").await;
    assert_eq!(c.expire_offsets().await, 0, "nothing is old enough yet");

    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(c.expire_offsets().await, 2, "solo's offset and g's unsubscribed topic expire");
    assert_eq!(committed(&c, "solo", "t"), None);
    assert!(!listed(&c, "solo"), "an empty group without offsets is deleted");
    assert_eq!((committed(&c, "g", "a"), committed(&c, "g", "b")), (Some(7), None));

    // The member leaves: the group's offsets now expire by the time it became empty.
    c.leave("g", &[(m.member_id.clone(), None)]).await.expect("leave");
    assert_eq!(c.expire_offsets().await, 0, "the group just became empty");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(c.expire_offsets().await, 1);
    assert!(!listed(&c, "g"));

    // The log says the same to a new coordinator.
    let again = serving(log, cfg);
    again.load().expect("load");
    assert_eq!((committed(&again, "solo", "t"), committed(&again, "g", "a")), (None, None));
    assert!(!listed(&again, "solo") && !listed(&again, "g"));
}

/// The cluster's topics as the coordinator sees them: name → (id, partitions).
#[derive(Default)]
struct Cluster(Mutex<BTreeMap<String, (uuid::Uuid, i32)>>);

impl Cluster {
    fn with(topics: &[(&str, i32)]) -> Cluster {
        let c = Cluster::default();
        for (name, n) in topics {
            c.add(name, *n);
        }
        c
    }
    fn add(&self, name: &str, partitions: i32) {
        self.0.lock().expect("lock").insert(name.into(), (uuid::Uuid::new_v4(), partitions));
    }
}

impl Topics for Cluster {
    fn resolve(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        self.0.lock().expect("lock").get(name).copied()
    }
    fn names(&self) -> Vec<String> {
        self.0.lock().expect("lock").keys().cloned().collect()
    }
}

fn hb(
    member_id: &str,
    epoch: i32,
    subscribed: Option<&[&str]>,
    owned: Option<Vec<runnel_coordinator::Tp>>,
) -> HeartbeatIn {
    HeartbeatIn {
        member_id: member_id.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        subscribed: subscribed.map(|s| s.iter().map(|t| t.to_string()).collect()),
        regex: None,
        assignor: None,
        owned,
        session_timeout: Duration::ZERO,
        rebalance_timeout: None,
    }
}

#[tokio::test]
async fn kip848_members_and_assignments_survive_a_new_coordinator() {
    let log = Arc::new(MemLog::default());
    let resolve = Cluster::with(&[("t", 4)]);
    let c = serving(log.clone(), config());
    let a = c.consumer_heartbeat("g", hb("a", 0, Some(&["t"]), Some(vec![])), &resolve).await.expect("join a");
    assert_eq!(a.assignment.as_ref().map(Vec::len), Some(4), "a alone gets every partition");
    let b = c.consumer_heartbeat("g", hb("b", 0, Some(&["t"]), Some(vec![])), &resolve).await.expect("join b");
    // a gives up two partitions; b then gets them.
    let a2 = c.consumer_heartbeat("g", hb("a", a.member_epoch, None, None), &resolve).await.expect("a revokes");
    let kept = a2.assignment.expect("a's new assignment");
    assert_eq!(kept.len(), 2);
    c.consumer_heartbeat("g", hb("a", a2.member_epoch, None, Some(kept.clone())), &resolve).await.expect("a acks");
    let b2 = c.consumer_heartbeat("g", hb("b", b.member_epoch, None, Some(vec![])), &resolve).await.expect("b");
    assert_eq!(b2.assignment.as_ref().map(Vec::len), Some(2));
    let before = c.describe_consumer("g").expect("owned").expect("group");

    // A new coordinator (a restart) knows both members, their epochs and assignments: the
    // members carry on with their current epochs instead of rejoining.
    let again = serving(log.clone(), config());
    again.load().expect("load");
    let after = again.describe_consumer("g").expect("owned").expect("group restored");
    assert_eq!((after.group_epoch, after.assignment_epoch), (before.group_epoch, before.assignment_epoch));
    let members = |s: &runnel_coordinator::ConsumerGroupSummary| {
        s.members
            .iter()
            .map(|m| (m.member_id.clone(), m.epoch, m.assigned.clone(), m.target.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(members(&after), members(&before));
    let a3 = again.consumer_heartbeat("g", hb("a", a2.member_epoch, None, None), &resolve).await.expect("a continues");
    assert_eq!(a3.member_epoch, a2.member_epoch);

    // b leaves; the next coordinator no longer has it.
    again.consumer_heartbeat("g", hb("b", -1, None, None), &resolve).await.expect("b leaves");
    let third = serving(log, config());
    third.load().expect("load");
    let ids: Vec<String> =
        third.describe_consumer("g").expect("owned").expect("group").members.into_iter().map(|m| m.member_id).collect();
    assert_eq!(ids, vec!["a".to_string()]);
}

#[tokio::test]
async fn kip848_regex_subscriptions_follow_new_topics_and_survive_a_restart() {
    let log = Arc::new(MemLog::default());
    let cluster = Cluster::with(&[("orders-eu", 2), ("orders-us", 1), ("payments", 3)]);
    let c = serving(log.clone(), config());
    let bad = HeartbeatIn { regex: Some("orders-(".into()), ..hb("m", 0, Some(&[]), Some(vec![])) };
    assert_eq!(c.consumer_heartbeat("g", bad, &cluster).await.err().map(|e| e.0), Some(E::InvalidRegularExpression));
    let join = HeartbeatIn { regex: Some("orders-.*".into()), ..hb("m", 0, Some(&[]), Some(vec![])) };
    let first = c.consumer_heartbeat("g", join, &cluster).await.expect("join");
    assert_eq!(first.assignment.as_ref().map(Vec::len), Some(3), "orders-eu and orders-us, not payments");
    // A matching topic created later is picked up at the next refresh.
    cluster.add("orders-apac", 2);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let next = c.consumer_heartbeat("g", hb("m", first.member_epoch, None, None), &cluster).await.expect("hb");
    assert!(next.member_epoch > first.member_epoch);
    assert_eq!(next.assignment.as_ref().map(Vec::len), Some(5));
    let described = c.describe_consumer("g").expect("owned").expect("group");
    assert_eq!(described.members[0].regex.as_deref(), Some("orders-.*"));
    // The regex and what it matched come back after a restart, with the same epoch.
    let again = serving(log, config());
    again.load().expect("load");
    let after = again.consumer_heartbeat("g", hb("m", next.member_epoch, None, None), &cluster).await.expect("hb");
    assert_eq!(after.member_epoch, next.member_epoch);
    assert_eq!(again.describe_consumer("g").expect("owned").expect("group").members[0].assigned.len(), 5);
}

#[tokio::test]
async fn kip848_member_that_never_revokes_is_removed_after_its_rebalance_timeout() {
    let cluster = Cluster::with(&[("t", 4)]);
    let c = serving(Arc::new(MemLog::default()), config());
    let join = |id: &str| HeartbeatIn {
        rebalance_timeout: Some(Duration::from_millis(200)),
        ..hb(id, 0, Some(&["t"]), Some(vec![]))
    };
    let a = c.consumer_heartbeat("g", join("a"), &cluster).await.expect("a joins");
    let all = a.assignment.clone().expect("a owns everything");
    let b = c.consumer_heartbeat("g", join("b"), &cluster).await.expect("b joins");
    assert_eq!(b.assignment.as_ref().map(Vec::len), Some(0), "b waits for a to revoke");
    // a keeps heartbeating but keeps reporting every partition: it never revokes, and is
    // fenced once 200 ms have passed.
    let started = std::time::Instant::now();
    let mut epoch = a.member_epoch;
    let fenced = loop {
        match c.consumer_heartbeat("g", hb("a", epoch, None, Some(all.clone())), &cluster).await {
            Ok(r) => epoch = r.member_epoch,
            Err(e) => break e.0,
        }
        assert!(started.elapsed() < Duration::from_secs(5), "a was never fenced");
        c.tick().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(fenced, E::UnknownMemberId);
    assert!(started.elapsed() >= Duration::from_millis(200));
    let members: Vec<String> =
        c.describe_consumer("g").expect("owned").expect("group").members.into_iter().map(|m| m.member_id).collect();
    assert_eq!(members, vec!["b".to_string()]);
    let b2 = c.consumer_heartbeat("g", hb("b", b.member_epoch, None, Some(vec![])), &cluster).await.expect("b");
    assert_eq!(b2.assignment.map(|a| a.len()), Some(4), "b takes over");
}

/// A cluster moves the leadership of offsets-log partitions between brokers: a coordinator
/// answers only for the partitions it has read back, and members waiting on a rebalance
/// of a group whose partition moves away are told to find the new coordinator.
#[tokio::test]
async fn a_coordinator_serves_only_the_partitions_it_has_loaded() {
    let log = Arc::new(MemLog::default());
    let cfg = CoordinatorConfig { initial_rebalance_delay_ms: 60_000, ..config() };
    let c = Arc::new(serving(log.clone(), cfg.clone()));
    c.commit("kept", -1, "", None, vec![("t".into(), 0, 9, 0, String::new())]).await.expect("commit");
    let p = c.partition_for("kept");
    let other = (0..100).map(|i| format!("g{i}")).find(|g| c.partition_for(g) != p).expect("another partition");

    // A member waits out the initial rebalance delay; the partition moves away meanwhile.
    let first = c.join("kept", join_req("", None, 10_000)).await;
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.join("kept", join_req(&first.member_id, None, 10_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    log.1.lock().expect("lock").insert(p);
    c.unload_partition(p);
    let answered = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("answered").expect("join");
    assert_eq!(answered.error, E::NotCoordinator.code());

    assert_eq!(c.owner_error("kept"), Some(E::NotCoordinator));
    assert_eq!(c.fetch("kept", None).err(), Some(E::NotCoordinator));
    assert_eq!(c.heartbeat("kept", 1, "m", None), Err(E::NotCoordinator));
    assert_eq!(
        c.commit("kept", -1, "", None, vec![("t".into(), 0, 10, 0, String::new())]).await,
        Err(E::NotCoordinator)
    );
    assert!(!listed(&c, "kept"));
    assert!(!c.loaded_partitions().contains(&p));
    // Groups of other partitions are still served.
    assert_eq!(c.owner_error(&other), None);
    c.commit(&other, -1, "", None, vec![("t".into(), 0, 1, 0, String::new())]).await.expect("commit elsewhere");

    // Leadership comes back: until the partition is read back its groups are loading (the
    // client retries here instead of looking the coordinator up again), then the commit
    // from before is there.
    log.1.lock().expect("lock").remove(&p);
    assert_eq!(c.owner_error("kept"), Some(E::CoordinatorLoadInProgress));
    assert!(c.load_partition(p).expect("load") >= 1);
    assert_eq!(c.owner_error("kept"), None);
    assert_eq!(committed(&c, "kept", "t"), Some(9));
}

#[tokio::test]
async fn a_classic_group_stops_at_group_max_size_and_unjoined_member_ids_expire() {
    let c = Arc::new(serving(Arc::new(MemLog::default()), CoordinatorConfig { group_max_size: 2, ..config() }));
    let a = join_new(&c, "g").await;
    assert_eq!(a.error, 0);
    // A member id handed out (MEMBER_ID_REQUIRED) counts: the group is full with it.
    let handed = c.join("g", join_req("", None, 50)).await;
    assert_eq!(handed.error, E::MemberIdRequired.code());
    assert_eq!(c.join("g", join_req("", None, 50)).await.error, E::GroupMaxSizeReached.code());
    // Its join never comes: after its session timeout it no longer holds a place.
    tokio::time::sleep(Duration::from_millis(120)).await;
    c.sync("g", a.generation, &a.member_id, None, vec![]).await;
    assert_eq!(c.heartbeat("g", a.generation, &a.member_id, None), Ok(()));
    c.tick().await;
    assert_eq!(c.join("g", join_req(&handed.member_id, None, 50)).await.error, E::UnknownMemberId.code());
    assert_eq!(c.join("g", join_req("", None, 10_000)).await.error, E::MemberIdRequired.code());
    // Members already in the group still rejoin.
    let again = c.clone();
    let a_id = a.member_id.clone();
    let rejoin = tokio::spawn(async move { again.join("g", join_req(&a_id, None, 10_000)).await });
    assert_eq!(rejoin.await.expect("rejoin").error, 0);
}

#[tokio::test]
async fn a_kip848_group_stops_at_group_consumer_max_size() {
    let resolve = Cluster::with(&[("t", 4)]);
    let c = serving(Arc::new(MemLog::default()), CoordinatorConfig { consumer_group_max_size: 2, ..config() });
    let a = c.consumer_heartbeat("g", hb("a", 0, Some(&["t"]), Some(vec![])), &resolve).await.expect("join a");
    c.consumer_heartbeat("g", hb("b", 0, Some(&["t"]), Some(vec![])), &resolve).await.expect("join b");
    let full = c.consumer_heartbeat("g", hb("c", 0, Some(&["t"]), Some(vec![])), &resolve).await;
    assert_eq!(full.map(|_| ()).map_err(|(e, _)| e), Err(E::GroupMaxSizeReached));
    // A member that is in the group may rejoin (epoch 0) and heartbeat.
    c.consumer_heartbeat("g", hb("a", 0, Some(&["t"]), Some(vec![])), &resolve).await.expect("a rejoins");
    c.consumer_heartbeat("g", hb("b", -1, None, None), &resolve).await.expect("b leaves");
    c.consumer_heartbeat("g", hb("c", 0, Some(&["t"]), Some(vec![])), &resolve).await.expect("room for c");
    assert!(a.member_epoch > 0);
}

#[tokio::test]
async fn transactional_offsets_take_effect_when_their_transaction_commits() {
    let log = Arc::new(MemLog::default());
    let c = Arc::new(serving(log.clone(), config()));
    let tp = || vec![("t".to_string(), 0)];
    let offset = |c: &Coordinator| c.fetch("g", Some(&tp())).expect("owned")[0].1.as_ref().map(|v| v.offset);
    let commit = |offset: i64| vec![("t".to_string(), 0, offset, -1, String::new())];
    assert_eq!(c.txn_commit("g", 7, 0, -1, "", None, commit(42)).await, Ok(vec![Ok(())]));
    assert_eq!(offset(&c), None, "not before the transaction commits");
    assert_eq!(c.unstable("g", &tp()), tp());
    // A coordinator that takes over while the transaction is open knows it is.
    assert_eq!(serving(log.clone(), config()).unstable("g", &tp()), tp());
    let p = c.partition_for("g");
    log.end_txn(p, 7, true);
    c.complete_txn(p, 7, true);
    assert_eq!((offset(&c), c.unstable("g", &tp())), (Some(42), vec![]));
    assert_eq!(offset(&serving(log.clone(), config())), Some(42), "replayed from the log");
    // An aborted transaction's offsets never count.
    c.txn_commit("g", 8, 0, -1, "", None, commit(50)).await.expect("commit");
    log.end_txn(p, 8, false);
    c.complete_txn(p, 8, false);
    assert_eq!((offset(&c), c.unstable("g", &tp())), (Some(42), vec![]));
    assert_eq!(offset(&serving(log.clone(), config())), Some(42));
    // KIP-447: a member id or generation is checked against the group.
    let a = join_new(&c, "members").await;
    c.sync("members", a.generation, &a.member_id, None, vec![(a.member_id.clone(), Bytes::from_static(b"A"))]).await;
    let fenced = c.txn_commit("members", 9, 0, a.generation + 1, &a.member_id, None, commit(1)).await;
    assert_eq!(fenced, Err(E::IllegalGeneration));
    let ok = c.txn_commit("members", 9, 0, a.generation, &a.member_id, None, commit(1)).await;
    assert_eq!(ok, Ok(vec![Ok(())]));
}

/// A log whose `read_all` runs a hook right after it has read (something that lands while
/// a load is under way).
struct HookLog {
    log: Arc<MemLog>,
    after_read: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl GroupLog for HookLog {
    fn partitions(&self) -> i32 {
        self.log.partitions()
    }
    fn append(&self, partition: i32, records: Records) -> LogFuture {
        self.log.append(partition, records)
    }
    fn append_txn(&self, partition: i32, producer_id: i64, epoch: i16, records: Records) -> LogFuture {
        self.log.append_txn(partition, producer_id, epoch, records)
    }
    fn read_all(&self, partition: i32) -> Result<Replay, String> {
        let read = self.log.read_all(partition);
        if let Some(hook) = self.after_read.lock().expect("lock").take() {
            hook();
        }
        read
    }
    fn leads(&self, partition: i32) -> bool {
        self.log.leads(partition)
    }
}

#[tokio::test]
async fn a_transaction_ending_while_its_partition_loads_takes_effect() {
    let mem = Arc::new(MemLog::default());
    let commit = vec![("t".to_string(), 0, 42, -1, String::new())];
    serving(mem.clone(), config()).txn_commit("g", 7, 0, -1, "", None, commit).await.expect("commit");
    let log = Arc::new(HookLog { log: mem.clone(), after_read: Mutex::new(None) });
    let c = Arc::new(Coordinator::new(log.clone(), config()));
    let p = c.partition_for("g");
    // The marker lands after the load has read the log (which still has the transaction
    // open) and before it serves the partition.
    let (during, m) = (c.clone(), mem.clone());
    *log.after_read.lock().expect("lock") = Some(Box::new(move || {
        m.end_txn(p, 7, true);
        during.complete_txn(p, 7, true);
    }));
    c.load_partition(p).expect("load");
    let tp = vec![("t".to_string(), 0)];
    assert_eq!(c.fetch("g", Some(&tp)).expect("owned")[0].1.as_ref().map(|v| v.offset), Some(42));
    assert_eq!(c.unstable("g", &tp), vec![], "nothing left pending");
}
