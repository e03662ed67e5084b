//! SASL on a listener, configured as Kafka configures it: `sasl.enabled.mechanisms`, and
//! for PLAIN the users of the listener's JAAS configuration
//! (`listener.name.<name>.plain.sasl.jaas.config`, Kafka's `PlainLoginModule` with one
//! `user_<name>="<password>"` option per user); SCRAM-SHA-256 and SCRAM-SHA-512 with the
//! credentials of the metadata log ([`crate::scram`]). OAUTHBEARER is to come.
//!
//! A failed login says only that it failed (never whether the user exists), passwords are
//! compared in constant time, and neither passwords nor tokens are logged.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};

use crate::login::constant_time_eq;
pub use crate::login::LoginError;
use crate::scram::{ScramCredential, ScramLogin, ScramMechanism};

/// A user's SCRAM credential for a mechanism, from wherever credentials are kept.
pub type ScramLookup = Arc<dyn Fn(&str, ScramMechanism) -> Option<ScramCredential> + Send + Sync>;

/// The longest PLAIN token accepted (authzid, user name and password with two NULs).
pub const PLAIN_TOKEN_BYTES_MAX: usize = 4096;

/// What a listener's SASL accepts.
pub struct SaslServer {
    mechanisms: Vec<String>,
    /// PLAIN's users and their passwords.
    plain: HashMap<String, Vec<u8>>,
    scram: ScramLookup,
    oauth: Option<crate::oauth::OauthValidator>,
}

impl SaslServer {
    /// `mechanisms` is `sasl.enabled.mechanisms`; `jaas(mechanism)` the JAAS configuration
    /// for that mechanism on this listener; `scram` finds SCRAM credentials; `settings` are
    /// the listener's (OAUTHBEARER's `sasl.oauthbearer.*`).
    pub fn new(
        mechanisms: &str,
        jaas: &dyn Fn(&str) -> String,
        scram: ScramLookup,
        settings: &dyn Fn(&str) -> String,
    ) -> Result<SaslServer> {
        let mechanisms: Vec<String> =
            mechanisms.split(',').map(|m| m.trim().to_ascii_uppercase()).filter(|m| !m.is_empty()).collect();
        if mechanisms.is_empty() {
            bail!("sasl.enabled.mechanisms is empty");
        }
        let mut plain = HashMap::new();
        let mut oauth = None;
        for m in &mechanisms {
            match m.as_str() {
                "PLAIN" => plain = plain_users(&jaas("plain"))?,
                "OAUTHBEARER" => {
                    // The JWKS endpoint's trust, as Kafka takes it: ssl.truststore.* options
                    // of the OAuthBearerLoginModule line.
                    let line = jaas("oauthbearer");
                    let options = match line.trim().is_empty() {
                        true => Vec::new(),
                        false => module_options(
                            &line,
                            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
                            "oauthbearer",
                        )?,
                    };
                    oauth = Some(crate::oauth::OauthValidator::from_settings(settings, &options)?)
                }
                m if ScramMechanism::from_name(m).is_some() => {}
                other => bail!(
                    "sasl.enabled.mechanisms: {other} is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER are)"
                ),
            }
        }
        Ok(SaslServer { mechanisms, plain, scram, oauth })
    }

    /// The OAUTHBEARER validator, when the mechanism is enabled (its JWKS is refreshed).
    pub fn oauth(&self) -> Option<&crate::oauth::OauthValidator> {
        self.oauth.as_ref()
    }

    /// An OAUTHBEARER client's message: the principal, or why the token was refused (for
    /// the log; the client is told only that it failed).
    /// An OAUTHBEARER login: the principal and when the token expires (seconds).
    pub fn oauth_authenticate(&self, token: &[u8], now_s: i64) -> Result<(String, i64), String> {
        match &self.oauth {
            Some(v) if self.enabled("OAUTHBEARER") => v.login(token, now_s),
            _ => Err("OAUTHBEARER is not enabled".into()),
        }
    }

