//! The broker's view of the topics (applied from the metadata log by `replica_manager`, which
//! opens and closes the replicas), and the little state that is this broker's own,
//! persisted in `<data dir>/meta/cluster.json` (written to a temporary file, fsynced,
//! renamed): the cluster id of a cluster of one, the producer-id block, and dynamic broker
//! configs.
//!
//! Topics are not stored here: every broker, a single one included, keeps them in the
//! Raft metadata log. A data directory from before that (a `cluster.json` listing topics)
//! is refused with what to do (docs/cluster.md).

use runnel_sync::RwLockExt;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use uuid::Uuid;

use crate::config::Settings;
use crate::partition::Partition;
use crate::topic_config;

pub const TOPIC_NAME_MAX_CHARS: usize = 249;
/// Producer ids are handed out from blocks; the block end is persisted before use.
const PRODUCER_ID_BLOCK: i64 = 1000;

pub struct Topic {
    pub name: Arc<str>,
    pub id: Uuid,
    pub partitions: Vec<Arc<Partition>>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Default, Clone)]
struct Persisted {
    cluster_id: String,
    next_producer_id_block: i64,
    #[serde(default)]
    broker_configs: BTreeMap<String, String>,
    /// Only in data directories of the single-broker format that kept topics here.
    #[serde(default, skip_serializing)]
    topics: Vec<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("Topic '{0}' already exists.")]
    TopicExists(String),
    #[error("Topic '{0}' does not exist.")]
    UnknownTopic(String),
    #[error("{0}")]
    InvalidTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("storage: {0}")]
    Storage(#[from] anyhow::Error),
}

/// This broker's own persisted state and the producer-id allocator, with one owner: an
/// async lock, so that writing the file (off the async workers) never blocks one.
struct Local {
    persisted: Persisted,
    next_producer_id: i64,
}

pub struct Catalog {
    data_dir: PathBuf,
    topics: RwLock<BTreeMap<Arc<str>, Arc<Topic>>>,
    local: tokio::sync::Mutex<Local>,
    pub cluster_id: String,
    pub settings: RwLock<Settings>,
}

pub fn validate_topic_name(name: &str) -> Result<(), CatalogError> {
    let bad = |why: &str| Err(CatalogError::InvalidTopic(format!("Topic name \"{name}\" is illegal, {why}")));
    if name.is_empty() {
        return bad("it can't be empty");
    }
    if name == "." || name == ".." {
        return bad("it can't be \".\" or \"..\"");
    }
    if name.len() > TOPIC_NAME_MAX_CHARS {
        return bad("it can't be longer than 249 characters");
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-') {
        return bad("it contains a character other than ASCII alphanumerics, '.', '_' and '-'");
    }
    Ok(())
}

/// The storage fault hooks follow the broker's `fault.*` settings.
fn apply_faults(settings: &Settings) {
    let ms = settings.i64("fault.disk.sync.delay.ms").max(0) as u64;
    runnel_storage::fault::set_sync_delay(std::time::Duration::from_millis(ms));
    runnel_storage::fault::set_sync_fails(settings.bool("fault.disk.sync.fail"));
    runnel_storage::fault::set_disk_full(settings.bool("fault.disk.full"));
    runnel_sync::clock::set_offset_ms(settings.i64("fault.clock.offset.ms"));
}

