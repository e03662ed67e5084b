//! The SASL exchange at the start of a connection on a SASL_PLAINTEXT or SASL_SSL
//! listener, as Kafka runs it: ApiVersions may come first, then SaslHandshake (v1) names
//! a mechanism, then SaslAuthenticate carries the tokens (one round for PLAIN, two for
//! SCRAM). Until a login succeeds nothing
//! else is served: any other request closes the connection, as does a frame larger than
//! `sasl.server.max.receive.size`, an unknown mechanism (after the answer listing the
//! enabled ones) and a failed login (after SASL_AUTHENTICATION_FAILED). SaslHandshake v0,
//! which is followed by raw tokens without Kafka framing, is not served.

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
    /// Send this answer, then close the connection.
    ReplyAndClose(ResponseKind, i16),
    /// Close the connection, for this reason (logged).
    Close(String),
}

impl Gate {
    pub fn new(server: Arc<SaslServer>, receive_bytes_max: usize) -> Gate {
        Gate { server, receive_bytes_max, state: State::Handshake }
    }

    /// Whether a frame of `size` bytes may be read now.
    pub fn admits(&self, size: usize) -> bool {
        matches!(self.state, State::Done) || size <= self.receive_bytes_max
    }

    /// Takes one request frame (without its size prefix).
    pub fn on_frame(&mut self, frame: &Bytes) -> Step {
        if matches!(self.state, State::Done) {
            return Step::Pass;
        }
        let (key, version) = (i16::from_be_bytes([frame[0], frame[1]]), i16::from_be_bytes([frame[2], frame[3]]));
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
        step
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
                            Ok(principal) => logged_in(principal, Vec::new()),
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
