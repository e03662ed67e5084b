//! Broker configuration, in Kafka's own names so an operator's `server.properties`
//! knowledge carries over: a `.properties` file for `runnel serve`, `--set key=value`
//! overrides for `runnel dev`. Every setting the broker reads is listed in [`SETTINGS`]
//! with its type and default; anything else is refused at start-up rather than ignored.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};

pub use crate::kind::{check_value, Kind};

/// (name, kind, default). Limits are named with their unit last, as everywhere here.
pub const SETTINGS: &[(&str, Kind, &str)] = &[
    ("node.id", Kind::Int, "1"),
    // NAME://host:port,...: each listener's name maps to its security protocol through
    // listener.security.protocol.map (the names PLAINTEXT and SSL map to themselves).
    ("listeners", Kind::List, "PLAINTEXT://127.0.0.1:9092"),
    ("advertised.listeners", Kind::List, ""),
    // http://host:port,...: the admin listener (Prometheus /metrics); none by default.
    ("admin.listeners", Kind::List, ""),
    // none, or basic: the admin API asks for a user and password that the SCRAM
    // credentials verify, and authorizes it on the cluster (docs/admin.md).
    ("admin.authentication", Kind::Str, "none"),
    (
        "listener.security.protocol.map",
        Kind::List,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    ),
    // The internal listener (Raft and controller traffic between brokers, at the addresses
    // of controller.quorum.voters) goes by this name: mapped to SSL in
    // listener.security.protocol.map, it is mutual TLS both ways; unmapped, PLAINTEXT.
    ("controller.listener.names", Kind::List, "CONTROLLER"),
    // Accepted for Kafka's server.properties: all traffic between brokers goes over the
    // controller listener.
    ("inter.broker.listener.name", Kind::Str, ""),
    // TLS on SSL listeners, in Kafka's names; each may be given for one listener as
    // listener.name.<name>.ssl.<setting> (see docs/security.md).
    ("ssl.keystore.type", Kind::Str, "JKS"),
    ("ssl.keystore.location", Kind::Str, ""),
    ("ssl.keystore.password", Kind::Password, ""),
    ("ssl.key.password", Kind::Password, ""),
    ("ssl.keystore.key", Kind::Password, ""),
    ("ssl.keystore.certificate.chain", Kind::Password, ""),
    ("ssl.truststore.type", Kind::Str, "JKS"),
    ("ssl.truststore.location", Kind::Str, ""),
    ("ssl.truststore.password", Kind::Password, ""),
    ("ssl.truststore.certificates", Kind::Password, ""),
    ("ssl.client.auth", Kind::Str, "none"),
    ("ssl.enabled.protocols", Kind::List, "TLSv1.2,TLSv1.3"),
    ("ssl.cipher.suites", Kind::List, ""),
    ("ssl.endpoint.identification.algorithm", Kind::Str, "https"),
    // A TLS client certificate's subject (RFC 2253) to its principal name: DEFAULT, or
    // RULE:pattern/replacement/[LU] rules, the first that matches deciding.
    ("ssl.principal.mapping.rules", Kind::Str, "DEFAULT"),
    // Accepted for Kafka's server.properties; rustls has one implementation of each.
    ("ssl.protocol", Kind::Str, "TLSv1.3"),
    ("ssl.keymanager.algorithm", Kind::Str, "SunX509"),
    ("ssl.trustmanager.algorithm", Kind::Str, "PKIX"),
    // SASL on SASL_PLAINTEXT and SASL_SSL listeners (PLAIN so far); the users of PLAIN come
    // from listener.name.<name>.plain.sasl.jaas.config (see docs/security.md).
    ("sasl.enabled.mechanisms", Kind::List, "GSSAPI"),
    ("sasl.jaas.config", Kind::Password, ""),
    ("sasl.server.max.receive.size", Kind::Int, "524288"),
    // KIP-368: a SASL login lasts this long (0: for the connection's life); the client
    // logs in again on the same connection before it ends.
    ("connections.max.reauth.ms", Kind::Long, "0"),
    // OAUTHBEARER: tokens are JWTs checked as Kafka's OAuthBearerValidatorCallbackHandler
    // checks them, against the keys of a JWKS file (file:///path).
    ("sasl.oauthbearer.jwks.endpoint.url", Kind::Str, ""),
    ("sasl.oauthbearer.expected.issuer", Kind::Str, ""),
    ("sasl.oauthbearer.expected.audience", Kind::List, ""),
    ("sasl.oauthbearer.sub.claim.name", Kind::Str, "sub"),
    ("sasl.oauthbearer.clock.skew.seconds", Kind::Int, "30"),
    // An https:// JWKS is fetched again this often, and after a failure with this backoff.
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", Kind::Long, "3600000"),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", Kind::Long, "100"),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", Kind::Long, "10000"),
    // Accepted for Kafka's server.properties (listener.name.<l>.oauthbearer.sasl.server.
    // callback.handler.class=...OAuthBearerValidatorCallbackHandler): Runnel always validates.
    ("sasl.server.callback.handler.class", Kind::Str, ""),
    // ACLs (docs/security.md): set to org.apache.kafka.metadata.authorizer.StandardAuthorizer
    // to enforce them; super.users is a ;-separated list of principals that pass every check.
    ("authorizer.class.name", Kind::Str, ""),
    ("super.users", Kind::Str, ""),
    ("allow.everyone.if.no.acl.found", Kind::Bool, "false"),
    // Client quotas (set with AlterClientQuotas) are measured over quota.window.num
    // samples of quota.window.size.seconds, as in Kafka.
    ("quota.window.num", Kind::Int, "11"),
    ("quota.window.size.seconds", Kind::Int, "1"),
    // Runnel: how often a TLS listener looks for changed key and trust store files (new
    // connections get the new certificate; 0: never).
    ("ssl.reload.check.interval.ms", Kind::Long, "10000"),
    // The metadata quorum's voters, `id@host:port` (Raft traffic between brokers goes to
    // these addresses). Empty: a cluster of one, this broker the only voter.
    ("controller.quorum.voters", Kind::List, ""),
    // The most partition replicas the controller places on one broker (KIP-578's name):
    // CreateTopics and CreatePartitions past it are refused with INVALID_PARTITIONS.
    ("max.broker.partitions", Kind::Int, "100000"),
    // A follower not caught up with its leader for this long, or not heard from for twice
    // the election timeout, is out of the partition's in-sync replicas (Metadata's ISR;
    // under Raft it decides nothing: a majority of the replicas commits).
    ("replica.lag.time.max.ms", Kind::Long, "30000"),
    // Failure domains, outermost first: region=us-east1,zone=us-east1-b,rack=r7.
    ("broker.location", Kind::Str, ""),
    ("log.dirs", Kind::Str, "./data"),
    ("num.partitions", Kind::Int, "1"),
    ("default.replication.factor", Kind::Int, "1"),
    ("auto.create.topics.enable", Kind::Bool, "true"),
    // Cluster mode: leaders hand partitions back to their preferred leaders (the first
    // replica) every interval. Kafka checks every 300 s; a Raft transfer is cheap.
    ("auto.leader.rebalance.enable", Kind::Bool, "true"),
    // The default of the topic config leader.preference: failure domains where leaders
    // should be, in order (region:us-east1,region:us-west1), or none.
    ("leader.preference", Kind::List, "none"),
    // Cluster mode: refuse (false) or allow a topic whose placement puts a majority of a
    // partition's replicas in one failure domain; a topic config overrides it.
    ("placement.unsafe.allow", Kind::Bool, "false"),
    ("leader.imbalance.check.interval.seconds", Kind::Long, "30"),
    // Cluster mode: on SIGTERM a broker first moves its leaderships to other replicas
    // (Kafka's controlled shutdown), for at most the timeout (a Runnel setting).
    ("controlled.shutdown.enable", Kind::Bool, "true"),
    ("controlled.shutdown.timeout.ms", Kind::Long, "30000"),
    // Cluster mode: each broker tells the controller it is alive every interval; one not
    // heard from for the session timeout is fenced (left out of Metadata, no new replicas).
    ("broker.heartbeat.interval.ms", Kind::Int, "2000"),
    ("broker.session.timeout.ms", Kind::Int, "9000"),
    ("delete.topic.enable", Kind::Bool, "true"),
    ("log.segment.bytes", Kind::Int, "1073741824"),
    ("log.roll.ms", Kind::Long, "604800000"),
    ("log.retention.ms", Kind::Long, "604800000"),
    // Kafka's coarser synonyms: when set (and the .ms form is not), they define it.
    ("log.retention.hours", Kind::Int, "168"),
    ("log.roll.hours", Kind::Int, "168"),
    ("log.retention.bytes", Kind::Long, "-1"),
    ("log.retention.check.interval.ms", Kind::Long, "300000"),
    ("log.index.interval.bytes", Kind::Int, "4096"),
    ("log.cleanup.policy", Kind::List, "delete"),
    // Compaction (cleanup.policy=compact): the cleaner and its topic-level defaults.
    ("log.cleaner.enable", Kind::Bool, "true"),
    ("log.cleaner.backoff.ms", Kind::Long, "15000"),
    ("log.cleaner.min.cleanable.ratio", Kind::Double, "0.5"),
    ("log.cleaner.delete.retention.ms", Kind::Long, "86400000"),
    ("log.cleaner.min.compaction.lag.ms", Kind::Long, "0"),
    ("log.cleaner.max.compaction.lag.ms", Kind::Long, "9223372036854775807"),
    ("log.message.timestamp.type", Kind::Str, "CreateTime"),
    ("compression.type", Kind::Str, "producer"),
    ("min.insync.replicas", Kind::Int, "1"),
    ("unclean.leader.election.enable", Kind::Bool, "false"),
    ("message.max.bytes", Kind::Int, "1048588"),
    ("log.message.timestamp.before.max.ms", Kind::Long, "9223372036854775807"),
    ("log.message.timestamp.after.max.ms", Kind::Long, "3600000"),
    ("compression.gzip.level", Kind::Int, "-1"),
    ("compression.lz4.level", Kind::Int, "9"),
    ("compression.zstd.level", Kind::Int, "3"),
    ("log.roll.jitter.ms", Kind::Long, "0"),
    // Accepted with no effect (docs/configs.md): Runnel's index, fsync and file handling
    // differ from Kafka's, and it has no tiered storage.
    ("log.index.size.max.bytes", Kind::Int, "10485760"),
    ("log.segment.delete.delay.ms", Kind::Long, "60000"),
    ("log.flush.interval.messages", Kind::Long, "9223372036854775807"),
    ("log.flush.interval.ms", Kind::Long, "9223372036854775807"),
    ("log.preallocate", Kind::Bool, "false"),
    ("log.local.retention.bytes", Kind::Long, "-2"),
    ("log.local.retention.ms", Kind::Long, "-2"),
    // Runnel's durability switch: `always` fsyncs before acks=all is answered and before
    // the high watermark moves (group commit); `never` leaves flushing to the OS, as
    // Kafka does by default.
    ("log.fsync.policy", Kind::Str, "always"),
    // How a group-commit round makes its writes durable: `filesystem` issues one syncfs
    // when the round touched two or more segment files (one journal commit instead of one
    // per file: +20% durable-512 throughput measured), `file` fdatasyncs each file. Prefer
    // `file` when the data directory shares its filesystem with busy unrelated writers.
    ("log.fsync.scope", Kind::Str, "filesystem"),
    // Bytes of the most recently written and synced log a broker leaves in the OS page
    // cache; older synced pages are dropped as new ones are synced, so the cache holds the
    // tail consumers and followers read and the broker's footprint stays bounded (on a VM
    // that hands free memory back to its host, new page cache costs about 8x the CPU per
    // byte: docs/bench.md). 0 leaves the page cache to the kernel, as Kafka does. Only with
    // log.fsync.policy=always: an unsynced page cannot be dropped.
    ("log.cache.tail.bytes", Kind::Long, "1073741824"),
    ("socket.request.max.bytes", Kind::Int, "104857600"),
    // Kernel socket buffers of client and broker-to-broker connections; -1 (the default
    // here; Kafka's is 102400) leaves Linux to size them from each connection's
    // bandwidth-delay product, as a link between regions needs.
    ("socket.send.buffer.bytes", Kind::Int, "-1"),
    ("socket.receive.buffer.bytes", Kind::Int, "-1"),
    ("max.connections", Kind::Int, "10000"),
    ("max.connections.per.ip", Kind::Int, "2147483647"),
    ("connections.max.idle.ms", Kind::Long, "600000"),
    // "host:count,host:count": per-address exceptions to max.connections.per.ip.
    ("max.connections.per.ip.overrides", Kind::Str, ""),
    ("queued.max.requests.per.connection", Kind::Int, "100"),
    // Bytes of request frames read and not yet answered, over all connections (Kafka's
    // default of -1, unbounded, is not Runnel's: see docs/limits.md).
    ("queued.max.request.bytes", Kind::Long, "536870912"),
    // The watchdog stops a broker whose runtime or Raft driver made no progress this long
    // (0: no watchdog).
    ("watchdog.timeout.ms", Kind::Long, "60000"),
    // How often freed memory is handed back to the system (glibc's malloc_trim; 0: never).
    ("memory.trim.interval.ms", Kind::Long, "30000"),
    ("max.incremental.fetch.session.cache.slots", Kind::Int, "1000"),
    ("fetch.max.wait.ms.max", Kind::Long, "30000"),
    ("fetch.max.bytes", Kind::Int, "57671680"),
    // The most partitions one DescribeTopicPartitions answer holds (KIP-966).
    ("max.request.partition.size.limit", Kind::Int, "2000"),
    ("offsets.topic.num.partitions", Kind::Int, "50"),
    // Cluster mode: replicas of each offsets-log partition (the topic is created on the
    // first FindCoordinator, once this many brokers are registered).
    ("offsets.topic.replication.factor", Kind::Int, "3"),
    // Cluster mode: how long a group write waits for its Raft commit.
    ("offsets.commit.timeout.ms", Kind::Int, "5000"),
    ("offset.metadata.max.bytes", Kind::Int, "4096"),
    ("offsets.topic.segment.bytes", Kind::Int, "104857600"),
    // Committed offsets of a group expire this long after it became empty (KIP-211).
    ("offsets.retention.minutes", Kind::Int, "10080"),
    ("offsets.retention.check.interval.ms", Kind::Long, "600000"),
    // Transactions: `__transaction_state` (created on the first FindCoordinator for a
    // transactional id, as the offsets topic is) and the coordinator's timers.
    ("transaction.state.log.num.partitions", Kind::Int, "50"),
    ("transaction.state.log.replication.factor", Kind::Int, "3"),
    ("transaction.state.log.segment.bytes", Kind::Int, "104857600"),
    ("transaction.max.timeout.ms", Kind::Int, "900000"),
    ("transactional.id.expiration.ms", Kind::Int, "604800000"),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", Kind::Int, "10000"),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", Kind::Int, "3600000"),
    // The level of the `transaction.version` feature the broker finalizes in ApiVersions
    // (Kafka sets it with `kafka-features.sh`): 2 lets Kafka 4 clients use transactions
    // version 2 (KIP-890 part 2); 0 or 1 keeps them on version 1. Every broker of a
    // cluster should have the same.
    ("transaction.version", Kind::Int, "2"),
    // Which replica a consumer with client.rack reads from (KIP-392): the nearest one by
    // broker.location (RackAwareReplicaSelector, the default here), or the leader only
    // (org.apache.kafka.common.replica.LeaderSelector, or empty: Kafka's default).
    ("replica.selector.class", Kind::Str, "org.apache.kafka.common.replica.RackAwareReplicaSelector"),
    // Transactions version 2: a partition leader adding a produce's partition to its
    // transaction retries CONCURRENT_TRANSACTIONS (the previous transaction still ending)
    // this often, for at most this long, before the producer is asked to retry.
    ("add.partitions.to.txn.retry.backoff.ms", Kind::Int, "20"),
    ("add.partitions.to.txn.retry.backoff.max.ms", Kind::Int, "100"),
    ("group.min.session.timeout.ms", Kind::Int, "6000"),
    ("group.max.session.timeout.ms", Kind::Int, "1800000"),
    // Kafka waits this long for more members before the first rebalance of an empty group.
    ("group.initial.rebalance.delay.ms", Kind::Int, "3000"),
    ("group.consumer.session.timeout.ms", Kind::Int, "45000"),
    ("group.consumer.heartbeat.interval.ms", Kind::Int, "5000"),
    ("group.consumer.assignors", Kind::List, "uniform,range"),
    // Members per group: a new member past the bound gets GROUP_MAX_SIZE_REACHED.
    ("group.max.size", Kind::Int, "2147483647"),
    ("group.consumer.max.size", Kind::Int, "2147483647"),
    // Fault hook (benchmarks, `runnel chaos`): every fsync round first sleeps this long.
    ("fault.disk.sync.delay.ms", Kind::Int, "0"),
    ("fault.disk.sync.fail", Kind::Bool, "false"),
    ("fault.disk.full", Kind::Bool, "false"),
    ("fault.clock.offset.ms", Kind::Long, "0"),
];

