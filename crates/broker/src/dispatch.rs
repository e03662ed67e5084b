//! The one table of every Kafka API this broker serves: its version range (what
//! ApiVersions reports and the connection checks before decoding) and its handler (one
//! file per API in `handlers/`). ApiVersions itself is answered here, from the table.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestHeader, RequestKind};

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply, Session};
use crate::handlers;

/// Declares the table once: `Api(min, max) => handler;` gives both [`APIS`] and the route.
macro_rules! api_table {
    ($($api:ident($min:literal, $max:literal) => $handler:expr;)*) => {
        /// (API, min version, max version). Minimums follow Kafka 4.x, which dropped older ones.
        pub const APIS: &[(ApiKey, i16, i16)] = &[$((ApiKey::$api, $min, $max)),*];

        fn route(b: &Arc<Broker>, request: RequestKind, v: i16, ctx: &Ctx) -> Reply {
            match request {
                $(RequestKind::$api(r) => {
                    let handle: fn(&Arc<Broker>, _, i16, &Ctx) -> Reply = $handler;
                    handle(b, r, v, ctx)
                })*
                // `supported` gates decoding, so only an API missing from the table lands here.
                _ => now(ApiVersionsResponse::default().with_error_code(ResponseError::UnsupportedVersion.code())),
            }
        }
    };
}

