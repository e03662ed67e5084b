//! Authorization of one request: who sent it (the principal its connection logged in as,
//! `User:ANONYMOUS` without a login) and from where, checked against the ACLs in the
//! metadata log with Kafka's StandardAuthorizer semantics (`runnel_security::acl`). With no
//! `authorizer.class.name`, everything is allowed, as in Kafka.

use std::sync::Arc;

use runnel_security::acl::{AclBinding, Operation, Policy, ResourceType, CLUSTER_NAME};

use crate::config::Settings;

/// The principal of a connection that has not logged in.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// What `authorizer.class.name` takes: Kafka's authorizers (both enforce the same ACLs).
const AUTHORIZERS: &[&str] =
    &["org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer"];

/// The broker's authorization settings, None when there is no authorizer.
pub fn policy(s: &Settings) -> anyhow::Result<Option<Arc<Policy>>> {
    match s.get("authorizer.class.name").trim() {
        "" => Ok(None),
        name if AUTHORIZERS.contains(&name) => {
            Ok(Some(Arc::new(Policy::new(s.get("super.users"), s.bool("allow.everyone.if.no.acl.found")))))
        }
        other => anyhow::bail!("authorizer.class.name {other}: Runnel's authorizer is {}", AUTHORIZERS[0]),
    }
}

/// One request's rights: the ACLs as they were when it arrived.
#[derive(Clone)]
pub struct Access {
    policy: Option<Arc<Policy>>,
    acls: Arc<Vec<AclBinding>>,
    pub principal: Arc<str>,
    host: String,
}

impl Access {
    pub fn new(policy: Option<Arc<Policy>>, acls: Arc<Vec<AclBinding>>, principal: Arc<str>, host: String) -> Access {
        Access { policy, acls, principal, host }
    }

    /// Everything allowed (no authorizer): what internal callers and the fuzz tests use.
    pub fn open() -> Access {
        Access::new(None, Arc::default(), ANONYMOUS.into(), String::new())
    }

    pub fn allows(&self, op: Operation, t: ResourceType, name: &str) -> bool {
        self.policy.as_ref().is_none_or(|p| p.authorize(&self.acls, &self.principal, &self.host, op, t, name))
    }

    pub fn topic(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Topic, name)
    }

    pub fn group(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Group, name)
    }

    pub fn transactional_id(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::TransactionalId, name)
    }

    pub fn cluster(&self, op: Operation) -> bool {
        self.allows(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether `op` is allowed on some resource of type `t`.
    pub fn any(&self, op: Operation, t: ResourceType) -> bool {
        self.policy.as_ref().is_none_or(|p| p.authorize_any(&self.acls, &self.principal, &self.host, op, t))
    }

    /// Whether `op` (DESCRIBE_CONFIGS, ALTER_CONFIGS) is allowed on a config resource: a
    /// topic, or a broker (the cluster); Kafka's error when it is not.
    pub fn config_resource(
        &self,
        op: Operation,
        resource_type: i8,
        name: &str,
    ) -> Result<(), (kafka_protocol::error::ResponseError, String)> {
        use crate::config_change::RESOURCE_TOPIC;
        use kafka_protocol::error::ResponseError;
        match resource_type {
            RESOURCE_TOPIC if !self.topic(op, name) => {
                Err((ResponseError::TopicAuthorizationFailed, "Topic authorization failed.".into()))
            }
            RESOURCE_TOPIC => Ok(()),
            crate::config_change::RESOURCE_GROUP if !self.group(op, name) => {
                Err((ResponseError::GroupAuthorizationFailed, "Group authorization failed.".into()))
            }
            crate::config_change::RESOURCE_GROUP => Ok(()),
            _ if !self.cluster(op) => {
                Err((ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed.".into()))
            }
            _ => Ok(()),
        }
    }

    /// Kafka's rule for creating a topic: CREATE on the cluster or on the topic.
    pub fn create_topic(&self, name: &str) -> bool {
        self.cluster(Operation::Create) || self.topic(Operation::Create, name)
    }
}
