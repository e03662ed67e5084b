//! Access control lists with the semantics of Kafka's StandardAuthorizer: bindings of a
//! resource pattern (literal, `*`, or prefixed) to a principal, a host, an operation and
//! ALLOW or DENY. A DENY that matches beats any ALLOW; READ, WRITE, DELETE and ALTER imply
//! DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS; `super.users` pass every check; a
//! resource with no ACL at all is open only when `allow.everyone.if.no.acl.found` is set.
//!
//! The codes are the Kafka protocol's (CreateAcls, DescribeAcls, DeleteAcls).

use serde::{Deserialize, Serialize};

/// A resource type (CreateAcls `resource_type`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
    DelegationToken,
    User,
}

impl ResourceType {
    pub const ALL: [ResourceType; 6] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
        ResourceType::DelegationToken,
        ResourceType::User,
    ];

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
            ResourceType::User => 7,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        Self::ALL.into_iter().find(|t| t.code() == code)
    }
}

/// How a binding's resource name matches (LITERAL: the name, or every name when it is `*`;
/// PREFIXED: every name that starts with it).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<PatternType> {
        [PatternType::Literal, PatternType::Prefixed].into_iter().find(|p| p.code() == code)
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
    TwoPhaseCommit,
}

impl Operation {
    const EVERY: [Operation; 14] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::CreateTokens,
        Operation::DescribeTokens,
        Operation::TwoPhaseCommit,
    ];

    pub fn code(self) -> i8 {
        Self::EVERY.iter().position(|o| *o == self).map_or(0, |i| i as i8 + 2)
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        usize::try_from(code).ok().and_then(|c| c.checked_sub(2)).and_then(|i| Self::EVERY.get(i).copied())
    }

    /// Whether an ALLOW of `self` allows `wanted` (Kafka's implied operations).
    fn allows(self, wanted: Operation) -> bool {
        self == wanted
            || self == Operation::All
            || (wanted == Operation::Describe
                && matches!(self, Operation::Read | Operation::Write | Operation::Delete | Operation::Alter))
            || (wanted == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a DENY of `self` denies `wanted` (no implications but ALL).
    fn denies(self, wanted: Operation) -> bool {
        self == wanted || self == Operation::All
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Permission> {
        [Permission::Deny, Permission::Allow].into_iter().find(|p| p.code() == code)
    }
}

/// The name of the one cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// Every name (a literal pattern), every principal (`User:*`), every host.
pub const WILDCARD: &str = "*";
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// One ACL.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Builds a binding from CreateAcls' codes, or says why Kafka would refuse it.
    #[allow(clippy::too_many_arguments)]
    pub fn from_request(
        resource_type: i8,
        name: &str,
        pattern: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, String> {
        let resource_type = ResourceType::from_code(resource_type)
            .ok_or_else(|| format!("Invalid resource type {resource_type}: must be a concrete type"))?;
        let pattern = PatternType::from_code(pattern)
            .ok_or_else(|| format!("Invalid pattern type {pattern}: must be LITERAL or PREFIXED"))?;
        let operation = Operation::from_code(operation)
            .ok_or_else(|| format!("Invalid operation {operation}: must be a concrete operation"))?;
        let permission = Permission::from_code(permission)
            .ok_or_else(|| format!("Invalid permission type {permission}: must be ALLOW or DENY"))?;
        if name.is_empty() {
            return Err("Resource name must not be empty".into());
        }
        if resource_type == ResourceType::Cluster && name != CLUSTER_NAME {
            return Err(format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        if pattern == PatternType::Prefixed && name == WILDCARD {
            return Err("A prefixed pattern cannot be the wildcard *".into());
        }
        match principal.split_once(':') {
            Some((kind, who)) if !kind.is_empty() && !who.is_empty() => {}
            _ => return Err(format!("Could not parse principal from `{principal}` (expected `Type:name`)")),
        }
        if host.is_empty() {
            return Err("Host must not be empty".into());
        }
        Ok(AclBinding {
            resource_type,
            name: name.to_string(),
            pattern,
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        })
    }

    /// Whether this binding's pattern covers the resource `name` of type `t`.
    fn covers(&self, t: ResourceType, name: &str) -> bool {
        self.resource_type == t
            && match self.pattern {
                PatternType::Literal => self.name == name || self.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&self.name),
            }
    }

    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == host || self.host == WILDCARD)
    }
}

/// A DescribeAcls or DeleteAcls filter: each field matches anything when None (ANY), and
/// the pattern may also be MATCH (every pattern that covers the name).
#[derive(Clone, Debug)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternFilter {
    Any,
    Match,
    Exactly(PatternType),
}