/// A setting's kind and default: Runnel's own, else Kafka's (taken with no effect).
pub fn setting(name: &str) -> Option<(Kind, &'static str)> {
    SETTINGS.iter().chain(crate::kafka_settings::KAFKA_SETTINGS).find(|(n, _, _)| *n == name).map(|(_, k, d)| (*k, *d))
}

/// Settings given explicitly (file or --set), over the defaults in [`SETTINGS`].
#[derive(Debug, Clone, Default)]
pub struct Settings {
    explicit: BTreeMap<String, String>,
    /// Explicit entries that were computed from a synonym (`log.retention.hours`).
    derived: std::collections::BTreeSet<String>,
    /// Changed at run time through IncrementalAlterConfigs; persisted in the metadata.
    dynamic: BTreeMap<String, String>,
    /// Cluster-wide dynamic configs (`--entity-default`), from the metadata log: below this
    /// broker's own dynamic configs, above its static ones, as in Kafka.
    cluster: BTreeMap<String, String>,
}

/// Broker settings that can be changed while running (the rest need a restart).
/// The TLS store settings a listener takes while it runs, as
/// `listener.name.<listener>.<setting>` (Kafka's dynamic keystore and truststore update).
pub const DYNAMIC_LISTENER_SSL: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
];

/// (listener name in lower case, setting) of a dynamic `listener.name.<l>.ssl.*` setting.
pub fn dynamic_listener_ssl(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("listener.name.")?;
    let (listener, key) = rest.split_once('.')?;
    DYNAMIC_LISTENER_SSL.contains(&key).then_some((listener, key))
}