    /// The first round of a SCRAM login: the login to finish and the server's first
    /// message.
    pub fn scram_start(&self, mechanism: &str, token: &[u8]) -> Result<(ScramLogin, Vec<u8>), LoginError> {
        let m = ScramMechanism::from_name(mechanism)
            .filter(|_| self.enabled(mechanism))
            .ok_or(LoginError::Failed("Authentication failed: mechanism not enabled"))?;
        ScramLogin::start(m, token, &*self.scram)
    }

    /// The enabled mechanisms, as SaslHandshake lists them.
    pub fn mechanisms(&self) -> &[String] {
        &self.mechanisms
    }

    pub fn enabled(&self, mechanism: &str) -> bool {
        self.mechanisms.iter().any(|m| m == mechanism)
    }

    /// Checks one SaslAuthenticate token for `mechanism` (one round: PLAIN has one) and
    /// returns the principal, `User:<name>`.
    pub fn authenticate(&self, mechanism: &str, token: &[u8]) -> Result<String, LoginError> {
        const FAILED: LoginError = LoginError::Failed("Authentication failed: Invalid username or password");
        if mechanism != "PLAIN" || !self.enabled("PLAIN") {
            return Err(LoginError::Failed("Authentication failed: mechanism not enabled"));
        }
        if token.len() > PLAIN_TOKEN_BYTES_MAX {
            return Err(FAILED);
        }
        // RFC 4616: [authzid] NUL authcid NUL passwd.
        let mut parts = token.split(|b| *b == 0);
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(LoginError::Failed("Authentication failed: invalid SASL/PLAIN request"));
        };
        let user = std::str::from_utf8(user).map_err(|_| FAILED)?;
        if !authzid.is_empty() && authzid != user.as_bytes() {
            return Err(LoginError::Failed(
                "Authentication failed: Client requested an authorization id that is different from username",
            ));
        }
        // The same work whether or not the user exists.
        let known = self.plain.get(user);
        let expected = known.map(Vec::as_slice).unwrap_or(b"\0no such user\0");
        if constant_time_eq(expected, password) && known.is_some() {
            Ok(format!("User:{user}"))
        } else {
            Err(FAILED)
        }
    }
}

/// The `user_<name>="<password>"` options of a PlainLoginModule JAAS configuration.
fn plain_users(jaas: &str) -> Result<HashMap<String, Vec<u8>>> {
    if jaas.trim().is_empty() {
        bail!("PLAIN needs listener.name.<listener>.plain.sasl.jaas.config with user_<name>=\"<password>\" options");
    }
    let mut users = HashMap::new();
    for (key, value) in module_options(jaas, "org.apache.kafka.common.security.plain.PlainLoginModule", "plain")? {
        if let Some(user) = key.strip_prefix("user_") {
            users.insert(user.to_string(), value.into_bytes());
        }
    }
    if users.is_empty() {
        bail!("plain.sasl.jaas.config: no user_<name>=\"<password>\" option");
    }
    Ok(users)
}

/// The options of a JAAS line for login module `module`: `<module> required key="value" ...;`.
pub(crate) fn module_options(jaas: &str, module: &str, what: &str) -> Result<Vec<(String, String)>> {
    let rest = jaas.trim().strip_prefix(module).ok_or_else(|| anyhow!("{what}.sasl.jaas.config: expected {module}"))?;
    let rest = rest.trim_start();
    let rest = ["required", "requisite", "sufficient", "optional"]
        .iter()
        .find_map(|flag| rest.strip_prefix(flag))
        .ok_or_else(|| anyhow!("{what}.sasl.jaas.config: expected a control flag (required) after the module"))?;
    let body = rest.trim().strip_suffix(';').ok_or_else(|| anyhow!("{what}.sasl.jaas.config: must end with ';'"))?;
    jaas_options(body)
}

