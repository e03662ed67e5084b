//! CreateAcls (key 30), DescribeAcls (29) and DeleteAcls (31): the ACLs in the metadata
//! log, what `kafka-acls.sh` and Admin.createAcls/describeAcls/deleteAcls use. Without an
//! authorizer they answer SECURITY_DISABLED, as Kafka does; changing ACLs takes ALTER on the
//! cluster and listing them DESCRIBE.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use runnel_security::acl::{AclBinding, AclFilter, Operation};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};

/// A DescribeAcls or DeleteAcls filter from the request's fields (the two messages name
/// them alike).
macro_rules! filter_of {
    ($f:expr) => {
        AclFilter::from_request(
            $f.resource_type_filter,
            $f.resource_name_filter.as_deref(),
            $f.pattern_type_filter,
            $f.principal_filter.as_deref(),
            $f.host_filter.as_deref(),
            $f.operation,
            $f.permission_type,
        )
    };
}

/// Why the whole request is refused, if it is: no authorizer, or no right to do it.
fn refusal(b: &Broker, ctx: &Ctx, op: Operation) -> Option<(ResponseError, String)> {
    if b.authorizer.is_none() {
        return Some((ResponseError::SecurityDisabled, "No Authorizer is configured.".into()));
    }
    (!ctx.access.cluster(op))
        .then(|| (ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed.".into()))
}

pub fn create(b: &Arc<Broker>, r: CreateAclsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let refused = refusal(b, ctx, Operation::Alter);
    let checked: Vec<Result<AclBinding, (ResponseError, String)>> = r
        .creations
        .iter()
        .map(|c| match &refused {
            Some(e) => Err(e.clone()),
            None => AclBinding::from_request(
                c.resource_type,
                &c.resource_name,
                c.resource_pattern_type,
                &c.principal,
                &c.host,
                c.operation,
                c.permission_type,
            )
            .map_err(|m| (ResponseError::InvalidRequest, m)),
        })
        .collect();
    let creates: Vec<AclBinding> = checked.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
    let b = b.clone();
    Box::pin(async move {
        let outcome = match creates.is_empty() {
            true => Ok(()),
            false => b.controller().alter_acls(creates, Vec::new()).await,
        };
        let results = checked
            .into_iter()
            .map(|c| {
                let (code, message) = match (c, &outcome) {
                    (Err((e, m)), _) => (e.code(), Some(m)),
                    (Ok(_), Err((e, m))) => (e.code(), Some(m.clone())),
                    (Ok(_), Ok(())) => (0, None),
                };
                AclCreationResult::default().with_error_code(code).with_error_message(message.map(|m| str_bytes(&m)))
            })
            .collect();
        Some(CreateAclsResponse::default().with_results(results).into())
    })
}

pub fn describe(b: &Arc<Broker>, r: DescribeAclsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let fail = |e: ResponseError, m: String| {
        now(DescribeAclsResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(&m))))
    };
    if let Some((e, m)) = refusal(b, ctx, Operation::Describe) {
        return fail(e, m);
    }
    let filter = match filter_of!(r) {
        Ok(f) => f,
        Err(m) => return fail(ResponseError::InvalidRequest, m),
    };
    // Grouped by resource pattern, as Kafka answers.
    let mut resources: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for a in b.controller().acls().iter().filter(|a| filter.matches(a)) {
        resources.entry((a.resource_type.code(), a.name.clone(), a.pattern.code())).or_default().push(
            AclDescription::default()
                .with_principal(str_bytes(&a.principal))
                .with_host(str_bytes(&a.host))
                .with_operation(a.operation.code())
                .with_permission_type(a.permission.code()),
        );
    }
    let resources = resources
        .into_iter()
        .map(|((t, name, pattern), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(t)
                .with_resource_name(str_bytes(&name))
                .with_pattern_type(pattern)
                .with_acls(acls)
        })
        .collect();
    now(DescribeAclsResponse::default().with_resources(resources))
}

pub fn delete(b: &Arc<Broker>, r: DeleteAclsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let refused = refusal(b, ctx, Operation::Alter);
    let acls = b.controller().acls();
    // Each filter's matches, or why it is refused; a binding two filters match is deleted once.
    let matched: Vec<Result<Vec<AclBinding>, (ResponseError, String)>> = r
        .filters
        .iter()
        .map(|f| {
            if let Some(e) = &refused {
                return Err(e.clone());
            }
            filter_of!(f)
                .map(|f| acls.iter().filter(|a| f.matches(a)).cloned().collect())
                .map_err(|m| (ResponseError::InvalidRequest, m))
        })
        .collect();
    let mut deletes: Vec<AclBinding> = matched.iter().flatten().flatten().cloned().collect();
    deletes.sort();
    deletes.dedup();
    let b = b.clone();
    Box::pin(async move {
        let outcome = match deletes.is_empty() {
            true => Ok(()),
            false => b.controller().alter_acls(Vec::new(), deletes).await,
        };
        let filter_results = matched
            .into_iter()
            .map(|m| match (m, &outcome) {
                (Err((e, msg)), _) => DeleteAclsFilterResult::default()
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(&msg))),
                (Ok(_), Err((e, msg))) => {
                    DeleteAclsFilterResult::default().with_error_code(e.code()).with_error_message(Some(str_bytes(msg)))
                }
                (Ok(found), Ok(())) => DeleteAclsFilterResult::default().with_matching_acls(
                    found
                        .iter()
                        .map(|a| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(a.resource_type.code())
                                .with_resource_name(str_bytes(&a.name))
                                .with_pattern_type(a.pattern.code())
                                .with_principal(str_bytes(&a.principal))
                                .with_host(str_bytes(&a.host))
                                .with_operation(a.operation.code())
                                .with_permission_type(a.permission.code())
                        })
                        .collect(),
                ),
            })
            .collect();
        Some(DeleteAclsResponse::default().with_filter_results(filter_results).into())
    })
}