pub const DYNAMIC_SETTINGS: &[&str] = &[
    "fault.disk.sync.delay.ms",
    "fault.disk.sync.fail",
    "fault.disk.full",
    "fault.clock.offset.ms",
    "auto.create.topics.enable",
    "log.retention.ms",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.roll.ms",
    "log.cleanup.policy",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
    "log.message.timestamp.type",
    "message.max.bytes",
    "num.partitions",
    "min.insync.replicas",
    "compression.type",
    "log.index.interval.bytes",
    "unclean.leader.election.enable",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "log.roll.jitter.ms",
    "log.index.size.max.bytes",
    "log.segment.delete.delay.ms",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "log.preallocate",
    "log.local.retention.bytes",
    "log.local.retention.ms",
];

impl Settings {
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let declared = listener_scoped(name).unwrap_or(name);
        let (kind, _) = setting(declared).ok_or_else(|| anyhow!("unknown setting {name}"))?;
        check_value(kind, value).with_context(|| format!("setting {name}={value}"))?;
        self.explicit.insert(name.to_string(), value.to_string());
        self.derived.remove(name);
        // A coarser setting defines the .ms one unless that was given itself, as Kafka ranks
        // them: ms over minutes over hours.
        let (ms, unit_ms, finer) = match name {
            "log.retention.hours" => ("log.retention.ms", 3_600_000, Some("log.retention.minutes")),
            "log.retention.minutes" => ("log.retention.ms", 60_000, None),
            "log.roll.hours" => ("log.roll.ms", 3_600_000, None),
            "log.roll.jitter.hours" => ("log.roll.jitter.ms", 3_600_000, None),
            _ => return Ok(()),
        };
        let finer_given = finer.is_some_and(|f| self.explicit.contains_key(f));
        if (!self.explicit.contains_key(ms) || self.derived.contains(ms)) && !finer_given {
            let n: i64 = value.parse().unwrap_or(0);
            self.explicit.insert(ms.to_string(), n.saturating_mul(unit_ms).to_string());
            self.derived.insert(ms.to_string());
        }
        Ok(())
    }

    /// Parses a Kafka-style `.properties` file: `key=value` lines, `#` comments.
    pub fn from_properties(text: &str) -> Result<Settings> {
        let mut s = Settings::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .or_else(|| line.split_once(':'))
                .ok_or_else(|| anyhow!("line {}: expected key=value", n + 1))?;
            s.set(k.trim(), v.trim()).with_context(|| format!("line {}", n + 1))?;
        }
        Ok(s)
    }

    /// Every setting given (file, --set, dynamic, cluster-wide), with its value.
    pub fn given(&self) -> impl Iterator<Item = (&str, &str)> {
        self.explicit.iter().chain(&self.dynamic).chain(&self.cluster).map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_explicit(&self, name: &str) -> bool {
        self.explicit.contains_key(name)
    }

    pub fn is_dynamic(&self, name: &str) -> bool {
        self.dynamic.contains_key(name)
    }

    pub fn is_cluster_default(&self, name: &str) -> bool {
        !self.dynamic.contains_key(name) && self.cluster.contains_key(name)
    }

    /// Replaces the cluster-wide dynamic layer (validated by the broker that took it).
    pub fn set_cluster_defaults(&mut self, cluster: BTreeMap<String, String>) {
        self.cluster = cluster;
    }

    pub fn dynamic(&self) -> &BTreeMap<String, String> {
        &self.dynamic
    }

    /// Replaces the dynamic layer (already validated by the caller).
    pub fn set_dynamic(&mut self, dynamic: BTreeMap<String, String>) {
        self.dynamic = dynamic;
    }

    /// A setting as one listener sees it: `listener.name.<listener>.<name>` (the listener
    /// name in lower case, as Kafka writes it) when given, else `name`.
    pub fn for_listener(&self, listener: &str, name: &str) -> &str {
        match self.scoped(listener, name) {
            Some(v) => v,
            None => self.get(name),
        }
    }

    /// `listener.name.<listener>.<name>` when given.
    pub fn scoped(&self, listener: &str, name: &str) -> Option<&str> {
        let scoped = format!("listener.name.{}.{name}", listener.to_ascii_lowercase());
        self.dynamic.get(&scoped).or_else(|| self.explicit.get(&scoped)).map(String::as_str)
    }

    pub fn get(&self, name: &str) -> &str {
        if let Some(v) = self.dynamic.get(name).or_else(|| self.cluster.get(name)) {
            return v;
        }
        match self.explicit.get(name) {
            Some(v) => v,
            None => setting(name).map(|(_, d)| d).unwrap_or_else(|| panic!("setting {name} is not declared")),
        }
    }

    pub fn i64(&self, name: &str) -> i64 {
        self.get(name).parse().unwrap_or_else(|_| panic!("setting {name} was checked at set time"))
    }

    pub fn bool(&self, name: &str) -> bool {
        self.get(name) == "true"
    }

    pub fn usize(&self, name: &str) -> usize {
        self.i64(name).max(0) as usize
    }
}