impl AclFilter {
    /// Builds a filter from the request's codes (ANY = 1; MATCH = 2 for patterns), or says
    /// why it is invalid.
    #[allow(clippy::too_many_arguments)]
    pub fn from_request(
        resource_type: i8,
        name: Option<&str>,
        pattern: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, String> {
        let resource_type = match resource_type {
            1 => None,
            t => Some(ResourceType::from_code(t).ok_or_else(|| format!("Invalid resource type filter {t}"))?),
        };
        let pattern = match pattern {
            1 => PatternFilter::Any,
            2 => PatternFilter::Match,
            p => PatternFilter::Exactly(
                PatternType::from_code(p).ok_or_else(|| format!("Invalid pattern type filter {p}"))?,
            ),
        };
        let operation = match operation {
            1 => None,
            o => Some(Operation::from_code(o).ok_or_else(|| format!("Invalid operation filter {o}"))?),
        };
        let permission = match permission {
            1 => None,
            p => Some(Permission::from_code(p).ok_or_else(|| format!("Invalid permission type filter {p}"))?),
        };
        Ok(AclFilter {
            resource_type,
            name: name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation,
            permission,
        })
    }

    pub fn matches(&self, b: &AclBinding) -> bool {
        let name_ok = match (&self.name, self.pattern) {
            (None, _) => true,
            // MATCH: the bindings that would apply to a resource of this name.
            (Some(n), PatternFilter::Match) => match b.pattern {
                PatternType::Literal => b.name == *n || b.name == WILDCARD,
                PatternType::Prefixed => n.starts_with(&b.name),
            },
            (Some(n), _) => b.name == *n,
        };
        let pattern_ok = match self.pattern {
            PatternFilter::Any | PatternFilter::Match => true,
            PatternFilter::Exactly(p) => b.pattern == p,
        };
        self.resource_type.is_none_or(|t| t == b.resource_type)
            && name_ok
            && pattern_ok
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && self.operation.is_none_or(|o| o == b.operation)
            && self.permission.is_none_or(|p| p == b.permission)
    }
}

/// The broker's authorization settings: `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub super_users: Vec<String>,
    pub allow_if_no_acl: bool,
}

impl Policy {
    /// `super.users` is a `;`-separated list of principals, as Kafka takes it.
    pub fn new(super_users: &str, allow_if_no_acl: bool) -> Policy {
        let super_users = super_users.split(';').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
        Policy { super_users, allow_if_no_acl }
    }