/// `key="value" key=value ...`: JAAS options, values quoted (with \" and \\ escapes) or bare.
fn jaas_options(mut s: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start();
        if s.is_empty() {
            return Ok(out);
        }
        let eq = s.find('=').ok_or_else(|| anyhow!("sasl.jaas.config: option without '=' near '{}'", clip(s)))?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].trim_start();
        let value = if let Some(quoted) = s.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => bail!("sasl.jaas.config: unfinished escape"),
                    },
                    Some((_, c)) => value.push(c),
                    None => bail!("sasl.jaas.config: unterminated quote after {key}="),
                }
            };
            s = &quoted[end + 1..];
            value
        } else {
            let end = s.find(char::is_whitespace).unwrap_or(s.len());
            let value = s[..end].to_string();
            s = &s[end..];
            value
        };
        out.push((key, value));
    }
}

fn clip(s: &str) -> &str {
    let end = s.char_indices().nth(20).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="al\"ice" user_bob=bob-pw;"#;

    fn no_scram() -> ScramLookup {
        Arc::new(|_: &str, _| None)
    }

    fn server() -> SaslServer {
        SaslServer::new("PLAIN", &|m| if m == "plain" { JAAS.to_string() } else { String::new() }, no_scram(), &|_| {
            String::new()
        })
        .expect("valid")
    }

    #[test]
    fn plain_logins_take_the_jaas_users_and_nothing_else() {
        let s = server();
        assert_eq!(s.mechanisms(), ["PLAIN"]);
        assert_eq!(s.authenticate("PLAIN", b"\0alice\0al\"ice"), Ok("User:alice".into()));
        assert_eq!(s.authenticate("PLAIN", b"bob\0bob\0bob-pw"), Ok("User:bob".into()));
        let failed = Err(LoginError::Failed("Authentication failed: Invalid username or password"));
        // A wrong password and an unknown user read the same.
        assert_eq!(s.authenticate("PLAIN", b"\0alice\0wrong"), failed);
        assert_eq!(s.authenticate("PLAIN", b"\0mallory\0admin-secret"), failed);
        assert_eq!(
            s.authenticate("PLAIN", b"\0alice\0al\"ice\0"),
            Err(LoginError::Failed("Authentication failed: invalid SASL/PLAIN request"))
        );
        assert!(s.authenticate("PLAIN", b"admin\0alice\0al\"ice").is_err(), "another authorization id");
        assert!(s.authenticate("PLAIN", &vec![b'a'; PLAIN_TOKEN_BYTES_MAX + 1]).is_err());
        assert!(s.authenticate("SCRAM-SHA-256", b"\0alice\0al\"ice").is_err());
        assert!(s.authenticate("PLAIN", b"").is_err());
    }

    #[test]
    fn configurations_that_cannot_work_are_refused() {
        let jaas = |text: &'static str| move |_: &str| text.to_string();
        assert!(SaslServer::new("GSSAPI", &jaas(JAAS), no_scram(), &|_| String::new()).is_err());
        assert!(SaslServer::new("", &jaas(JAAS), no_scram(), &|_| String::new()).is_err());
        assert!(SaslServer::new("SCRAM-SHA-512,SCRAM-SHA-256", &jaas(""), no_scram(), &|_| String::new()).is_ok());
        assert!(SaslServer::new("PLAIN", &jaas(""), no_scram(), &|_| String::new()).is_err());
        assert!(SaslServer::new("PLAIN", &jaas("com.example.Other required user_a=\"b\";"), no_scram(), &|_| {
            String::new()
        })
        .is_err());
        assert!(SaslServer::new(
            "PLAIN",
            &jaas("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\";"),
            no_scram(),
            &|_| String::new()
        )
        .is_err());
        assert!(SaslServer::new(
            "PLAIN",
            &jaas("org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b"),
            no_scram(),
            &|_| String::new()
        )
        .is_err());
    }
}
