//! The broker's metrics, served in the Prometheus (OpenMetrics) text format at the admin
//! listener's `/metrics`; `docs/metrics.md` lists them all.
//!
//! Names follow what Kafka users already graph: Kafka's JMX MBeans as the Prometheus JMX
//! exporter's usual rules name them (`kafka.server:type=BrokerTopicMetrics,
//! name=BytesInPerSec,topic=t` is `kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`).
//! What Kafka has no MBean for (Raft per partition, fsync) is named `runnel_*`.
//!
//! One registry per process, as a process runs one broker. Counters are counted where the
//! work happens, through handles looked up once (per API, per topic), so a request takes no
//! lock for them beyond a read of the topic map. Gauges that describe state (partitions led,
//! under-replicated) are computed when scraped, by the hooks the broker registers.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use runnel_sync::{LockExt, RwLockExt};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub request: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub request: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabel {
    pub quota: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabel {
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DelayedLabel {
    pub delayedoperation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LagLabels {
    pub group: String,
    pub topic: String,
    pub partition: String,
}

/// What waits in a purgatory (`delayedoperation`, as Kafka names them).
#[derive(Clone, Copy, Debug)]
pub enum Delayed {
    /// An acks=all produce waiting for its commit.
    Produce = 0,
    /// A fetch long-polling for data.
    Fetch = 1,
}

/// Why a read of a partition's log ran on the blocking pool rather than on a runtime
/// thread: it might wait for the disk.
#[derive(Clone, Copy, Debug)]
pub enum DiskRead {
    /// A fetch behind the log's tail: its first batch is found by reading the file.
    Behind = 0,
    /// A fetch at the tail, with pages no longer in the page cache.
    Uncached = 1,
    /// A ListOffsets by time: batch headers and a batch read from the file.
    ByTime = 2,
    /// A Raft leader's entries for a follower behind, read into the page cache before the
    /// driver sends them.
    Replicate = 3,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, from 100 µs doubling to about 13 s: a request, a fsync.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// The highest Kafka API key this broker can count under its own name (keys above share
/// one slot, which no API served today reaches).
const API_KEYS: usize = 128;

/// One API's handles, looked up once.
pub struct ApiHandles {
    pub requests: Counter,
    pub time: Histogram,
    name: String,
}

/// One topic's handles, looked up once per topic.
pub struct TopicHandles {
    pub bytes_in: Counter,
    pub messages_in: Counter,
    pub bytes_out: Counter,
    pub produce_requests: Counter,
    pub failed_produce_requests: Counter,
    pub fetch_requests: Counter,
    pub failed_fetch_requests: Counter,
}

type Hook = Arc<dyn Fn(&Metrics) + Send + Sync>;

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabel, Counter>,
    request_time: Histograms<RequestLabel>,
    errors: Family<ErrorLabels, Counter>,
    bytes_in: Family<TopicLabel, Counter>,
    messages_in: Family<TopicLabel, Counter>,
    bytes_out: Family<TopicLabel, Counter>,
    produce_requests: Family<TopicLabel, Counter>,
    failed_produce_requests: Family<TopicLabel, Counter>,
    fetch_requests: Family<TopicLabel, Counter>,
    failed_fetch_requests: Family<TopicLabel, Counter>,
    connections: Family<ListenerLabel, Gauge>,
    purgatory: Family<DelayedLabel, Gauge>,
    /// Set by the broker's scrape hook.
    pub partitions: Gauge,
    pub leaders: Gauge,
    pub under_replicated: Gauge,
    pub offline: Gauge,
    pub active_controller: Gauge,
    pub commit_lag: Gauge,
    pub group_lag: Family<LagLabels, Gauge>,
    pub elections: Counter,
    pub flush_time: Histogram,
    throttle_time: Family<QuotaLabel, Counter<f64>>,
    apis: [OnceLock<ApiHandles>; API_KEYS],
    delayed: [Gauge; 2],
    disk_reads_by_reason: Family<ReasonLabel, Counter>,
    disk_reads: [Counter; 4],
    topics: RwLock<HashMap<String, Arc<TopicHandles>>>,
    hooks: Mutex<Vec<Hook>>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// This process's metrics.
pub fn get() -> &'static Metrics {
    &METRICS
}

/// Counts `gauge` up while the guard lives.
pub struct Held(Gauge);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    fn new() -> Metrics {
        let purgatory: Family<DelayedLabel, Gauge> = Family::default();
        let delayed = [Delayed::Produce, Delayed::Fetch]
            .map(|op| purgatory.get_or_create(&DelayedLabel { delayedoperation: format!("{op:?}") }).clone());
        let disk_reads_by_reason: Family<ReasonLabel, Counter> = Family::default();
        let disk_reads = [DiskRead::Behind, DiskRead::Uncached, DiskRead::ByTime, DiskRead::Replicate]
            .map(|why| disk_reads_by_reason.get_or_create(&ReasonLabel { reason: format!("{why:?}") }).clone());
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            request_time: Family::new_with_constructor(seconds_histogram),
            errors: Family::default(),
            bytes_in: Family::default(),
            messages_in: Family::default(),
            bytes_out: Family::default(),
            produce_requests: Family::default(),
            failed_produce_requests: Family::default(),
            fetch_requests: Family::default(),
            failed_fetch_requests: Family::default(),
            connections: Family::default(),
            purgatory,
            partitions: Gauge::default(),
            leaders: Gauge::default(),
            under_replicated: Gauge::default(),
            offline: Gauge::default(),
            active_controller: Gauge::default(),
            commit_lag: Gauge::default(),
            group_lag: Family::default(),
            elections: Counter::default(),
            flush_time: seconds_histogram(),
            throttle_time: Family::default(),
            apis: [const { OnceLock::new() }; API_KEYS],
            delayed,
            disk_reads_by_reason,
            disk_reads,
            topics: RwLock::new(HashMap::new()),
            hooks: Mutex::new(Vec::new()),
        };

        // Series for every quota, so that "never throttled" shows as 0.
        for quota in ["producer_byte_rate", "consumer_byte_rate", "request_percentage"] {
            let _ = m.throttle_time.get_or_create(&QuotaLabel { quota: quota.to_string() });
        }
        m.register()
    }

    fn register(mut self) -> Metrics {
        let r = &mut self.registry;
        r.register("kafka_network_requestmetrics_requests", "Requests received, by API", self.requests.clone());
        r.register_with_unit(
            "kafka_network_requestmetrics_totaltime",
            "Time from a request's arrival to its response being ready, by API",
            Unit::Seconds,
            self.request_time.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses (each partition's or resource's), by API and error",
            self.errors.clone(),
        );
        r.register_with_unit(
            "kafka_server_clientquotas_throttletime",
            "Time clients were throttled for, by the quota they went over",
            Unit::Seconds,
            self.throttle_time.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_bytesin",
            "Bytes of record batches appended by producers to partitions led here, by topic",
            self.bytes_in.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended by producers to partitions led here, by topic",
            self.messages_in.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_bytesout",
            "Bytes of record batches sent to consumers, by topic",
            self.bytes_out.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_totalproducerequests",
            "Produce requests, counted per topic",
            self.produce_requests.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_failedproducerequests",
            "Produce requests with an error for a partition of the topic",
            self.failed_produce_requests.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_totalfetchrequests",
            "Fetch requests from consumers, counted per topic",
            self.fetch_requests.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_failedfetchrequests",
            "Fetch requests from consumers with an error for a partition of the topic",
            self.failed_fetch_requests.clone(),
        );
        r.register(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections, by listener",
            self.connections.clone(),
        );
        r.register(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting: produce for its commit (acks=all), fetch for data (long poll)",
            self.purgatory.clone(),
        );
        r.register(
            "kafka_server_replicamanager_partitioncount",
            "Partitions with a replica on this broker",
            self.partitions.clone(),
        );
        r.register("kafka_server_replicamanager_leadercount", "Partitions led by this broker", self.leaders.clone());
        r.register(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here with a replica out of the in-sync set",
            self.under_replicated.clone(),
        );
        r.register(
            "kafka_server_replicamanager_offlinereplicacount",
            "Partitions with a replica here that know no leader",
            self.offline.clone(),
        );
        r.register(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the broker that is the metadata leader (the controller), else 0",
            self.active_controller.clone(),
        );
        r.register(
            "kafka_consumergroup_lag",
            "Records between a group's committed offset and the partition's high watermark (groups coordinated here, partitions with a replica here)",
            self.group_lag.clone(),
        );
        r.register(
            "runnel_raft_commit_lag_entries",
            "Entries appended but not yet committed, summed over the partitions led here",
            self.commit_lag.clone(),
        );
        r.register(
            "runnel_raft_leader_elections",
            "Times a replica on this broker became its Raft group's leader (a partition, or the metadata log)",
            self.elections.clone(),
        );
        r.register(
            "runnel_log_disk_reads",
            "Reads of a partition's log run on the blocking pool, as they might wait for the disk: a fetch behind the log's tail (Behind) or at the tail with pages no longer cached (Uncached), a ListOffsets by time (ByTime), a Raft leader's entries for a follower behind (Replicate)",
            self.disk_reads_by_reason.clone(),
        );
        r.register_with_unit(
            "runnel_log_flush",
            "Time each fsync (or syncfs) of the log took",
            Unit::Seconds,
            self.flush_time.clone(),
        );
        self
    }

    /// One API's handles; `name` gives Kafka's name for it (`Produce`, `Fetch`, ...), asked
    /// once per API.
    pub fn api(&self, key: i16, name: impl FnOnce() -> String) -> &ApiHandles {
        let slot = (key.max(0) as usize).min(API_KEYS - 1);
        self.apis[slot].get_or_init(|| {
            let name = name();
            let label = RequestLabel { request: name.clone() };
            ApiHandles {
                requests: self.requests.get_or_create(&label).clone(),
                time: self.request_time.get_or_create(&label).clone(),
                name,
            }
        })
    }

    /// Counts one error code in a response to `api` (`error`: Kafka's name for the code).
    pub fn error(&self, api: &ApiHandles, error: &str) {
        self.errors.get_or_create(&ErrorLabels { request: api.name.clone(), error: error.to_string() }).inc();
    }

    /// A client throttled for `time` under its `quota` (`producer_byte_rate`, ...).
    pub fn throttled(&self, quota: &str, time: Duration) {
        if !time.is_zero() {
            self.throttle_time.get_or_create(&QuotaLabel { quota: quota.to_string() }).inc_by(time.as_secs_f64());
        }
    }

    /// One topic's handles.
    pub fn topic(&self, topic: &str) -> Arc<TopicHandles> {
        if let Some(h) = self.topics.read_or_stop().get(topic) {
            return h.clone();
        }
        let label = TopicLabel { topic: topic.to_string() };
        let handles = Arc::new(TopicHandles {
            bytes_in: self.bytes_in.get_or_create(&label).clone(),
            messages_in: self.messages_in.get_or_create(&label).clone(),
            bytes_out: self.bytes_out.get_or_create(&label).clone(),
            produce_requests: self.produce_requests.get_or_create(&label).clone(),
            failed_produce_requests: self.failed_produce_requests.get_or_create(&label).clone(),
            fetch_requests: self.fetch_requests.get_or_create(&label).clone(),
            failed_fetch_requests: self.failed_fetch_requests.get_or_create(&label).clone(),
        });
        self.topics.write_or_stop().entry(topic.to_string()).or_insert(handles).clone()
    }

    /// Drops a deleted topic's series.
    pub fn forget_topic(&self, topic: &str) {
        self.topics.write_or_stop().remove(topic);
        let label = TopicLabel { topic: topic.to_string() };
        for f in [
            &self.bytes_in,
            &self.messages_in,
            &self.bytes_out,
            &self.produce_requests,
            &self.failed_produce_requests,
            &self.fetch_requests,
            &self.failed_fetch_requests,
        ] {
            f.remove(&label);
        }
    }

    /// A client connection on `listener`, counted while the guard lives.
    pub fn connection(&self, listener: &str) -> Held {
        let g = self.connections.get_or_create(&ListenerLabel { listener: listener.to_string() }).clone();
        g.inc();
        Held(g)
    }

    /// A produce waiting for its commit, or a fetch for data, while the guard lives.
    pub fn delayed(&self, operation: Delayed) -> Held {
        let g = &self.delayed[operation as usize];
        g.inc();
        Held(g.clone())
    }

    /// A read of a partition's log sent to the blocking pool, and why.
    pub fn disk_read(&self, why: DiskRead) {
        self.disk_reads[why as usize].inc();
    }

    /// Registers a hook run before each scrape, to set the gauges it owns.
    pub fn on_scrape(&self, hook: impl Fn(&Metrics) + Send + Sync + 'static) {
        self.hooks.lock_or_stop().push(Arc::new(hook));
    }

    /// The text `/metrics` serves: the hooks run first (none under a lock of this registry).
    pub fn render(&self) -> String {
        let hooks: Vec<Hook> = self.hooks.lock_or_stop().clone();
        for hook in hooks {
            hook(self);
        }
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_under_kafka_names() {
        let m = Metrics::new();
        let t = m.topic("orders");
        t.bytes_in.inc_by(512);
        t.messages_in.inc_by(4);
        let api = m.api(0, || "Produce".into());
        api.requests.inc();
        api.time.observe(0.002);
        m.error(api, "NOT_LEADER_OR_FOLLOWER");
        m.partitions.set(3);
        let conn = m.connection("PLAINTEXT");
        let text = m.render();
        assert!(text.contains("kafka_server_brokertopicmetrics_bytesin_total{topic=\"orders\"} 512"), "{text}");
        assert!(text.contains("kafka_server_brokertopicmetrics_messagesin_total{topic=\"orders\"} 4"), "{text}");
        assert!(text.contains("kafka_network_requestmetrics_requests_total{request=\"Produce\"} 1"), "{text}");
        assert!(text.contains("kafka_network_requestmetrics_totaltime_seconds_count{request=\"Produce\"} 1"), "{text}");
        assert!(
            text.contains(
                "kafka_network_requestmetrics_errors_total{request=\"Produce\",error=\"NOT_LEADER_OR_FOLLOWER\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("kafka_server_replicamanager_partitioncount 3"), "{text}");
        assert!(text.contains("kafka_server_socketservermetrics_connection_count{listener=\"PLAINTEXT\"} 1"), "{text}");
        drop(conn);
        assert!(m.render().contains("kafka_server_socketservermetrics_connection_count{listener=\"PLAINTEXT\"} 0"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_deleted_topic_leaves_no_series_and_hooks_run_per_scrape() {
        let m = Metrics::new();
        m.topic("gone").bytes_out.inc_by(7);
        assert!(m.render().contains("topic=\"gone\""));
        m.forget_topic("gone");
        assert!(!m.render().contains("topic=\"gone\""));
        let runs = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let seen = runs.clone();
        m.on_scrape(move |m| {
            m.leaders.set(seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1);
        });
        m.render();
        assert!(m.render().contains("kafka_server_replicamanager_leadercount 2"));
    }
}