api_table! {
    Produce(3, 13) => |b, r, v, ctx| handlers::produce::handle(b, r, v, ctx);
    Fetch(4, 17) => |b, r, v, ctx| handlers::fetch::handle(b.clone(), r, v, ctx);
    ListOffsets(1, 10) => |b, r, v, ctx| handlers::list_offsets::handle(b, r, v, ctx);
    Metadata(0, 13) => |b, r, v, ctx| handlers::metadata::handle(b, r, v, ctx);
    ApiVersions(0, 4) => |b, _r, _v, _ctx| now(with_features(api_versions_response(), b));
    CreateTopics(2, 7) => |b, r, v, ctx| handlers::create_topics::handle(b, r, v, ctx);
    DeleteTopics(1, 6) => |b, r, v, ctx| handlers::delete_topics::handle(b, r, v, ctx);
    DeleteRecords(0, 2) => |b, r, v, ctx| handlers::delete_records::handle(b, r, v, ctx);
    ElectLeaders(0, 2) => |b, r, v, ctx| handlers::elect_leaders::handle(b, r, v, ctx);
    AlterPartitionReassignments(0, 1) => |b, r, v, ctx| handlers::partition_reassignments::alter(b, r, v, ctx);
    ListPartitionReassignments(0, 0) => |b, r, v, ctx| handlers::partition_reassignments::list(b, r, v, ctx);
    InitProducerId(0, 5) => |b, r, v, ctx| handlers::init_producer_id::handle(b, r, v, ctx);
    AddPartitionsToTxn(0, 5) => |b, r, v, ctx| handlers::txn::add_partitions(b, r, v, ctx);
    AddOffsetsToTxn(0, 4) => |b, r, v, ctx| handlers::txn::add_offsets(b, r, v, ctx);
    EndTxn(0, 5) => |b, r, v, ctx| handlers::txn::end(b, r, v, ctx);
    TxnOffsetCommit(0, 5) => |b, r, v, ctx| handlers::txn_offset_commit::handle(b, r, v, ctx);
    DescribeProducers(0, 0) => |b, r, v, ctx| handlers::txn_admin::describe_producers(b, r, v, ctx);
    DescribeTransactions(0, 0) => |b, r, v, ctx| handlers::txn_admin::describe_transactions(b, r, v, ctx);
    ListTransactions(0, 2) => |b, r, v, ctx| handlers::txn_admin::list_transactions(b, r, v, ctx);
    WriteTxnMarkers(1, 1) => |b, r, v, ctx| handlers::write_txn_markers::handle(b, r, v, ctx);
    OffsetForLeaderEpoch(2, 4) => |b, r, v, ctx| handlers::offset_for_leader_epoch::handle(b, r, v, ctx);
    DescribeConfigs(1, 4) => |b, r, v, ctx| handlers::describe_configs::handle(b, r, v, ctx);
    AlterConfigs(0, 2) => |b, r, v, ctx| handlers::alter_configs::legacy(b, r, v, ctx);
    CreatePartitions(0, 3) => |b, r, v, ctx| handlers::create_partitions::handle(b, r, v, ctx);
    IncrementalAlterConfigs(0, 1) => |b, r, v, ctx| handlers::alter_configs::incremental(b, r, v, ctx);
    DescribeQuorum(0, 2) => |b, r, v, ctx| handlers::describe_quorum::handle(b, r, v, ctx);
    DescribeTopicPartitions(0, 0) => |b, r, v, ctx| handlers::describe_topic_partitions::handle(b, r, v, ctx);
    ListConfigResources(0, 1) => |b, r, v, ctx| handlers::list_config_resources::handle(b, r, v, ctx);
    DescribeCluster(0, 1) => |b, r, v, ctx| handlers::describe_cluster::handle(b, r, v, ctx);
    DescribeLogDirs(1, 4) => |b, r, v, ctx| handlers::describe_log_dirs::handle(b, r, v, ctx);
    FindCoordinator(0, 6) => |b, r, v, ctx| handlers::find_coordinator::handle(b, r, v, ctx);
    JoinGroup(0, 9) => |b, r, v, ctx| handlers::join_group::handle(b, r, v, ctx);
    SyncGroup(0, 5) => |b, r, v, ctx| handlers::sync_group::handle(b, r, v, ctx);
    Heartbeat(0, 4) => |b, r, v, ctx| handlers::heartbeat::handle(b, r, v, ctx);
    LeaveGroup(0, 5) => |b, r, v, ctx| handlers::leave_group::handle(b, r, v, ctx);
    OffsetCommit(2, 9) => |b, r, v, ctx| handlers::offset_commit::handle(b, r, v, ctx);
    OffsetFetch(1, 9) => |b, r, v, ctx| handlers::offset_fetch::handle(b, r, v, ctx);
    DescribeGroups(0, 5) => |b, r, v, ctx| handlers::describe_groups::handle(b, r, v, ctx);
    ListGroups(0, 5) => |b, r, v, ctx| handlers::list_groups::handle(b, r, v, ctx);
    DeleteGroups(0, 2) => |b, r, v, ctx| handlers::delete_groups::handle(b, r, v, ctx);
    OffsetDelete(0, 0) => |b, r, v, ctx| handlers::offset_delete::handle(b, r, v, ctx);
    ConsumerGroupHeartbeat(0, 1) => |b, r, v, ctx| handlers::consumer_group_heartbeat::handle(b, r, v, ctx);
    ConsumerGroupDescribe(0, 1) => |b, r, v, ctx| handlers::consumer_group_describe::handle(b, r, v, ctx);
    ShareGroupHeartbeat(1, 1) => |b, r, v, ctx| handlers::share_group_heartbeat::handle(b, r, v, ctx);
    ShareGroupDescribe(1, 1) => |b, r, v, ctx| handlers::share_group_describe::handle(b, r, v, ctx);
    ShareFetch(1, 1) => |b, r, v, ctx| handlers::share_fetch::handle(b, r, v, ctx);
    ShareAcknowledge(1, 1) => |b, r, v, ctx| handlers::share_acknowledge::handle(b, r, v, ctx);
    AlterShareGroupOffsets(0, 0) => |b, r, v, ctx| handlers::share_group_offsets::alter(b, r, v, ctx);
    DeleteShareGroupOffsets(0, 0) => |b, r, v, ctx| handlers::share_group_offsets::delete(b, r, v, ctx);
    DescribeShareGroupOffsets(0, 1) => |b, r, v, ctx| handlers::describe_share_group_offsets::handle(b, r, v, ctx);
    DescribeAcls(1, 3) => |b, r, v, ctx| handlers::acls::describe(b, r, v, ctx);
    CreateAcls(1, 3) => |b, r, v, ctx| handlers::acls::create(b, r, v, ctx);
    DeleteAcls(1, 3) => |b, r, v, ctx| handlers::acls::delete(b, r, v, ctx);
    DescribeClientQuotas(0, 1) => |b, r, v, ctx| handlers::client_quotas::describe(b, r, v, ctx);
    AlterClientQuotas(0, 1) => |b, r, v, ctx| handlers::client_quotas::alter(b, r, v, ctx);
    DescribeUserScramCredentials(0, 0) => |b, r, v, ctx| handlers::user_scram_credentials::describe(b, r, v, ctx);
    AlterUserScramCredentials(0, 0) => |b, r, v, ctx| handlers::user_scram_credentials::alter(b, r, v, ctx);
    // Served by the connection before a login (sasl_gate); here: not a SASL listener, or
    // already logged in.
    SaslHandshake(0, 1) => |_b, _r, _v, _ctx| now(kafka_protocol::messages::SaslHandshakeResponse::default()
        .with_error_code(ResponseError::IllegalSaslState.code()));
    SaslAuthenticate(0, 2) => |_b, _r, _v, _ctx| now(kafka_protocol::messages::SaslAuthenticateResponse::default()
        .with_error_code(ResponseError::IllegalSaslState.code()));
}

