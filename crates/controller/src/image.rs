//! The metadata image: the state every broker rebuilds by replaying the metadata log, and
//! what each record asks of this broker ([`Effect`]s), computed before the image changes.
//! One owner changes it: the controller's apply task, in log order.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use uuid::Uuid;

use crate::host::Effect;
use crate::records::{raft_group, BrokerInfo, Drain, Moving, Record};
use runnel_security::acl::AclBinding;
use runnel_security::quota;
use runnel_security::{ScramCredential, ScramMechanism};

/// Applied config change ids remembered, for the brokers waiting on them.
const CONFIG_CHANGES_KEPT: usize = 1024;

pub(crate) struct TopicMeta {
    pub id: Uuid,
    /// Sequence number, which names the partitions' Raft groups.
    pub seq: u64,
    /// Replicas per partition.
    pub rf: usize,
    /// Each partition's replicas when it was created: its Raft group's first voters, which a
    /// replica added later starts from before it replays the group's changes.
    pub initial: Vec<Vec<i32>>,
    /// Each partition's replicas now (a finished reassignment changes them).
    pub replicas: Vec<Vec<i32>>,
    pub configs: BTreeMap<String, String>,
}

impl TopicMeta {
    pub fn partitions(&self) -> usize {
        self.replicas.len()
    }
}

#[derive(Default)]
pub(crate) struct Image {
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Registered brokers the controller has fenced: not offered to clients, not given new
    /// replicas.
    pub fenced: BTreeSet<i32>,
    /// Brokers whose leaderships move to other replicas, and why.
    pub draining: BTreeMap<i32, Drain>,
    /// Partitions moving to new replicas, by (topic, partition).
    pub moving: BTreeMap<(String, i32), Moving>,
    /// The latest config changes applied (ids, oldest first; bounded).
    pub config_changes: VecDeque<Uuid>,
    /// Log starts DeleteRecords set, by (topic, partition).
    pub log_starts: BTreeMap<(String, i32), i64>,
    pub topics: BTreeMap<String, TopicMeta>,
    pub next_seq: u64,
    /// SCRAM credentials by (user, mechanism).
    pub scram: BTreeMap<(String, ScramMechanism), ScramCredential>,
    /// The ACLs, shared with the requests being authorized (replaced whole on a change).
    pub acls: Arc<Vec<AclBinding>>,
    /// The client quotas, shared with the requests they apply to (replaced whole on a change).
    pub quotas: Arc<quota::Table>,
    /// The cluster-wide dynamic broker configs.
    pub broker_defaults: BTreeMap<String, String>,
    /// Groups' dynamic configs, by group.
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
}

impl Image {
    /// The registered brokers that are not fenced.
    pub fn live(&self) -> Vec<BrokerInfo> {
        self.brokers.values().filter(|b| !self.fenced.contains(&b.id)).cloned().collect()
    }

    /// The topic named `name` if it is the one with id `id`.
    fn topic(&self, name: &str, id: Uuid) -> Option<&TopicMeta> {
        self.topics.get(name).filter(|t| t.id == id)
    }

    /// What applying `rec` asks of broker `me`, given the image before it.
    pub fn effect_of(&self, rec: &Record, me: i32) -> Option<Effect> {
        match rec {
            Record::RegisterBroker(_)
            | Record::FenceBroker { .. }
            | Record::Drain { .. }
            | Record::ScramCredentials { .. }
            | Record::Acls { .. }
            | Record::ClientQuotas { .. }
            | Record::GroupConfigs { .. } => None,
            Record::BrokerDefaults { configs, .. } => Some(Effect::BrokerDefaults { configs: configs.clone() }),
            Record::CreateTopic { name, id, seq, replicas, configs } => {
                (!self.topics.contains_key(name)).then(|| Effect::CreateTopic {
                    name: name.clone(),
                    id: *id,
                    seq: *seq,
                    replicas: replicas.clone(),
                    configs: configs.clone(),
                })
            }
            Record::AddPartitions { name, id, first, replicas } => {
                let t = self.topic(name, *id).filter(|t| t.partitions() == *first)?;
                Some(Effect::AddPartitions {
                    name: name.clone(),
                    id: *id,
                    seq: t.seq,
                    first: *first as i32,
                    replicas: replicas.clone(),
                })
            }
            Record::Reassign { name, id, partition, target } => {
                let t = self.topic(name, *id)?;
                let current = t.replicas.get(*partition as usize)?;
                let original = self
                    .moving
                    .get(&(name.clone(), *partition))
                    .map_or_else(|| current.clone(), |m| m.original.clone());
                let moving = Moving { original, target: target.clone() };
                let host = moving.target.contains(&me) || moving.original.contains(&me);
                Some(self.relist(name, t, *partition, moving.listed(), host))
            }
            Record::Reassigned { name, id, partition, replicas } => {
                let t = self.topic(name, *id)?;
                t.replicas.get(*partition as usize)?;
                Some(self.relist(name, t, *partition, replicas.clone(), replicas.contains(&me)))
            }
            Record::TopicConfigs { name, id, configs, .. } => {
                self.topic(name, *id)?;
                Some(Effect::TopicConfigs { name: name.clone(), id: *id, configs: configs.clone() })
            }
            Record::DeleteRecords { name, id, partition, offset } => {
                self.topic(name, *id)?;
                Some(Effect::DeleteRecords { name: name.clone(), id: *id, partition: *partition, offset: *offset })
            }
            Record::DeleteTopic { name, id } => {
                let t = self.topic(name, *id)?;
                Some(Effect::DeleteTopic { name: name.clone(), id: *id, seq: t.seq, partitions: t.partitions() })
            }
        }
    }