impl Catalog {
    /// The dynamic broker settings persisted in `data_dir` (none when it is new), for what
    /// is set up before the catalog opens (the listeners' TLS).
    pub fn persisted_broker_configs(data_dir: &Path) -> Result<BTreeMap<String, String>> {
        let path = data_dir.join("meta").join("cluster.json");
        match fs::read(&path) {
            Ok(bytes) => {
                let p: Persisted =
                    serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?;
                Ok(p.broker_configs)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn open(data_dir: &Path, settings: Settings) -> Result<Catalog> {
        let meta = data_dir.join("meta");
        fs::create_dir_all(&meta).with_context(|| format!("creating {}", meta.display()))?;
        let path = meta.join("cluster.json");
        let mut persisted: Persisted = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Persisted::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if !persisted.topics.is_empty() {
            bail!(
                "{} holds {} topic(s) in the single-broker format of earlier Runnel releases, which kept topics \
                 outside the Raft metadata log; this release cannot read it. Keep running the earlier release on \
                 this directory, or start this one on a new --data-dir (log.dirs) and copy the topics over with a \
                 Kafka client (MirrorMaker, or a consumer and producer). See docs/cluster.md.",
                data_dir.display(),
                persisted.topics.len()
            );
        }
        if persisted.cluster_id.is_empty() {
            persisted.cluster_id = new_cluster_id();
        }
        let mut settings = settings;
        // Injected faults last until healed or until the broker restarts (a replaced disk).
        persisted.broker_configs.retain(|k, _| !k.starts_with("fault."));
        settings.set_dynamic(persisted.broker_configs.clone());
        apply_faults(&settings);
        write_persisted(data_dir, &persisted)?;
        // Directories of deleted topics that a crash left behind.
        for entry in fs::read_dir(data_dir)?.flatten() {
            if entry.file_name().to_string_lossy().ends_with("-delete") {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        let block = persisted.next_producer_id_block;
        info!(cluster_id = %persisted.cluster_id, "broker state loaded");
        Ok(Catalog {
            data_dir: data_dir.to_path_buf(),
            topics: RwLock::new(BTreeMap::new()),
            cluster_id: persisted.cluster_id.clone(),
            local: tokio::sync::Mutex::new(Local { persisted, next_producer_id: block }),
            settings: RwLock::new(settings),
        })
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.read_topics().get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.read_topics().values().find(|t| t.id == id).cloned()
    }

    pub fn topics_snapshot(&self) -> Vec<Arc<Topic>> {
        self.read_topics().values().cloned().collect()
    }

    fn read_topics(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Arc<str>, Arc<Topic>>> {
        self.topics.read_or_stop()
    }

    fn write_topics(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Arc<str>, Arc<Topic>>> {
        self.topics.write_or_stop()
    }

    pub fn settings(&self) -> std::sync::RwLockReadGuard<'_, Settings> {
        self.settings.read_or_stop()
    }

    /// Checks what this broker can check of a new topic before the controller decides
    /// (CreateTopics): name, partition count, configs, and that it is not known here.
    pub fn check_create(
        &self,
        name: &str,
        partitions: i32,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), CatalogError> {
        validate_topic_name(name)?;
        if self.topic(name).is_some() {
            return Err(CatalogError::TopicExists(name.to_string()));
        }
        if partitions < 1 {
            return Err(CatalogError::InvalidPartitions("Number of partitions must be larger than 0.".into()));
        }
        topic_config::validate_all(configs).map_err(CatalogError::InvalidConfig)
    }

    /// Puts a topic as the metadata log defines it (new, or with new partitions).
    pub fn insert_topic(&self, topic: Topic) {
        self.write_topics().insert(topic.name.clone(), Arc::new(topic));
    }

    /// Forgets a deleted topic and removes the directories of the replicas held here
    /// (their Raft groups are stopped and their logs closed already).
    pub fn delete_topic(&self, name: &str) -> Result<Arc<Topic>, CatalogError> {
        let topic = self.write_topics().remove(name).ok_or_else(|| CatalogError::UnknownTopic(name.to_string()))?;
        // Rename first so a crash mid-delete cannot resurrect half a topic.
        for p in topic.partitions.iter().filter(|p| !p.is_remote()) {
            let dir = partition_dir(&self.data_dir, name, p.index);
            let gone = self.data_dir.join(format!("{name}-{}.{}-delete", p.index, topic.id.simple()));
            if let Err(e) = fs::rename(&dir, &gone).and_then(|_| fs::remove_dir_all(&gone)) {
                warn!(dir = %dir.display(), error = %e, "could not remove deleted partition directory");
            }
        }
        info!(topic = %name, "deleted topic");
        Ok(topic)
    }

    /// A topic's new config overrides as the metadata log holds them.
    pub fn apply_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<(), CatalogError> {
        let topic = self.topic(name).ok_or_else(|| CatalogError::UnknownTopic(name.to_string()))?;
        let log_config = topic_config::log_config(&configs, &self.settings());
        for p in &topic.partitions {
            p.configure_log(log_config);
        }
        self.insert_topic(Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions: topic.partitions.clone(),
            configs,
        });
        Ok(())
    }

    /// Replaces the cluster-wide dynamic settings (from the metadata log, which keeps them)
    /// and re-derives every partition's log config.
    pub fn set_cluster_defaults(&self, cluster: BTreeMap<String, String>) {
        self.settings.write_or_stop().set_cluster_defaults(cluster);
        self.reconfigure_logs();
    }

    fn reconfigure_logs(&self) {
        let settings = self.settings().clone();
        for t in self.topics_snapshot() {
            let cfg = topic_config::log_config(&t.configs, &settings);
            for p in &t.partitions {
                p.configure_log(cfg);
            }
        }
    }

    /// Replaces the broker's dynamic settings (validated by the caller), persists them and
    /// re-derives every partition's log config, since topics inherit from the broker.
    pub async fn set_broker_configs(&self, dynamic: BTreeMap<String, String>) -> Result<(), CatalogError> {
        {
            let mut local = self.local.lock().await;
            let mut next = local.persisted.clone();
            next.broker_configs = dynamic.clone();
            self.persist(next.clone()).await?;
            local.persisted = next;
        }
        self.settings.write_or_stop().set_dynamic(dynamic);
        apply_faults(&self.settings().clone());
        self.reconfigure_logs();
        Ok(())
    }

    /// A new producer id, unique for the life of this data directory.
    pub async fn allocate_producer_id(&self) -> Result<i64> {
        let mut local = self.local.lock().await;
        if local.next_producer_id >= local.persisted.next_producer_id_block {
            let mut next = local.persisted.clone();
            next.next_producer_id_block += PRODUCER_ID_BLOCK;
            self.persist(next.clone()).await?;
            local.persisted = next;
        }
        let id = local.next_producer_id;
        local.next_producer_id += 1;
        Ok(id)
    }

    /// Writes the broker's own state off the async workers.
    async fn persist(&self, p: Persisted) -> Result<()> {
        let dir = self.data_dir.clone();
        tokio::task::spawn_blocking(move || write_persisted(&dir, &p)).await.context("persisting broker state")?
    }
}

fn write_persisted(data_dir: &Path, p: &Persisted) -> Result<()> {
    let meta = data_dir.join("meta");
    let tmp = meta.join("cluster.json.tmp");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(p)?)?;
    f.sync_all()?;
    fs::rename(&tmp, meta.join("cluster.json"))?;
    fs::File::open(&meta)?.sync_all()?;
    Ok(())
}

pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

/// Kafka cluster ids are 16 random bytes in URL-safe base64 without padding (22 chars).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = *Uuid::new_v4().as_bytes();
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = String::with_capacity(22);
    for b in bytes {
        bits = (bits << 8) | b as u32;
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}