/// The internal (Raft and controller) listener's name and protocol.
#[derive(Debug, Clone)]
pub struct InternalListener {
    pub name: String,
    pub protocol: SecurityProtocol,
}

/// Kafka's names for what Runnel names otherwise, from a `server.properties` written for
/// Kafka: `broker.id` is `node.id` (they must agree when both are given), `log.dir` is the
/// data directory when `log.dirs` is not given, and `broker.rack` is the location
/// `rack=...` when `broker.location` is not given.
fn kafka_synonyms(s: &mut Settings) -> Result<()> {
    let broker_id = s.i64("broker.id");
    if broker_id >= 0 {
        if s.is_explicit("node.id") && s.i64("node.id") != broker_id {
            bail!("broker.id {broker_id} and node.id {} name the same broker and must agree", s.get("node.id"));
        }
        s.set("node.id", &broker_id.to_string())?;
    }
    if s.is_explicit("log.dir") && !s.is_explicit("log.dirs") {
        let dir = s.get("log.dir").to_string();
        s.set("log.dirs", &dir)?;
    }
    let rack = s.get("broker.rack").trim().to_string();
    if !rack.is_empty() && s.get("broker.location").is_empty() {
        s.set("broker.location", &format!("rack={rack}"))?;
    }
    Ok(())
}