    /// Whether `principal`, connected from `host`, may do `op` on the resource.
    pub fn authorize(
        &self,
        acls: &[AclBinding],
        principal: &str,
        host: &str,
        op: Operation,
        t: ResourceType,
        name: &str,
    ) -> bool {
        if self.super_users.iter().any(|s| s == principal) {
            return true;
        }
        let mut any_on_resource = false;
        let mut allowed = false;
        for b in acls.iter().filter(|b| b.covers(t, name)) {
            any_on_resource = true;
            if !b.applies_to(principal, host) {
                continue;
            }
            match b.permission {
                Permission::Deny if b.operation.denies(op) => return false,
                Permission::Allow if b.operation.allows(op) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_on_resource && self.allow_if_no_acl)
    }

    /// Whether `principal` may do `op` on some resource of type `t` (Kafka's
    /// authorizeByResourceType, which lets an idempotent producer in when it may write to
    /// some topic): an ALLOW of it on some pattern, and no DENY of it on every name.
    pub fn authorize_any(
        &self,
        acls: &[AclBinding],
        principal: &str,
        host: &str,
        op: Operation,
        t: ResourceType,
    ) -> bool {
        if self.super_users.iter().any(|s| s == principal) {
            return true;
        }
        let applicable = || acls.iter().filter(|b| b.resource_type == t && b.applies_to(principal, host));
        let denied_everywhere = applicable().any(|b| {
            b.permission == Permission::Deny
                && b.operation.denies(op)
                && b.pattern == PatternType::Literal
                && b.name == WILDCARD
        });
        if denied_everywhere {
            return false;
        }
        let allowed = applicable().any(|b| b.permission == Permission::Allow && b.operation.allows(op));
        allowed || (self.allow_if_no_acl && !acls.iter().any(|b| b.resource_type == t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(t: ResourceType, name: &str, pattern: PatternType, who: &str, op: Operation, p: Permission) -> AclBinding {
        AclBinding {
            resource_type: t,
            name: name.into(),
            pattern,
            principal: who.into(),
            host: "*".into(),
            operation: op,
            permission: p,
        }
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn codes_round_trip() {
        for op in Operation::EVERY {
            assert_eq!(Operation::from_code(op.code()), Some(op));
        }
        assert_eq!(Read.code(), 3);
        assert_eq!(TwoPhaseCommit.code(), 15);
        assert_eq!(Operation::from_code(1), None);
        assert_eq!(Operation::from_code(-5), None);
        for t in ResourceType::ALL {
            assert_eq!(ResourceType::from_code(t.code()), Some(t));
        }
    }

    #[test]
    fn deny_beats_allow_and_implications_hold() {
        let policy = Policy::default();
        let acls = vec![
            acl(Topic, "orders", Literal, "User:alice", Read, Allow),
            acl(Topic, "pay", Prefixed, "User:alice", Write, Allow),
            acl(Topic, "payroll", Literal, "User:alice", Write, Deny),
            acl(Topic, "*", Literal, "User:bob", AlterConfigs, Allow),
        ];
        let ok = |who, op, name| policy.authorize(&acls, who, "10.0.0.1", op, Topic, name);
        assert!(ok("User:alice", Read, "orders"));
        assert!(ok("User:alice", Describe, "orders"), "READ implies DESCRIBE");
        assert!(!ok("User:alice", Write, "orders"));
        assert!(ok("User:alice", Write, "payments"), "prefixed");
        assert!(!ok("User:alice", Write, "payroll"), "DENY beats ALLOW");
        assert!(ok("User:alice", Describe, "payroll"), "a DENY of WRITE does not deny DESCRIBE");
        assert!(ok("User:bob", DescribeConfigs, "anything"), "ALTER_CONFIGS implies DESCRIBE_CONFIGS");
        assert!(!ok("User:bob", Read, "orders"));
        assert!(!ok("User:carol", Describe, "orders"));
    }

    #[test]
    fn no_acl_found_super_users_hosts_and_wildcard_principals() {
        let acls = vec![
            acl(Group, "g", Literal, "User:*", Read, Allow),
            AclBinding { host: "10.0.0.9".into(), ..acl(Topic, "t", Literal, "User:alice", All, Deny) },
        ];
        let strict = Policy::new("User:admin; User:broker", false);
        let open = Policy::new("", true);
        assert!(strict.authorize(&acls, "User:anyone", "h", Read, Group, "g"));
        assert!(!strict.authorize(&acls, "User:anyone", "h", Read, Group, "other"));
        assert!(open.authorize(&acls, "User:anyone", "h", Read, Group, "other"), "no ACL on it");
        assert!(!open.authorize(&acls, "User:anyone", "h", Write, Group, "g"), "an ACL exists on g");
        assert!(strict.authorize(&acls, "User:admin", "h", Alter, Cluster, CLUSTER_NAME));
        assert!(!open.authorize(&acls, "User:alice", "10.0.0.9", Read, Topic, "t"));
        assert!(!open.authorize(&acls, "User:alice", "10.0.0.8", Read, Topic, "t"), "t has an ACL");
    }

    #[test]
    fn idempotent_writes_by_resource_type() {
        let policy = Policy::default();
        let acls = vec![acl(Topic, "orders", Literal, "User:alice", Write, Allow)];
        assert!(policy.authorize_any(&acls, "User:alice", "h", Write, Topic));
        assert!(!policy.authorize_any(&acls, "User:bob", "h", Write, Topic));
        let mut denied = acls.clone();
        denied.push(acl(Topic, "*", Literal, "User:alice", Write, Deny));
        assert!(!policy.authorize_any(&denied, "User:alice", "h", Write, Topic));
    }

    #[test]
    fn requests_are_checked_and_filters_match() {
        let b = AclBinding::from_request(2, "orders", 3, "User:alice", "*", 3, 3).expect("valid");
        assert_eq!(b.operation, Read);
        assert!(AclBinding::from_request(1, "orders", 3, "User:alice", "*", 3, 3).is_err(), "ANY type");
        assert!(AclBinding::from_request(2, "orders", 2, "User:alice", "*", 3, 3).is_err(), "MATCH pattern");
        assert!(AclBinding::from_request(2, "orders", 3, "alice", "*", 3, 3).is_err(), "principal");
        assert!(AclBinding::from_request(4, "c", 3, "User:alice", "*", 7, 3).is_err(), "cluster name");
        assert!(AclBinding::from_request(2, "*", 4, "User:alice", "*", 3, 3).is_err(), "prefixed *");
        let any = AclFilter::from_request(1, None, 1, None, None, 1, 1).expect("any");
        assert!(any.matches(&b));
        let by_match = AclFilter::from_request(2, Some("orders"), 2, None, None, 1, 1).expect("match");
        let prefixed = AclBinding::from_request(2, "ord", 4, "User:alice", "*", 3, 3).expect("valid");
        assert!(by_match.matches(&b) && by_match.matches(&prefixed));
        let literal = AclFilter::from_request(2, Some("orders"), 3, None, None, 1, 1).expect("literal");
        assert!(literal.matches(&b) && !literal.matches(&prefixed));
        let deny = AclFilter::from_request(1, None, 1, None, None, 1, 2).expect("deny");
        assert!(!deny.matches(&b));
    }
}