pub fn supported(key: ApiKey, version: i16) -> bool {
    APIS.iter().any(|(k, min, max)| *k == key && (*min..=*max).contains(&version))
}

/// ApiVersions: the table, nothing else.
fn api_versions_response() -> ApiVersionsResponse {
    let keys = APIS
        .iter()
        .map(|(k, min, max)| {
            ApiVersion::default().with_api_key(*k as i16).with_min_version(*min).with_max_version(*max)
        })
        .collect();
    ApiVersionsResponse::default().with_api_keys(keys)
}

/// The features this broker has (KIP-584), with the level each supports at most.
const TRANSACTION_VERSION: (&str, i16) = ("transaction.version", 2);
/// Share groups (KIP-932), on as in Kafka 4.2+.
const SHARE_VERSION: (&str, i16) = ("share.version", 1);

/// ApiVersions v3+ also lists features: `transaction.version`, finalized at the level the
/// `transaction.version` setting gives (2 by default: Kafka 4 clients then use
/// transactions version 2, KIP-890), and `share.version` 1. The levels are fixed while
/// the broker runs, so the epoch of the finalized features is fixed too.
fn with_features(resp: ApiVersionsResponse, b: &Broker) -> ApiVersionsResponse {
    let features = [(TRANSACTION_VERSION, b.transaction_version()), (SHARE_VERSION, SHARE_VERSION.1)];
    let supported = features
        .iter()
        .map(|((name, max), _)| {
            SupportedFeatureKey::default().with_name((*name).into()).with_min_version(0).with_max_version(*max)
        })
        .collect();
    let finalized = features
        .iter()
        .filter(|(_, level)| *level > 0)
        .map(|((name, _), level)| {
            FinalizedFeatureKey::default()
                .with_name((*name).into())
                .with_min_version_level(*level)
                .with_max_version_level(*level)
        })
        .collect();
    resp.with_supported_features(supported).with_finalized_features_epoch(1).with_finalized_features(finalized)
}

/// The KIP-511 answer to ApiVersions at a version this broker does not know: v0 with
/// UNSUPPORTED_VERSION and the table, so the client can pick a version.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    api_versions_response().with_error_code(ResponseError::UnsupportedVersion.code())
}

pub fn dispatch(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    request: RequestKind,
    session: &Session,
    files: Option<Arc<crate::sendfile::FileRecords>>,
) -> Reply {
    let ctx = Ctx {
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        peer: session.peer,
        listener: session.listener.clone(),
        access: broker.access(&session.principal, session.peer),
        mute: session.mute.clone(),
        quotas: broker.controller().client_quotas(),
        deferred: session.deferred.clone(),
        files,
    };
    if ctx.quotas.is_empty() {
        return route(broker, request, header.request_api_version, &ctx);
    }
    // request_percentage: the time a request takes to handle here (its answer may come
    // later, waiting costs nothing) counts against the client's quota; over it, the
    // connection is muted.
    let started = std::time::Instant::now();
    let reply = route(broker, request, header.request_api_version, &ctx);
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let throttle_ms =
        broker.quotas.record(&ctx.quotas, &ctx.quota_client(), crate::quota::REQUEST, ms, crate::now_ms());
    ctx.mute.set(throttle_ms);
    reply
}