/// What the server needs, derived once from [`Settings`].
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// The client listeners; the first is the one other brokers' records name first.
    pub listeners: Vec<Listener>,
    /// The `listeners` entry of the internal listener, if any.
    pub raft_listener: Option<RaftListener>,
    pub internal: InternalListener,
    pub data_dir: PathBuf,
    pub settings: Settings,
}

/// `listener.name.<listener>.<setting>` → the setting, for the settings that may be given
/// per listener (TLS and SASL ones; `<mechanism>.sasl.jaas.config` is `sasl.jaas.config`,
/// and so on for the other mechanism-scoped SASL settings).
fn listener_scoped(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("listener.name.")?;
    let (_, setting) = rest.split_once('.')?;
    let unscoped = ["plain.", "scram-sha-256.", "scram-sha-512.", "oauthbearer."]
        .iter()
        .find_map(|m| setting.strip_prefix(m))
        .unwrap_or(setting);
    (unscoped.starts_with("ssl.") || unscoped.starts_with("sasl.")).then_some(unscoped)
}

/// A listener's security protocol (`listener.security.protocol.map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// One client listener: `listeners` and `advertised.listeners` entries of one name.
#[derive(Debug, Clone)]
pub struct Listener {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub listen: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
}

/// `NAME://host:port` → (name, host, port); the host may be empty (all interfaces) or a
/// bracketed IPv6 address.
fn parse_listener(s: &str) -> Result<(String, String, u16)> {
    let s = s.trim();
    let (name, hostport) = s.split_once("://").ok_or_else(|| anyhow!("listener {s}: expected NAME://host:port"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        bail!("listener {s}: bad listener name '{name}'");
    }
    let (host, port) = hostport.rsplit_once(':').ok_or_else(|| anyhow!("listener {s}: expected host:port"))?;
    let port: u16 = port.parse().with_context(|| format!("listener {s}: bad port"))?;
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    Ok((name.to_ascii_uppercase(), host.trim_matches(['[', ']']).to_string(), port))
}

fn entries(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// `listeners`, `advertised.listeners` and `listener.security.protocol.map`, checked as
/// Kafka checks them: names unique, each mapped to a protocol, advertised names a subset.
fn protocol_map(settings: &Settings) -> Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    for e in entries(settings.get("listener.security.protocol.map")) {
        let (name, proto) =
            e.split_once(':').ok_or_else(|| anyhow!("listener.security.protocol.map: '{e}' is not NAME:PROTOCOL"))?;
        map.insert(name.trim().to_ascii_uppercase(), proto.trim().to_ascii_uppercase());
    }
    Ok(map)
}

/// `controller.listener.names` (the first name) and its protocol.
fn parse_internal(settings: &Settings) -> Result<InternalListener> {
    let name = entries(settings.get("controller.listener.names")).next().unwrap_or("CONTROLLER").to_ascii_uppercase();
    let protocol = match protocol_map(settings)?.get(&name).map(String::as_str) {
        None | Some("PLAINTEXT") => SecurityProtocol::Plaintext,
        Some("SSL") => SecurityProtocol::Ssl,
        Some(p) => bail!("controller listener {name}: {p} is not supported (PLAINTEXT or SSL)"),
    };
    Ok(InternalListener { name, protocol })
}

/// This broker's own address for Raft and controller traffic, from the `listeners` entry
/// named by `controller.listener.names` (and its `advertised.listeners` entry, if any).
/// A voter listens at its `controller.quorum.voters` address; a broker that is not a voter
/// (a metadata observer) listens here, and registers the advertised address so that its
/// peers can reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftListener {
    pub listen: String,
    pub advertised: String,
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The client listeners, and the internal one when `listeners` names it.
fn parse_listeners(settings: &Settings, internal: &str) -> Result<(Vec<Listener>, Option<RaftListener>)> {
    let map = protocol_map(settings)?;
    let mut listeners: Vec<Listener> = Vec::new();
    let mut raft: Option<RaftListener> = None;
    for e in entries(settings.get("listeners")) {
        let (name, host, port) = parse_listener(e)?;
        if listeners.iter().any(|l| l.name == name) || (name == internal && raft.is_some()) {
            bail!("listeners: the name {name} is used twice");
        }
        if name == internal {
            let advertised = if host == "0.0.0.0" || host == "::" { "127.0.0.1" } else { host.as_str() };
            raft = Some(RaftListener { listen: host_port(&host, port), advertised: host_port(advertised, port) });
            continue;
        }
        let protocol = match map.get(&name).map(String::as_str) {
            Some("PLAINTEXT") => SecurityProtocol::Plaintext,
            Some("SSL") => SecurityProtocol::Ssl,
            Some("SASL_PLAINTEXT") => SecurityProtocol::SaslPlaintext,
            Some("SASL_SSL") => SecurityProtocol::SaslSsl,
            Some(p) => bail!("listener.security.protocol.map: {name} maps to unknown protocol {p}"),
            None => bail!("listener {name}: not in listener.security.protocol.map"),
        };
        let listen: SocketAddr = format!("{host}:{port}")
            .parse()
            .or_else(|_| format!("[{host}]:{port}").parse())
            .with_context(|| format!("listener address {host}:{port}"))?;
        if listeners.iter().any(|l| l.listen.port() == port && port != 0) {
            bail!("listeners: port {port} is used twice");
        }
        let advertised_host =
            if listen.ip().is_unspecified() { "127.0.0.1".to_string() } else { listen.ip().to_string() };
        listeners.push(Listener { name, protocol, listen, advertised_host, advertised_port: port });
    }
    if listeners.is_empty() {
        bail!("listeners: no listener");
    }
    for e in entries(settings.get("advertised.listeners")) {
        let (name, host, port) = parse_listener(e)?;
        if name == internal {
            let r = raft.as_mut().ok_or_else(|| anyhow!("advertised.listeners: {name} is not one of the listeners"))?;
            r.advertised = host_port(&host, port);
            continue;
        }
        let l = listeners
            .iter_mut()
            .find(|l| l.name == name)
            .ok_or_else(|| anyhow!("advertised.listeners: {name} is not one of the listeners"))?;
        (l.advertised_host, l.advertised_port) = (host, port);
    }
    Ok((listeners, raft))
}

impl BrokerConfig {
    /// `socket.send.buffer.bytes` and `socket.receive.buffer.bytes`.
    pub fn socket_buffers(&self) -> runnel_raft::SocketBuffers {
        let size = |name| self.settings.i64(name).clamp(-1, i32::MAX as i64) as i32;
        runnel_raft::SocketBuffers {
            send: size("socket.send.buffer.bytes"),
            receive: size("socket.receive.buffer.bytes"),
        }
    }

    pub fn from_settings(mut settings: Settings) -> Result<BrokerConfig> {
        kafka_synonyms(&mut settings)?;
        for (name, allowed) in [
            ("log.fsync.policy", &["always", "never"][..]),
            ("log.fsync.scope", &["filesystem", "file"]),
            ("replica.selector.class", &[crate::replica_selector::RACK_AWARE, crate::replica_selector::LEADER, ""]),
        ] {
            let v = settings.get(name);
            if !allowed.contains(&v) {
                bail!("setting {name}={v}: expected one of {}", allowed.join(", "));
            }
        }
        runnel_controller::leader_preference::parse(settings.get("leader.preference"))
            .map_err(|e| anyhow!("setting leader.preference: {e}"))?;
        let internal = parse_internal(&settings)?;
        let (listeners, raft_listener) = parse_listeners(&settings, &internal.name)?;
        Ok(BrokerConfig {
            node_id: settings.i64("node.id") as i32,
            listeners,
            raft_listener,
            internal,
            data_dir: PathBuf::from(settings.get("log.dirs").split(',').next().unwrap_or("./data")),
            settings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_settings_take_only_known_values() {
        for (k, v) in [("log.fsync.policy", "sometimes"), ("log.fsync.scope", "disk")] {
            let mut s = Settings::default();
            s.set(k, v).expect("a string setting");
            assert!(BrokerConfig::from_settings(s).is_err(), "{k}={v} is refused");
        }
        let mut s = Settings::default();
        s.set("log.fsync.scope", "file").expect("set");
        assert!(BrokerConfig::from_settings(s).is_ok());
    }

    #[test]
    fn properties_files_and_listeners() {
        let s = Settings::from_properties(
            "# comment\nnode.id=3\nlisteners=PLAINTEXT://0.0.0.0:19092\nadvertised.listeners=PLAINTEXT://kafka-1:19092\nlog.dirs=/var/lib/runnel\n",
        )
        .expect("parses");
        let c = BrokerConfig::from_settings(s).expect("valid");
        assert_eq!(c.node_id, 3);
        assert_eq!(c.listeners[0].listen.port(), 19092);
        assert_eq!((c.listeners[0].advertised_host.as_str(), c.listeners[0].advertised_port), ("kafka-1", 19092));
        assert!(Settings::from_properties("no.such.thing=1").is_err());
        let s = Settings::from_properties("log.retention.hours=2\n").expect("parses");
        assert_eq!(s.i64("log.retention.ms"), 7_200_000);
        let s = Settings::from_properties("log.retention.ms=5\nlog.retention.hours=2\n").expect("parses");
        assert_eq!(s.i64("log.retention.ms"), 5, "ms wins over hours");
        assert!(Settings::from_properties("num.partitions=abc").is_err());
    }

    #[test]
    fn several_listeners_with_their_protocols_and_per_listener_tls_settings() {
        let s = Settings::from_properties(
            "listeners=PLAINTEXT://127.0.0.1:9092,SSL://:9093,CLIENT://[::1]:9094\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CLIENT:SSL\n\
             advertised.listeners=SSL://kafka-1.example:19093\n\
             ssl.keystore.location=/etc/a.p12\n\
             listener.name.client.ssl.keystore.location=/etc/b.p12\n",
        )
        .expect("parses");
        assert_eq!(s.for_listener("SSL", "ssl.keystore.location"), "/etc/a.p12");
        assert_eq!(s.for_listener("CLIENT", "ssl.keystore.location"), "/etc/b.p12");
        let c = BrokerConfig::from_settings(s).expect("valid");
        let l: Vec<_> = c
            .listeners
            .iter()
            .map(|l| (l.name.as_str(), l.protocol, l.listen.to_string(), l.advertised_host.as_str(), l.advertised_port))
            .collect();
        assert_eq!(
            l,
            vec![
                ("PLAINTEXT", SecurityProtocol::Plaintext, "127.0.0.1:9092".into(), "127.0.0.1", 9092),
                ("SSL", SecurityProtocol::Ssl, "0.0.0.0:9093".into(), "kafka-1.example", 19093),
                ("CLIENT", SecurityProtocol::Ssl, "[::1]:9094".into(), "::1", 9094),
            ]
        );
        for bad in [
            "listeners=PLAINTEXT://:1,PLAINTEXT://:2",
            "listeners=PLAINTEXT://:1,SSL://:1",
            "listeners=OTHER://:1",
            "listeners=X://:1\nlistener.security.protocol.map=X:KERBEROS",
            "listeners=127.0.0.1:9092",
            "listeners=PLAINTEXT://:1\nadvertised.listeners=SSL://h:1",
        ] {
            let s = Settings::from_properties(bad).expect("parses");
            assert!(BrokerConfig::from_settings(s).is_err(), "{bad} is refused");
        }
        assert!(Settings::from_properties("listener.name.ssl.no.such=1").is_err());
    }

    /// The internal listener's `listeners` entry is this broker's Raft address (an
    /// observer's), not a client listener; `advertised.listeners` may name it too.
    #[test]
    fn the_controller_listener_is_the_raft_address() {
        let config = |props: &str| BrokerConfig::from_settings(Settings::from_properties(props).expect("parses"));
        let c = config(
            "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://:10092
",
        )
        .expect("valid");
        assert_eq!(c.listeners.len(), 1);
        let own = c.raft_listener.expect("a Raft listener");
        assert_eq!((own.listen.as_str(), own.advertised.as_str()), ("0.0.0.0:10092", "127.0.0.1:10092"));
        let c = config(
            "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://[::1]:10092
             advertised.listeners=CONTROLLER://broker-4.example:10092
",
        )
        .expect("valid");
        let own = c.raft_listener.expect("a Raft listener");
        assert_eq!((own.listen.as_str(), own.advertised.as_str()), ("[::1]:10092", "broker-4.example:10092"));
        assert!(config(
            "listeners=PLAINTEXT://127.0.0.1:9092
"
        )
        .expect("valid")
        .raft_listener
        .is_none());
        for bad in [
            "listeners=CONTROLLER://:10092",
            "listeners=PLAINTEXT://:1,CONTROLLER://:2,CONTROLLER://:3",
            "listeners=PLAINTEXT://:1\nadvertised.listeners=CONTROLLER://h:2",
        ] {
            assert!(config(bad).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn a_broker_setting_ranks_dynamic_then_cluster_wide_then_static_then_default() {
        let name = "log.retention.ms";
        let mut s = Settings::default();
        assert_eq!(s.get(name), "604800000");
        s.set(name, "1").expect("static");
        assert_eq!(s.get(name), "1");
        s.set_cluster_defaults(BTreeMap::from([(name.to_string(), "2".to_string())]));
        assert_eq!((s.get(name), s.is_cluster_default(name)), ("2", true));
        s.set_dynamic(BTreeMap::from([(name.to_string(), "3".to_string())]));
        assert_eq!((s.get(name), s.is_cluster_default(name)), ("3", false));
    }

    #[test]
    fn retention_ms_over_minutes_over_hours_in_any_order() {
        for order in [
            ["log.retention.hours=2", "log.retention.minutes=30"],
            ["log.retention.minutes=30", "log.retention.hours=2"],
        ] {
            let mut s = Settings::default();
            for kv in order {
                let (k, v) = kv.split_once('=').expect("k=v");
                s.set(k, v).expect("set");
            }
            assert_eq!(s.get("log.retention.ms"), "1800000", "{order:?}");
            s.set("log.retention.ms", "5").expect("set");
            s.set("log.retention.hours", "9").expect("set");
            assert_eq!(s.get("log.retention.ms"), "5");
        }
    }

    #[test]
    fn kafka_names_for_runnel_settings() {
        let mut s = Settings::default();
        for (k, v) in [("broker.id", "7"), ("log.dir", "/var/kafka"), ("broker.rack", "r1"), ("num.io.threads", "8")] {
            s.set(k, v).expect("a Kafka setting is taken");
        }
        let c = BrokerConfig::from_settings(s).expect("config");
        assert_eq!((c.node_id, c.data_dir.to_str()), (7, Some("/var/kafka")));
        assert_eq!(c.settings.get("broker.location"), "rack=r1");
        let mut s = Settings::default();
        s.set("broker.id", "7").expect("set");
        s.set("node.id", "8").expect("set");
        assert!(BrokerConfig::from_settings(s).is_err(), "broker.id and node.id disagree");
        assert!(Settings::default().set("num.io.thread", "8").is_err(), "a typo is refused");
    }
}
