//! The SASL exchange at the start of a connection on a SASL_PLAINTEXT or SASL_SSL
//! listener, as Kafka runs it: ApiVersions may come first, then SaslHandshake (v1) names
//! a mechanism, then SaslAuthenticate carries the tokens (one round for PLAIN, two for
//! SCRAM). Until a login succeeds nothing
//! else is served: any other request closes the connection, as does a frame larger than
//! `sasl.server.max.receive.size`, an unknown mechanism (after the answer listing the
//! enabled ones) and a failed login (after SASL_AUTHENTICATION_FAILED). SaslHandshake v0,
//! which is followed by raw tokens without Kafka framing, is not served.
//!
//! With `connections.max.reauth.ms` (KIP-368), a login lasts that long (an OAUTHBEARER one
//! no longer than its token): SaslAuthenticate says so in `session_lifetime_ms`, the client
//! logs in again on the same connection (SaslHandshake, SaslAuthenticate) before it ends,
//! with the same mechanism and as the same principal, and a request after the end closes
//! the connection.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::Decodable;
use runnel_security::{LoginError, SaslServer};

use crate::handlers::str_bytes;

/// Where a connection is in its login.
pub struct Gate {
    server: Arc<SaslServer>,
    receive_bytes_max: usize,
    state: State,
    /// connections.max.reauth.ms (0: logins do not expire).
    reauth_ms: i64,
    /// The mechanism of the login under way.
    mechanism: String,
    /// The login the connection has, once it has one.
    login: Option<Login>,
}

struct Login {
    principal: String,
    mechanism: String,
    expires: Option<std::time::Instant>,
}

enum State {
    Handshake,
    Authenticate(String),
    /// A SCRAM login between its rounds.
    ScramFinal(Box<runnel_security::ScramLogin>),
    /// An OAUTHBEARER token was refused and the client was sent the error; its next
    /// message (a lone 0x01, RFC 7628) gets SASL_AUTHENTICATION_FAILED.
    OauthRefused,
    Done,
}

/// What to do with one frame.
pub enum Step {
    /// Serve it as any request (ApiVersions, or anything once logged in).
    Pass,
    /// Send this answer (a response, as `encode` made it) and go on reading.
    Reply(ResponseKind, i16),
    /// Logged in as this principal: send the answer and go on.
    LoggedIn(ResponseKind, i16, String),
    /// The same, with the token's expiry in seconds (OAUTHBEARER); the gate makes it a
    /// `LoggedIn` with the session's lifetime in the answer.
    LoggedInUntil(ResponseKind, i16, String, i64),
    /// Send this answer, then close the connection.
    ReplyAndClose(ResponseKind, i16),
    /// Close the connection, for this reason (logged).
    Close(String),
}

impl Gate {
    pub fn new(server: Arc<SaslServer>, receive_bytes_max: usize, reauth_ms: i64) -> Gate {
        Gate { server, receive_bytes_max, state: State::Handshake, reauth_ms, mechanism: String::new(), login: None }
    }

    /// Whether a frame of `size` bytes may be read now.
    pub fn admits(&self, size: usize) -> bool {
        matches!(self.state, State::Done) || size <= self.receive_bytes_max
    }

    /// Takes one request frame (without its size prefix).
    pub fn on_frame(&mut self, frame: &Bytes) -> Step {
        let (key, version) = (i16::from_be_bytes([frame[0], frame[1]]), i16::from_be_bytes([frame[2], frame[3]]));
        if matches!(self.state, State::Done) {
            if key == ApiKey::SaslHandshake as i16 {
                // Re-authentication (KIP-368): the exchange again, on this connection.
                self.state = State::Handshake;
            } else if self.login.as_ref().and_then(|l| l.expires).is_some_and(|t| t <= std::time::Instant::now()) {
                return Step::Close(
                    "the login expired (connections.max.reauth.ms) before the client logged in again".into(),
                );
            } else {
                return Step::Pass;
            }
        }
        let key = match ApiKey::try_from(key) {
            Ok(ApiKey::ApiVersions) => return Step::Pass,
            Ok(k @ (ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)) => k,
            _ => return Step::Close(format!("API key {key} before authentication")),
        };
        if !crate::dispatch::supported(key, version) {
            return Step::Close(format!("unsupported version {version} of {key:?}"));
        }
        let mut body = frame.clone();
        if let Err(e) = RequestHeader::decode(&mut body, key.request_header_version(version)) {
            return Step::Close(format!("bad {key:?} header: {e}"));
        }
        let state = std::mem::replace(&mut self.state, State::Done);
        let (step, next) = self.step(key, version, body, state);
        self.state = next;
        if let (Step::Reply(..), State::Authenticate(m)) = (&step, &self.state) {
            self.mechanism = m.clone();
        }
        match step {
            Step::LoggedIn(resp, v, principal) => self.logged_in(resp, v, principal, None),
            Step::LoggedInUntil(resp, v, principal, exp_s) => self.logged_in(resp, v, principal, Some(exp_s)),
            other => other,
        }
    }

