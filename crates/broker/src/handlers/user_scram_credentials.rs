//! AlterUserScramCredentials (key 51) and DescribeUserScramCredentials (key 50): SCRAM
//! credentials in the metadata log, what `kafka-configs.sh --entity-type users
//! --alter --add-config 'SCRAM-SHA-512=[password=...]'` uses. The client sends the salted
//! password; the broker keeps the salt, the iterations and the keys derived from it, checked
//! as Kafka checks them (iterations in [4096, 16384], one change per user and mechanism, no
//! deletion of what does not exist), each user answered on its own.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use runnel_security::scram::{ITERATIONS_MAX, ITERATIONS_MIN};
use runnel_security::{ScramCredential, ScramMechanism};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

type Refusal = (ResponseError, &'static str);

/// A change's mechanism, or why it is refused.
fn mechanism(user: &str, code: i8) -> Result<ScramMechanism, Refusal> {
    let m =
        ScramMechanism::from_code(code).ok_or((ResponseError::UnsupportedSaslMechanism, "Unknown SCRAM mechanism"))?;
    if user.is_empty() {
        return Err((ResponseError::UnacceptableCredential, "Username must not be empty"));
    }
    Ok(m)
}

pub fn alter(b: &Arc<Broker>, r: AlterUserScramCredentialsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let allowed = ctx.access.cluster(Operation::Alter);
    // The first refusal of each user; users with none are changed together.
    let mut refused: BTreeMap<String, Refusal> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut users = Vec::new();
    // Records the user and the outcome of its checks; the mechanism when it passed them.
    let mut admit = |user: &str, code: i8, checked: Result<ScramMechanism, Refusal>| {
        users.push(user.to_string());
        let twice = !seen.insert((user.to_string(), code));
        let checked = checked.and_then(|m| match twice {
            _ if !allowed => Err((ResponseError::ClusterAuthorizationFailed, "Cluster authorization failed.")),
            true => {
                Err((ResponseError::DuplicateResource, "A user credential cannot be altered twice in the same request"))
            }
            false => Ok(m),
        });
        checked.map_err(|e| refused.entry(user.to_string()).or_insert(e)).ok()
    };
    let controller = b.controller();
    let mut deletes = Vec::new();
    for d in &r.deletions {
        let user = d.name.to_string();
        let checked = mechanism(&user, d.mechanism).and_then(|m| match controller.scram_credential(&user, m) {
            Some(_) => Ok(m),
            None => Err((ResponseError::ResourceNotFound, "Attempt to delete a user credential that does not exist")),
        });
        if let Some(m) = admit(&user, d.mechanism, checked) {
            deletes.push((user, m));
        }
    }
    let mut upserts = Vec::new();
    for u in &r.upsertions {
        let user = u.name.to_string();
        let checked = mechanism(&user, u.mechanism).and_then(|m| match u.iterations {
            i if i < ITERATIONS_MIN => Err((ResponseError::UnacceptableCredential, "Too few iterations")),
            i if i > ITERATIONS_MAX => Err((ResponseError::UnacceptableCredential, "Too many iterations")),
            _ if u.salt.is_empty() || u.salted_password.is_empty() => {
                Err((ResponseError::UnacceptableCredential, "Salt and salted password must not be empty"))
            }
            _ => Ok(m),
        });
        if let Some(m) = admit(&user, u.mechanism, checked) {
            upserts.push((user, m, ScramCredential::new(m, &u.salt, u.iterations, &u.salted_password)));
        }
    }
    deletes.retain(|(user, _)| !refused.contains_key(user));
    upserts.retain(|(user, _, _)| !refused.contains_key(user));
    let b = b.clone();
    Box::pin(async move {
        let outcome = if deletes.is_empty() && upserts.is_empty() {
            Ok(())
        } else {
            b.controller().alter_scram(upserts, deletes).await
        };
        let mut answered = HashSet::new();
        let results = users
            .into_iter()
            .filter(|u| answered.insert(u.clone()))
            .map(|user| {
                let (code, message) = match (refused.get(&user), &outcome) {
                    (Some((e, m)), _) => (e.code(), Some(m.to_string())),
                    (None, Err((e, m))) => (e.code(), Some(m.clone())),
                    (None, Ok(())) => (0, None),
                };
                AlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(&user))
                    .with_error_code(code)
                    .with_error_message(message.map(|m| str_bytes(&m)))
            })
            .collect();
        Some(AlterUserScramCredentialsResponse::default().with_results(results).into())
    })
}

pub fn describe(b: &Arc<Broker>, r: DescribeUserScramCredentialsRequest, _v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::Describe) {
        return now(DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("Cluster authorization failed."))));
    }
    let all = b.controller().scram_users();
    let info = |creds: &Vec<(ScramMechanism, i32)>| {
        creds.iter().map(|(m, i)| CredentialInfo::default().with_mechanism(m.code()).with_iterations(*i)).collect()
    };
    let results = match r.users.filter(|u| !u.is_empty()) {
        None => all
            .iter()
            .map(|(user, creds)| {
                DescribeUserScramCredentialsResult::default()
                    .with_user(str_bytes(user))
                    .with_credential_infos(info(creds))
            })
            .collect(),
        Some(names) => {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for n in &names {
                *counts.entry(n.name.to_string()).or_default() += 1;
            }
            let mut answered = HashSet::new();
            names
                .iter()
                .map(|n| n.name.to_string())
                .filter(|u| answered.insert(u.clone()))
                .map(|user| {
                    let out = DescribeUserScramCredentialsResult::default().with_user(str_bytes(&user));
                    let refuse = |e: ResponseError, m: &str| {
                        out.clone().with_error_code(e.code()).with_error_message(Some(str_bytes(m)))
                    };
                    if counts[&user] > 1 {
                        refuse(
                            ResponseError::DuplicateResource,
                            "Cannot describe SCRAM credentials for the same user twice in a single request",
                        )
                    } else {
                        match all.get(&user) {
                            Some(creds) => out.clone().with_credential_infos(info(creds)),
                            None => refuse(
                                ResponseError::ResourceNotFound,
                                "Attempt to describe a user credential that does not exist",
                            ),
                        }
                    }
                })
                .collect()
        }
    };
    now(DescribeUserScramCredentialsResponse::default().with_results(results))
}