    fn relist(&self, name: &str, t: &TopicMeta, partition: i32, listed: Vec<i32>, host: bool) -> Effect {
        Effect::Relist {
            name: name.to_string(),
            id: t.id,
            partition,
            group: raft_group(t.seq, partition),
            listed,
            host,
            initial: t.initial.get(partition as usize).cloned().unwrap_or_default(),
        }
    }

    /// Remembers an applied change for the broker waiting on it (bounded).
    fn changed(&mut self, change_id: Uuid) {
        if self.config_changes.len() == CONFIG_CHANGES_KEPT {
            self.config_changes.pop_front();
        }
        self.config_changes.push_back(change_id);
    }

    pub fn apply(&mut self, rec: Record) {
        match rec {
            Record::RegisterBroker(info) => {
                // A broker registers at every start: it is alive, and a controlled
                // shutdown before it is over.
                self.fenced.remove(&info.id);
                if self.draining.get(&info.id) == Some(&Drain::Shutdown) {
                    self.draining.remove(&info.id);
                }
                if self.brokers.get(&info.id) != Some(&info) {
                    tracing::info!(broker = info.id, host = %info.host, port = info.port, "broker registered");
                    self.brokers.insert(info.id, info);
                }
            }
            Record::FenceBroker { id, fenced } => {
                let changed = if fenced { self.fenced.insert(id) } else { self.fenced.remove(&id) };
                if changed && fenced {
                    tracing::warn!(
                        broker = id,
                        "broker fenced: the controller has not heard from it within broker.session.timeout.ms"
                    );
                } else if changed {
                    tracing::info!(broker = id, "broker unfenced: heard from again");
                }
            }
            Record::Drain { id, drain } => {
                let before = match drain {
                    Some(d) => self.draining.insert(id, d),
                    None => self.draining.remove(&id),
                };
                if before != drain {
                    tracing::info!(broker = id, ?drain, "broker drain changed");
                }
            }
            Record::CreateTopic { name, id, seq, replicas, configs } => {
                if self.topics.contains_key(&name) {
                    return;
                }
                let rf = replicas.first().map_or(0, |r| r.len());
                let meta = TopicMeta { id, seq, rf, initial: replicas.clone(), replicas, configs };
                self.topics.insert(name, meta);
                self.next_seq = self.next_seq.max(seq.saturating_add(1));
            }
            Record::AddPartitions { name, id, first, replicas } => {
                if let Some(t) = self.topics.get_mut(&name).filter(|t| t.id == id && t.partitions() == first) {
                    t.initial.extend(replicas.iter().cloned());
                    t.replicas.extend(replicas);
                }
            }
            Record::Reassign { name, id, partition, target } => {
                let Some(current) = self.topic(&name, id).and_then(|t| t.replicas.get(partition as usize)) else {
                    return;
                };
                let key = (name, partition);
                let original = self.moving.get(&key).map_or_else(|| current.clone(), |m| m.original.clone());
                tracing::info!(topic = %key.0, partition, ?target, "partition reassignment started");
                self.moving.insert(key, Moving { original, target });
            }
            Record::Reassigned { name, id, partition, replicas } => {
                let Some(t) = self.topics.get_mut(&name).filter(|t| t.id == id) else { return };
                let Some(slot) = t.replicas.get_mut(partition as usize) else { return };
                tracing::info!(topic = %name, partition, ?replicas, "partition reassignment finished");
                *slot = replicas;
                self.moving.remove(&(name, partition));
            }
            Record::TopicConfigs { name, id, configs, change_id } => {
                if let Some(t) = self.topics.get_mut(&name).filter(|t| t.id == id) {
                    t.configs = configs;
                }
                self.changed(change_id);
            }
            Record::ScramCredentials { upserts, deletes, change_id } => {
                for key in deletes {
                    self.scram.remove(&key);
                }
                for (user, mechanism, credential) in upserts {
                    self.scram.insert((user, mechanism), credential);
                }
                self.changed(change_id);
            }
            Record::Acls { creates, deletes, change_id } => {
                let mut acls: BTreeSet<AclBinding> = self.acls.iter().cloned().collect();
                for b in &deletes {
                    acls.remove(b);
                }
                acls.extend(creates);
                self.acls = Arc::new(acls.into_iter().collect());
                self.changed(change_id);
            }
            Record::BrokerDefaults { configs, change_id } => {
                self.broker_defaults = configs;
                self.changed(change_id);
            }
            Record::GroupConfigs { group, configs, change_id } => {
                if configs.is_empty() {
                    self.group_configs.remove(&group);
                } else {
                    self.group_configs.insert(group, configs);
                }
                self.changed(change_id);
            }
            Record::ClientQuotas { changes, change_id } => {
                let mut table = (*self.quotas).clone();
                for (entity, key, value) in changes {
                    let values = table.entry(entity.clone()).or_default();
                    match value {
                        Some(v) => values.insert(key, v),
                        None => values.remove(&key),
                    };
                    if values.is_empty() {
                        table.remove(&entity);
                    }
                }
                self.quotas = Arc::new(table);
                self.changed(change_id);
            }
            Record::DeleteRecords { name, partition, offset, .. } => {
                let start = self.log_starts.entry((name, partition)).or_default();
                *start = (*start).max(offset);
            }
            Record::DeleteTopic { name, id } => {
                if self.topic(&name, id).is_none() {
                    return;
                }
                self.topics.remove(&name);
                self.moving.retain(|(topic, _), _| *topic != name);
                self.log_starts.retain(|(topic, _), _| *topic != name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, id: Uuid, seq: u64, replicas: Vec<Vec<i32>>) -> Record {
        Record::CreateTopic { name: name.into(), id, seq, replicas, configs: BTreeMap::new() }
    }

    #[test]
    fn effects_follow_the_image_and_stale_records_ask_nothing() {
        let mut image = Image::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let rec = create("t", a, 1, vec![vec![0, 1], vec![1, 2]]);
        assert!(matches!(image.effect_of(&rec, 0), Some(Effect::CreateTopic { seq: 1, .. })));
        image.apply(rec.clone());
        assert!(image.effect_of(&rec, 0).is_none(), "a replayed creation opens nothing twice");
        assert_eq!(image.next_seq, 2);

        // Partitions are added only at the count the request saw.
        let add = Record::AddPartitions { name: "t".into(), id: a, first: 2, replicas: vec![vec![2, 0]] };
        assert!(matches!(image.effect_of(&add, 0), Some(Effect::AddPartitions { first: 2, seq: 1, .. })));
        image.apply(add.clone());
        assert!(image.effect_of(&add, 0).is_none());
        assert_eq!(image.topics["t"].partitions(), 3);

        // A move lists the target, then the replicas leaving; this broker hosts while in either.
        let mv = Record::Reassign { name: "t".into(), id: a, partition: 0, target: vec![2, 1] };
        match image.effect_of(&mv, 0) {
            Some(Effect::Relist { listed, host, initial, group, .. }) => {
                assert_eq!(listed, vec![2, 1, 0]);
                assert!(host);
                assert_eq!(initial, vec![0, 1]);
                assert_eq!(group, raft_group(1, 0));
            }
            other => panic!("{other:?}"),
        }
        image.apply(mv);
        let done = Record::Reassigned { name: "t".into(), id: a, partition: 0, replicas: vec![2, 1] };
        assert!(matches!(image.effect_of(&done, 0), Some(Effect::Relist { host: false, .. })));
        image.apply(done);
        assert!(image.moving.is_empty());
        assert_eq!(image.topics["t"].replicas[0], vec![2, 1]);
        assert_eq!(image.topics["t"].initial[0], vec![0, 1], "first voters stay");

        // Records about an older topic of the same name ask nothing.
        let del_other = Record::DeleteTopic { name: "t".into(), id: b };
        assert!(image.effect_of(&del_other, 0).is_none());
        image.apply(del_other);
        assert!(image.topics.contains_key("t"));
        let del = Record::DeleteTopic { name: "t".into(), id: a };
        assert!(matches!(image.effect_of(&del, 0), Some(Effect::DeleteTopic { partitions: 3, .. })));
        image.apply(del);
        assert!(image.topics.is_empty());
    }
}