    /// A login succeeded: a re-authentication must keep the mechanism and the principal;
    /// the login lasts connections.max.reauth.ms, an OAUTHBEARER one no longer than its
    /// token, and the answer (v1+) says how long.
    fn logged_in(&mut self, mut resp: ResponseKind, v: i16, principal: String, exp_s: Option<i64>) -> Step {
        if let Some(before) = &self.login {
            if before.principal != principal || before.mechanism != self.mechanism {
                let resp = SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                    .with_error_message(Some(str_bytes(
                        "Cannot change principals or mechanisms during re-authentication",
                    )));
                return Step::ReplyAndClose(resp.into(), v);
            }
        }
        let mut lifetime_ms = self.reauth_ms.max(0);
        if let (Some(exp_s), true) = (exp_s, lifetime_ms > 0) {
            lifetime_ms = lifetime_ms.min((exp_s * 1000 - crate::now_ms()).max(0));
        }
        let expires =
            (lifetime_ms > 0).then(|| std::time::Instant::now() + std::time::Duration::from_millis(lifetime_ms as u64));
        if let (ResponseKind::SaslAuthenticate(r), true) = (&mut resp, v >= 1) {
            r.session_lifetime_ms = lifetime_ms;
        }
        self.login = Some(Login { principal: principal.clone(), mechanism: self.mechanism.clone(), expires });
        Step::LoggedIn(resp, v, principal)
    }

    fn step(&self, key: ApiKey, version: i16, mut body: Bytes, state: State) -> (Step, State) {
        let refused = |message: &str, state| {
            let resp = SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                .with_error_message(Some(str_bytes(message)));
            (Step::ReplyAndClose(resp.into(), version), state)
        };
        match (key, state) {
            (ApiKey::SaslHandshake, State::Handshake) => {
                if version < 1 {
                    return (
                        Step::Close("SaslHandshake v0 (unframed SASL tokens) is not supported".into()),
                        State::Handshake,
                    );
                }
                let req = match SaslHandshakeRequest::decode(&mut body, version) {
                    Ok(r) => r,
                    Err(e) => return (Step::Close(format!("bad SaslHandshake: {e}")), State::Handshake),
                };
                let mechanisms = self.server.mechanisms().iter().map(|m| str_bytes(m)).collect();
                let resp = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
                let mechanism = req.mechanism.to_string();
                if self.server.enabled(&mechanism) {
                    (Step::Reply(resp.into(), version), State::Authenticate(mechanism))
                } else {
                    let resp = resp.with_error_code(ResponseError::UnsupportedSaslMechanism.code());
                    (Step::ReplyAndClose(resp.into(), version), State::Handshake)
                }
            }
            (
                ApiKey::SaslAuthenticate,
                state @ (State::Authenticate(_) | State::ScramFinal(_) | State::OauthRefused),
            ) => {
                let req = match SaslAuthenticateRequest::decode(&mut body, version) {
                    Ok(r) => r,
                    Err(e) => return (Step::Close(format!("bad SaslAuthenticate: {e}")), state),
                };
                let logged_in = |principal, auth_bytes: Vec<u8>| {
                    let resp = SaslAuthenticateResponse::default().with_auth_bytes(auth_bytes.into());
                    (Step::LoggedIn(resp.into(), version, principal), State::Done)
                };
                match state {
                    State::Authenticate(m) if m == "PLAIN" => match self.server.authenticate(&m, &req.auth_bytes) {
                        Ok(principal) => logged_in(principal, Vec::new()),
                        Err(LoginError::Failed(message)) => refused(message, State::Authenticate(m)),
                    },
                    State::Authenticate(m) if m == "OAUTHBEARER" => {
                        match self.server.oauth_authenticate(&req.auth_bytes, crate::now_ms() / 1000) {
                            Ok((principal, exp_s)) => {
                                let resp = SaslAuthenticateResponse::default();
                                (Step::LoggedInUntil(resp.into(), version, principal, exp_s), State::Done)
                            }
                            Err(why) => {
                                tracing::info!(%why, "OAUTHBEARER token refused");
                                let resp = SaslAuthenticateResponse::default()
                                    .with_auth_bytes(Bytes::from_static(br#"{"status":"invalid_token"}"#));
                                (Step::Reply(resp.into(), version), State::OauthRefused)
                            }
                        }
                    }
                    State::OauthRefused => {
                        refused("Authentication failed: the OAUTHBEARER token is not valid", State::Handshake)
                    }
                    State::Authenticate(m) => match self.server.scram_start(&m, &req.auth_bytes) {
                        Ok((login, server_first)) => {
                            let resp = SaslAuthenticateResponse::default().with_auth_bytes(server_first.into());
                            (Step::Reply(resp.into(), version), State::ScramFinal(Box::new(login)))
                        }
                        Err(LoginError::Failed(message)) => refused(message, State::Authenticate(m)),
                    },
                    State::ScramFinal(login) => match login.finish(&req.auth_bytes) {
                        Ok((principal, server_final)) => logged_in(principal, server_final),
                        Err(LoginError::Failed(message)) => refused(message, State::Handshake),
                    },
                    other => (Step::Close("SaslAuthenticate out of turn".into()), other),
                }
            }
            (key, state) => (Step::Close(format!("{key:?} out of turn")), state),
        }
    }
}
