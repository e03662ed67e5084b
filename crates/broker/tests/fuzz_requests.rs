//! Bad input never crashes the broker (MEASURING.md, "Bad input"): valid requests of every
//! supported API, mutated at random (bit flips, overwritten bytes, truncation, inserted and
//! deleted bytes, corrupted record batches), are handed to a real broker in a temporary
//! data directory through the same entry point as a socket frame. Each must yield a
//! response or a "close the connection" error, never a panic, and the broker must still
//! serve a well-formed request afterwards. Bounded and deterministic: the seed of a failing
//! case is printed, and `RUNNEL_FUZZ_ITERATIONS` / `RUNNEL_FUZZ_SEED` scale or replay a run.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use runnel_broker::{connection::handle_frame, Broker, BrokerConfig, Settings};

const PEER: std::net::SocketAddr =
    std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0));

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn frame<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, req: &R) -> Bytes {
    let mut buf = BytesMut::new();
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    header.encode(&mut buf, R::header_version(version)).expect("header");
    req.encode(&mut buf, version).expect("body");
    buf.freeze()
}

fn records(compression: Compression) -> Bytes {
    let recs: Vec<Record> = (0..4)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 1_700_000_000_000 + i,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(vec![b'v'; 20])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, recs.iter(), &RecordEncodeOptions { version: 2, compression })
        .expect("encode");
    buf.freeze()
}

fn topic(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// One valid request per API, at a current version.
fn corpus() -> Vec<Bytes> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let produce = |c| {
        ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![TopicProduceData::default()
            .with_name(topic("fuzz"))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(records(c)))])])
    };
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![
        fetch_request::FetchTopic::default().with_topic(topic("fuzz")).with_partitions(vec![
            fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20),
        ]),
    ]);
    let list_offsets =
        ListOffsetsRequest::default().with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic("fuzz"))
            .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(5)])]);
    let create = CreateTopicsRequest::default().with_topics(vec![create_topics_request::CreatableTopic::default()
        .with_name(topic("fuzz2"))
        .with_num_partitions(2)
        .with_replication_factor(1)
        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("retention.ms"))
            .with_value(Some(StrBytes::from_static_str("1000")))])]);
    let metadata = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default().with_name(Some(topic("fuzz")))]));
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("fuzz")),
    ]);
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("fuzz"))
            .with_configs(vec![incremental_alter_configs_request::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_static_str("100000")))]),
    ]);
    let delete_records =
        DeleteRecordsRequest::default().with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
            .with_name(topic("fuzz"))
            .with_partitions(vec![delete_records_request::DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(1)])]);
    let partitions = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default().with_name(topic("fuzz")).with_count(3),
    ]);
    vec![
        frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()),
        frame(ApiKey::Metadata, 12, &metadata),
        frame(ApiKey::Produce, 9, &produce(Compression::None)),
        frame(ApiKey::Produce, 11, &produce(Compression::Lz4)),
        frame(ApiKey::Produce, 9, &produce(Compression::Zstd)),
        frame(ApiKey::Fetch, 12, &fetch),
        frame(ApiKey::ListOffsets, 8, &list_offsets),
        frame(ApiKey::CreateTopics, 7, &create),
        frame(ApiKey::DescribeConfigs, 4, &describe),
        frame(ApiKey::IncrementalAlterConfigs, 1, &alter),
        frame(ApiKey::DeleteRecords, 2, &delete_records),
        frame(ApiKey::CreatePartitions, 3, &partitions),
        frame(ApiKey::InitProducerId, 4, &InitProducerIdRequest::default().with_transaction_timeout_ms(1000)),
        frame(ApiKey::DescribeCluster, 1, &DescribeClusterRequest::default()),
    ]
}

fn mutate(rng: &mut Rng, input: &Bytes) -> Bytes {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(b.len());
        match rng.below(7) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.next() as u8,
            2 => b.truncate(at),
            3 => b.insert(at, rng.next() as u8),
            4 => {
                b.remove(at);
            }
            // Lengths and counts: make a 4-byte field huge, negative or zero.
            5 if at + 4 <= b.len() => {
                let v: i32 = [i32::MAX, -1, 0, 1 << 20, i32::MIN][rng.below(5)];
                b[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            _ => {
                let len = rng.below(8).min(b.len() - at);
                for x in &mut b[at..at + len] {
                    *x = 0xff;
                }
            }
        }
    }
    Bytes::from(b)
}

#[test]
fn mutated_requests_never_crash_the_broker() {
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_test_writer().try_init();
    let iterations: usize = std::env::var("RUNNEL_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("RUNNEL_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_1234_abcd);
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let mut settings = Settings::default();
        settings.set("log.dirs", &dir.path().to_string_lossy()).expect("set");
        settings.set("log.fsync.policy", "never").expect("set");
        // Each replica holds open files; stay inside this process's descriptor limit.
        settings.set("max.broker.partitions", "200").expect("set");
        let broker: Arc<Broker> = Broker::start(BrokerConfig::from_settings(settings).expect("config")).await.expect("start");
        let corpus = corpus();
        // The unmutated corpus must all be answered (creates topic "fuzz" via metadata).
        for f in &corpus {
            let out = handle_frame(&broker, f.clone(), PEER).await;
            assert!(matches!(out, Ok(Some(_))), "valid request refused: {out:?}");
        }
        let mut rng = Rng(seed | 1);
        let (mut answered, mut closed) = (0, 0);
        for i in 0..iterations {
            let case_seed = rng.next();
            let mut case = Rng(case_seed | 1);
            let input = &corpus[case.below(corpus.len())];
            let mutated = mutate(&mut case, input);
            let joined = tokio::spawn({
                let b = broker.clone();
                async move { handle_frame(&b, mutated, PEER).await }
            })
            .await;
            match joined {
                Ok(Ok(_)) => answered += 1,
                Ok(Err(_)) => closed += 1,
                Err(e) => panic!("iteration {i}: handler panicked ({e}); replay with RUNNEL_FUZZ_SEED={seed} (case seed {case_seed})"),
            }
        }
        // Still healthy: a valid request is answered.
        let out = handle_frame(&broker, corpus[1].clone(), PEER).await;
        assert!(matches!(out, Ok(Some(_))));
        eprintln!("fuzz: {iterations} mutated requests, {answered} answered, {closed} closed the connection");
        assert!(answered > 0 && closed > 0, "mutations should exercise both paths");
    });
}

#[test]
fn length_prefixed_response_frames_are_well_formed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let mut settings = Settings::default();
        settings.set("log.dirs", &dir.path().to_string_lossy()).expect("set");
        let broker = Broker::start(BrokerConfig::from_settings(settings).expect("config")).await.expect("start");
        // ApiVersions v99: the v0 fallback with UNSUPPORTED_VERSION (KIP-511).
        let mut buf = BytesMut::new();
        buf.put_i16(18);
        buf.put_i16(99);
        buf.put_i32(42);
        buf.put_i16(-1);
        let out = handle_frame(&broker, buf.freeze(), PEER).await.expect("answered").expect("a response");
        let len = i32::from_be_bytes([out[0], out[1], out[2], out[3]]) as usize;
        assert_eq!(len, out.len() - 4);
        assert_eq!(i32::from_be_bytes([out[4], out[5], out[6], out[7]]), 42, "correlation id");
        assert_eq!(i16::from_be_bytes([out[8], out[9]]), 35, "UNSUPPORTED_VERSION");
    });
}
