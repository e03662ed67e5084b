//! The topic catalog of a single broker: which topics exist, their ids, partition counts
//! and config overrides, the cluster id and the producer-id allocator, persisted in
//! `<data dir>/meta/cluster.json` (written to a temporary file, fsynced, renamed).
//!
//! With replication this state moves into the Raft metadata log; the catalog's interface
//! (create, delete, add partitions, alter configs, look up) is what the broker uses either way.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::{Context, Result};
use runnel_storage::Log;
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

#[derive(Serialize, Deserialize, Default)]
struct Persisted {
    cluster_id: String,
    next_producer_id_block: i64,
    #[serde(default)]
    broker_configs: BTreeMap<String, String>,
    topics: Vec<PersistedTopic>,
}

#[derive(Serialize, Deserialize, Clone)]
struct PersistedTopic {
    name: String,
    id: Uuid,
    partitions: i32,
    configs: BTreeMap<String, String>,
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

struct ProducerIds {
    next: i64,
    block_end: i64,
}

pub struct Catalog {
    data_dir: PathBuf,
    topics: RwLock<BTreeMap<Arc<str>, Arc<Topic>>>,
    /// Serializes changes, so persisting always writes a consistent snapshot.
    change: Mutex<()>,
    producer_ids: Mutex<ProducerIds>,
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
}

fn now_ms() -> i64 {
    crate::now_ms()
}

impl Catalog {
    pub fn open(data_dir: &Path, settings: Settings) -> Result<Catalog> {
        let meta = data_dir.join("meta");
        fs::create_dir_all(&meta).with_context(|| format!("creating {}", meta.display()))?;
        let path = meta.join("cluster.json");
        let mut persisted: Persisted = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Persisted::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if persisted.cluster_id.is_empty() {
            persisted.cluster_id = new_cluster_id();
        }
        let mut settings = settings;
        // Injected faults last until healed or until the broker restarts (a replaced disk).
        persisted.broker_configs.retain(|k, _| !k.starts_with("fault."));
        settings.set_dynamic(persisted.broker_configs.clone());
        apply_faults(&settings);
        // Directories of deleted topics that a crash left behind.
        for entry in fs::read_dir(data_dir)?.flatten() {
            if entry.file_name().to_string_lossy().ends_with("-delete") {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        let mut topics = BTreeMap::new();
        for t in &persisted.topics {
            let name: Arc<str> = Arc::from(t.name.as_str());
            let log_config = topic_config::log_config(&t.configs, &settings);
            let mut partitions = Vec::with_capacity(t.partitions as usize);
            for i in 0..t.partitions {
                let dir = partition_dir(data_dir, &t.name, i);
                let log =
                    Log::open(&dir, log_config, now_ms()).with_context(|| format!("opening {}", dir.display()))?;
                partitions.push(Arc::new(Partition::new(name.clone(), i, log)));
            }
            topics.insert(name.clone(), Arc::new(Topic { name, id: t.id, partitions, configs: t.configs.clone() }));
        }
        let block = persisted.next_producer_id_block;
        let catalog = Catalog {
            data_dir: data_dir.to_path_buf(),
            topics: RwLock::new(topics),
            change: Mutex::new(()),
            producer_ids: Mutex::new(ProducerIds { next: block, block_end: block }),
            cluster_id: persisted.cluster_id.clone(),
            settings: RwLock::new(settings),
        };
        catalog.persist(&catalog.topics_snapshot(), block)?;
        info!(topics = persisted.topics.len(), cluster_id = %catalog.cluster_id, "catalog loaded");
        Ok(catalog)
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
        self.topics.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_topics(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Arc<str>, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn settings(&self) -> std::sync::RwLockReadGuard<'_, Settings> {
        self.settings.read().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_change(&self) -> std::sync::MutexGuard<'_, ()> {
        self.change.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks a create request without doing it (CreateTopics validate_only uses this too).
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
        for (k, v) in configs {
            topic_config::validate(k, v).map_err(CatalogError::InvalidConfig)?;
        }
        Ok(())
    }

    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, CatalogError> {
        let _g = self.lock_change();
        self.check_create(name, partitions, &configs)?;
        let name: Arc<str> = Arc::from(name);
        let log_config = topic_config::log_config(&configs, &self.settings());
        let mut parts = Vec::with_capacity(partitions as usize);
        for i in 0..partitions {
            let dir = partition_dir(&self.data_dir, &name, i);
            // A leftover directory of a topic with the same name that was deleted is stale.
            if dir.exists() {
                let _ = fs::remove_dir_all(&dir);
            }
            let log = Log::open(&dir, log_config, now_ms()).with_context(|| format!("creating {}", dir.display()))?;
            parts.push(Arc::new(Partition::new(name.clone(), i, log)));
        }
        let topic = Arc::new(Topic { name: name.clone(), id: Uuid::new_v4(), partitions: parts, configs });
        let mut all = self.topics_snapshot();
        all.push(topic.clone());
        self.persist(&all, self.producer_block_end())?;
        self.write_topics().insert(name.clone(), topic.clone());
        info!(topic = %name, partitions, "created topic");
        Ok(topic)
    }

    /// Adds a topic the metadata log defines (cluster mode); it is not written to
    /// `cluster.json`, since the metadata log already holds it.
    pub fn insert_topic(&self, topic: Topic) {
        let _g = self.lock_change();
        self.write_topics().insert(topic.name.clone(), Arc::new(topic));
    }

    pub fn delete_topic(&self, name: &str) -> Result<Arc<Topic>, CatalogError> {
        let _g = self.lock_change();
        let topic = self.topic(name).ok_or_else(|| CatalogError::UnknownTopic(name.to_string()))?;
        let rest: Vec<_> = self.topics_snapshot().into_iter().filter(|t| &*t.name != name).collect();
        self.persist(&rest, self.producer_block_end())?;
        self.write_topics().remove(name);
        // Rename first so a crash mid-delete cannot resurrect half a topic. Only the
        // replicas this broker holds have a directory of this topic.
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

    pub fn check_add_partitions(&self, name: &str, count: i32) -> Result<Arc<Topic>, CatalogError> {
        let topic = self.topic(name).ok_or_else(|| CatalogError::UnknownTopic(name.to_string()))?;
        let have = topic.partitions.len() as i32;
        if count <= have {
            return Err(CatalogError::InvalidPartitions(format!(
                "Topic currently has {have} partitions, which is higher than the requested {count}."
            )));
        }
        Ok(topic)
    }

    pub fn add_partitions(&self, name: &str, count: i32) -> Result<(), CatalogError> {
        let _g = self.lock_change();
        let topic = self.check_add_partitions(name, count)?;
        let log_config = topic_config::log_config(&topic.configs, &self.settings());
        let mut parts = topic.partitions.clone();
        for i in parts.len() as i32..count {
            let dir = partition_dir(&self.data_dir, name, i);
            let log = Log::open(&dir, log_config, now_ms()).with_context(|| format!("creating {}", dir.display()))?;
            parts.push(Arc::new(Partition::new(topic.name.clone(), i, log)));
        }
        self.replace(Topic {
            name: topic.name.clone(),
            id: topic.id,
            partitions: parts,
            configs: topic.configs.clone(),
        })
    }

    /// Replaces a topic's config overrides (validated by the caller) and applies them.
    pub fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<(), CatalogError> {
        self.configure_topic(name, configs, true)
    }

    /// Cluster mode: a topic's new configs as the metadata log holds them (nothing is
    /// persisted here).
    pub fn apply_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<(), CatalogError> {
        self.configure_topic(name, configs, false)
    }

    fn configure_topic(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        persist: bool,
    ) -> Result<(), CatalogError> {
        let _g = self.lock_change();
        let topic = self.topic(name).ok_or_else(|| CatalogError::UnknownTopic(name.to_string()))?;
        let log_config = topic_config::log_config(&configs, &self.settings());
        for p in &topic.partitions {
            if let Some(mut log) = p.log() {
                log.set_config(log_config);
            }
        }
        let topic = Topic { name: topic.name.clone(), id: topic.id, partitions: topic.partitions.clone(), configs };
        if persist {
            return self.replace(topic);
        }
        self.write_topics().insert(topic.name.clone(), Arc::new(topic));
        Ok(())
    }

    /// Replaces the broker's dynamic settings (validated by the caller) and re-derives
    /// every partition's log config, since topics inherit from the broker.
    pub fn set_broker_configs(&self, dynamic: BTreeMap<String, String>) -> Result<(), CatalogError> {
        let _g = self.lock_change();
        let old = self.settings().dynamic().clone();
        self.settings.write().unwrap_or_else(|p| p.into_inner()).set_dynamic(dynamic);
        if let Err(e) = self.persist(&self.topics_snapshot(), self.producer_block_end()) {
            self.settings.write().unwrap_or_else(|p| p.into_inner()).set_dynamic(old);
            return Err(e.into());
        }
        let settings = self.settings().clone();
        apply_faults(&settings);
        for t in self.topics_snapshot() {
            let cfg = topic_config::log_config(&t.configs, &settings);
            for p in &t.partitions {
                if let Some(mut log) = p.log() {
                    log.set_config(cfg);
                }
            }
        }
        Ok(())
    }

    fn replace(&self, topic: Topic) -> Result<(), CatalogError> {
        let topic = Arc::new(topic);
        let all: Vec<_> =
            self.topics_snapshot().into_iter().map(|t| if t.name == topic.name { topic.clone() } else { t }).collect();
        self.persist(&all, self.producer_block_end())?;
        self.write_topics().insert(topic.name.clone(), topic);
        Ok(())
    }

    fn producer_block_end(&self) -> i64 {
        self.producer_ids.lock().unwrap_or_else(|p| p.into_inner()).block_end
    }

    /// A new producer id, unique for the life of this data directory.
    pub fn allocate_producer_id(&self) -> Result<i64> {
        let mut ids = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.next >= ids.block_end {
            let _g = self.lock_change();
            let end = ids.block_end + PRODUCER_ID_BLOCK;
            self.persist(&self.topics_snapshot(), end)?;
            ids.block_end = end;
        }
        let id = ids.next;
        ids.next += 1;
        Ok(id)
    }

    fn persist(&self, topics: &[Arc<Topic>], producer_block_end: i64) -> Result<()> {
        let p = Persisted {
            cluster_id: self.cluster_id.clone(),
            next_producer_id_block: producer_block_end,
            broker_configs: self.settings().dynamic().clone(),
            topics: topics
                .iter()
                .filter(|t| t.partitions.iter().all(|p| p.is_local()))
                .map(|t| PersistedTopic {
                    name: t.name.to_string(),
                    id: t.id,
                    partitions: t.partitions.len() as i32,
                    configs: t.configs.clone(),
                })
                .collect(),
        };
        let meta = self.data_dir.join("meta");
        let tmp = meta.join("cluster.json.tmp");
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(&p)?)?;
        f.sync_all()?;
        fs::rename(&tmp, meta.join("cluster.json"))?;
        fs::File::open(&meta)?.sync_all()?;
        Ok(())
    }
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
