//! The controller's decisions: each call checked against the current image (placement,
//! capacity, assignments, configs) and committed as one metadata record.

use runnel_sync::LockExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use kafka_protocol::error::ResponseError;
use tracing::warn;
use uuid::Uuid;

use crate::controller::{Controller, Outcome};
use crate::leader_preference::{order_assignment, parse};
use crate::placement::{check_assignment, place, placement_risk};
use crate::records::{BrokerInfo, Call, Record};

/// A topic name being created by this controller, released when the creation ends.
struct Creating<'a> {
    names: &'a Mutex<HashSet<String>>,
    name: String,
}

impl<'a> Creating<'a> {
    fn claim(names: &'a Mutex<HashSet<String>>, name: &str) -> Option<Creating<'a>> {
        let fresh = names.lock_or_stop().insert(name.to_string());
        fresh.then(|| Creating { names, name: name.to_string() })
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.names.lock_or_stop().remove(&self.name);
    }
}

fn over_capacity(max: usize, what: String) -> (ResponseError, String) {
    (ResponseError::InvalidPartitions, format!("{what}: more than max.broker.partitions={max} on a broker"))
}

impl Controller {
    /// Controller: checks a call against the current metadata and commits its record.
    pub(crate) async fn decide(&self, call: Call) -> Outcome {
        self.until_caught_up().await?;
        match call {
            Call::CreateTopic { name, partitions, replication_factor: rf, assignment, configs, validate_only } => {
                let brokers = self.check_new_topic(&name, rf)?;
                if let Some(a) = &assignment {
                    check_assignment(a, &brokers)?;
                }
                self.check_replica_count(partitions.max(0) as usize * rf.max(0) as usize)?;
                let placed = match &assignment {
                    Some(a) => a.clone(),
                    None => {
                        let mut placed = place(&brokers, partitions, rf as usize);
                        let preference = configs.get("leader.preference").map_or(Ok(vec![]), |p| parse(p));
                        order_assignment(&mut placed, &preference.unwrap_or_default(), &brokers);
                        placed
                    }
                };
                self.check_broker_load(&placed)?;
                self.check_placement(&name, &brokers, &placed, &configs)?;
                if validate_only {
                    return Ok(());
                }
                if self.read().topics.contains_key(&name) {
                    return Err((ResponseError::TopicAlreadyExists, format!("Topic '{name}' already exists.")));
                }
                // One creation of a name at a time: the second of two racing requests is
                // told the topic exists, as Kafka's controller does.
                let Some(_creating) = Creating::claim(&self.creating, &name) else {
                    return Err((ResponseError::TopicAlreadyExists, format!("Topic '{name}' already exists.")));
                };
                // A sequence number no topic applied or proposed here has had.
                let floor = self.read().next_seq.max(1);
                self.last_seq.fetch_max(floor - 1, Ordering::AcqRel);
                let seq = self.last_seq.fetch_add(1, Ordering::AcqRel) + 1;
                let rec =
                    Record::CreateTopic { name: name.clone(), id: Uuid::new_v4(), seq, replicas: placed, configs };
                self.propose(&rec, |s| s.topics.contains_key(&name)).await
            }
            Call::DeleteTopic { name } => {
                let Some(id) = self.read().topics.get(&name).map(|t| t.id) else {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic.".into(),
                    ));
                };
                let rec = Record::DeleteTopic { name: name.clone(), id };
                self.propose(&rec, |s| s.topics.get(&name).map(|t| t.id) != Some(id)).await
            }
            Call::Reassign { name, partition, target, allow_rf_change } => {
                let (id, partitions) =
                    self.read().topics.get(&name).map(|t| (t.id, t.partitions())).ok_or_else(|| {
                        (ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))
                    })?;
                if partition < 0 || partition as usize >= partitions {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        format!("Partition {partition} of '{name}' does not exist."),
                    ));
                }
                let moving = self.read().moving.get(&(name.clone(), partition)).cloned();
                let target = match (target, &moving) {
                    (None, None) => {
                        return Err((ResponseError::NoReassignmentInProgress, "No reassignment is in progress.".into()))
                    }
                    (None, Some(m)) => m.original.clone(),
                    (Some(t), _) => {
                        check_assignment(std::slice::from_ref(&t), &self.brokers())?;
                        t
                    }
                };
                let current = self
                    .read()
                    .topics
                    .get(&name)
                    .and_then(|t| t.replicas.get(partition as usize).cloned())
                    .unwrap_or_default();
                let now = moving.as_ref().map_or(current.len(), |m| m.original.len());
                if !allow_rf_change && target.len() != now {
                    return Err((
                        ResponseError::InvalidReplicationFactor,
                        format!("The target has {} replicas where the partition has {now}, and the request does not allow a change.", target.len()),
                    ));
                }
                if moving.is_none() && current == target {
                    return Ok(());
                }
                let rec = Record::Reassign { name: name.clone(), id, partition, target: target.clone() };
                self.propose(&rec, |s| s.moving.get(&(name.clone(), partition)).is_some_and(|m| m.target == target))
                    .await
            }
            Call::FinishReassign { name, partition, replicas } => {
                let key = (name.clone(), partition);
                let Some(id) = self
                    .read()
                    .topics
                    .get(&name)
                    .map(|t| t.id)
                    .filter(|_| self.read().moving.get(&key).is_some_and(|m| m.target == replicas))
                else {
                    return Ok(());
                };
                let rec = Record::Reassigned { name: name.clone(), id, partition, replicas };
                self.propose(&rec, |s| !s.moving.contains_key(&key)).await
            }
            Call::AlterTopicConfigs { name, change, change_id } => {
                // One change at a time, each applied to the overrides the last one left.
                let _one = self.configuring.lock().await;
                let current = self.read().topics.get(&name).map(|t| (t.id, t.configs.clone()));
                let Some((id, current)) = current else {
                    return Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")));
                };
                let configs = self.host.configs_after(&current, &change)?;
                let rec = Record::TopicConfigs { name: name.clone(), id, configs, change_id };
                self.propose(&rec, |s| s.config_changes.contains(&change_id)).await
            }
            Call::Drain { id, drain } => {
                if !self.read().brokers.contains_key(&id) {
                    return Err((ResponseError::BrokerNotAvailable, format!("Broker {id} is not registered.")));
                }
                if self.read().draining.get(&id).copied() == drain {
                    return Ok(());
                }
                let rec = Record::Drain { id, drain };
                self.propose(&rec, |s| s.draining.get(&id).copied() == drain).await
            }
            Call::AlterBrokerDefaults { configs, change_id } => {
                let rec = Record::BrokerDefaults { configs, change_id };
                self.propose(&rec, |s| s.config_changes.contains(&change_id)).await
            }
            Call::AlterGroupConfigs { group, configs, change_id } => {
                let rec = Record::GroupConfigs { group, configs, change_id };
                self.propose(&rec, |s| s.config_changes.contains(&change_id)).await
            }
            Call::AlterClientQuotas { changes, change_id } => {
                let rec = Record::ClientQuotas { changes, change_id };
                self.propose(&rec, |s| s.config_changes.contains(&change_id)).await
            }
            Call::AlterAcls { creates, deletes, change_id } => {
                let rec = Record::Acls { creates, deletes, change_id };
                self.propose(&rec, |s| s.config_changes.contains(&change_id)).await
            }
            Call::AlterScram { upserts, deletes, change_id } => {
                let rec = Record::ScramCredentials { upserts, deletes, change_id };
                self.propose(&rec, |s| s.config_changes.contains(&change_id)).await
            }
            Call::DeleteRecords { name, partition, offset } => {
                let key = (name.clone(), partition);
                let Some(id) = self.read().topics.get(&name).map(|t| t.id) else {
                    return Err((ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")));
                };
                if self.read().log_starts.get(&key).is_some_and(|s| *s >= offset) {
                    return Ok(());
                }
                let rec = Record::DeleteRecords { name: name.clone(), id, partition, offset };
                self.propose(&rec, |s| s.log_starts.get(&key).is_some_and(|s| *s >= offset)).await
            }
            Call::CreatePartitions { name, count, assignment, validate_only } => {
                let (id, current, rf) =
                    self.read().topics.get(&name).map(|t| (t.id, t.partitions(), t.rf)).ok_or_else(|| {
                        (ResponseError::UnknownTopicOrPartition, "This server does not host this topic.".to_string())
                    })?;
                let invalid = |msg: String| Err((ResponseError::InvalidPartitions, msg));
                if count as usize == current {
                    return invalid(format!("Topic already has {current} partitions."));
                }
                if count < 1 || (count as usize) < current {
                    return invalid(format!(
                        "Topic currently has {current} partitions, which is higher than the requested {count}."
                    ));
                }
                let brokers = self.live_brokers();
                self.check_replica_count((count as usize - current) * rf)?;
                let placed = match assignment {
                    Some(a) => {
                        if a.len() != count as usize - current {
                            return Err((
                                ResponseError::InvalidReplicaAssignment,
                                format!(
                                    "Increasing the number of partitions by {} but {} assignments provided.",
                                    count as usize - current,
                                    a.len()
                                ),
                            ));
                        }
                        check_assignment(&a, &brokers)?;
                        if a.first().is_some_and(|r| r.len() != rf) {
                            return Err((
                                ResponseError::InvalidReplicaAssignment,
                                format!("The new partitions must have {rf} replicas, as the existing ones do."),
                            ));
                        }
                        a
                    }
                    None if rf > brokers.len() => {
                        return Err((
                            ResponseError::InvalidReplicationFactor,
                            format!("The topic's replication factor of {rf} cannot be reached: only {} broker(s) are registered and not fenced.", brokers.len()),
                        ));
                    }
                    None => {
                        let mut placed = place(&brokers, count, rf).split_off(current);
                        let topic = self.read().topics.get(&name).map(|t| t.configs.get("leader.preference").cloned());
                        let preference = topic.flatten().map_or(Ok(vec![]), |p| parse(&p));
                        order_assignment(&mut placed, &preference.unwrap_or_default(), &brokers);
                        placed
                    }
                };
                self.check_broker_load(&placed)?;
                let configs = self.read().topics.get(&name).map(|t| t.configs.clone());
                self.check_placement(&name, &brokers, &placed, &configs.unwrap_or_default())?;
                if validate_only {
                    return Ok(());
                }
                let rec = Record::AddPartitions { name: name.clone(), id, first: current, replicas: placed };
                self.propose(&rec, |s| {
                    s.topics.get(&name).is_none_or(|t| t.id != id || t.partitions() >= count as usize)
                })
                .await
            }
        }
    }

    /// `max.broker.partitions`, bounded by the 24 bits Raft group ids leave to a topic's
    /// partitions.
    fn broker_partitions_max(&self) -> usize {
        self.host.limits().broker_partitions_max.min(1 << 24)
    }

    /// Refuses a request for more new replicas than the live brokers may take in all
    /// (checked before placing, so a huge request is never placed).
    fn check_replica_count(&self, replicas: usize) -> Result<(), (ResponseError, String)> {
        let max = self.broker_partitions_max();
        let brokers = self.read().live().len().max(1);
        if replicas > max.saturating_mul(brokers) {
            return Err(over_capacity(max, format!("{replicas} new partition replicas over {brokers} broker(s)")));
        }
        Ok(())
    }

    /// Refuses a placement that would give a broker more than `max.broker.partitions`.
    fn check_broker_load(&self, placed: &[Vec<i32>]) -> Result<(), (ResponseError, String)> {
        let max = self.broker_partitions_max();
        let mut held: HashMap<i32, usize> = HashMap::new();
        for b in self.read().topics.values().flat_map(|t| t.replicas.iter()).flatten() {
            *held.entry(*b).or_default() += 1;
        }
        for b in placed.iter().flatten() {
            let n = held.entry(*b).or_default();
            *n += 1;
            if *n > max {
                return Err(over_capacity(max, format!("broker {b} would hold {n} partition replicas")));
            }
        }
        Ok(())
    }

    /// Refuses a placement that losing one failure domain would break, unless the topic
    /// (or the broker) sets `placement.unsafe.allow`.
    fn check_placement(
        &self,
        name: &str,
        brokers: &[BrokerInfo],
        placed: &[Vec<i32>],
        configs: &BTreeMap<String, String>,
    ) -> Result<(), (ResponseError, String)> {
        let Some(risk) = placement_risk(brokers, placed) else { return Ok(()) };
        if !self.host.placement_unsafe_allowed(configs) {
            return Err((ResponseError::InvalidReplicationFactor, format!("Topic '{name}': {risk}")));
        }
        warn!(topic = %name, %risk, "placing replicas unsafely (placement.unsafe.allow)");
        Ok(())
    }

    /// The controller's checks of a new topic; returns the registered brokers.
    fn check_new_topic(&self, name: &str, rf: i16) -> Result<Vec<BrokerInfo>, (ResponseError, String)> {
        let state = self.read();
        if state.topics.contains_key(name) {
            return Err((ResponseError::TopicAlreadyExists, format!("Topic '{name}' already exists.")));
        }
        let brokers = state.live();
        if rf < 1 || rf as usize > brokers.len() {
            return Err((
                ResponseError::InvalidReplicationFactor,
                format!("Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered and not fenced.", brokers.len()),
            ));
        }
        Ok(brokers)
    }
}
