//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka serves them: credentials
//! (salt, iterations, stored key, server key; never the password) are set with
//! AlterUserScramCredentials and kept in the metadata log; a login is two
//! SaslAuthenticate rounds. An unknown user is answered with a made-up salt, so that the
//! login fails at the proof as a wrong password does and the answer does not tell whether
//! the user exists. Channel binding is not offered (`n,,` only), as in Kafka.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use serde::{Deserialize, Serialize};

use crate::login::{constant_time_eq, LoginError};

/// Kafka's bounds on a credential's iterations (AlterUserScramCredentials).
pub const ITERATIONS_MIN: i32 = 4096;
pub const ITERATIONS_MAX: i32 = 16384;
/// The longest SCRAM message accepted from a client.
pub const MESSAGE_BYTES_MAX: usize = 4096;

const FAILED: LoginError = LoginError::Failed(
    "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM",
);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    /// The mechanism's name in SaslHandshake and `sasl.enabled.mechanisms`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        [ScramMechanism::Sha256, ScramMechanism::Sha512].into_iter().find(|m| m.name() == name)
    }

    /// The number AlterUserScramCredentials and DescribeUserScramCredentials use.
    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<ScramMechanism> {
        [ScramMechanism::Sha256, ScramMechanism::Sha512].into_iter().find(|m| m.code() == code)
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        let alg = match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        };
        hmac::sign(&hmac::Key::new(alg, key), data).as_ref().to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        let alg = match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        };
        digest::digest(alg, data).as_ref().to_vec()
    }

    fn len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    /// Hi(password, salt, iterations) of RFC 5802: what a client sends as the salted
    /// password.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let alg = match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        };
        let mut out = vec![0u8; self.len()];
        let rounds = std::num::NonZeroU32::new(iterations.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(alg, rounds, salt, password, &mut out);
        out
    }
}

/// What the server keeps of a user's password for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: i32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// From the salted password AlterUserScramCredentials carries.
    pub fn new(mechanism: ScramMechanism, salt: &[u8], iterations: i32, salted_password: &[u8]) -> ScramCredential {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        }
    }
}

impl ScramCredential {
    /// Whether `password` is the one this credential was made from (in time independent of
    /// where the keys differ): the admin API's Basic authentication checks passwords
    /// against the users' SCRAM credentials.
    pub fn verifies(&self, mechanism: ScramMechanism, password: &[u8]) -> bool {
        let Ok(iterations) = u32::try_from(self.iterations) else { return false };
        let salted = mechanism.salted_password(password, &self.salt, iterations);
        let stored = mechanism.hash(&mechanism.hmac(&salted, b"Client Key"));
        stored.len() == self.stored_key.len()
            && stored.iter().zip(&self.stored_key).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }
}

fn random(n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    // The system's random source does not fail on Linux; a failure leaves zeros, which the
    // nonce's client part still makes unique per login.
    let _ = ring::rand::SystemRandom::new().fill(&mut out);
    out
}

/// `saslname` of RFC 5802: `=2C` is `,` and `=3D` is `=`.
fn decode_name(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// A login between its two rounds.
pub struct ScramLogin {
    mechanism: ScramMechanism,
    user: String,
    /// None for an unknown user: the login fails at the proof.
    credential: Option<ScramCredential>,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ScramLogin {
    /// The first round: the client's first message, and `lookup` for the user's
    /// credential. Returns the login and the server's first message.
    pub fn start(
        mechanism: ScramMechanism,
        client_first: &[u8],
        lookup: &dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>,
    ) -> Result<(ScramLogin, Vec<u8>), LoginError> {
        let invalid = LoginError::Failed("Authentication failed: invalid SCRAM client-first message");
        if client_first.len() > MESSAGE_BYTES_MAX {
            return Err(invalid);
        }
        let text = std::str::from_utf8(client_first).map_err(|_| invalid.clone())?;
        // gs2-header: n (no channel binding) or y, then an optional authzid.
        let mut parts = text.splitn(3, ',');
        let (Some(cb), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(invalid);
        };
        if cb != "n" && cb != "y" {
            return Err(LoginError::Failed("Authentication failed: channel binding is not supported"));
        }
        let mut user = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            match attr.split_once('=') {
                Some(("n", v)) => user = decode_name(v),
                Some(("r", v)) if !v.is_empty() => client_nonce = Some(v.to_string()),
                Some(("m", _)) => return Err(invalid),
                _ => {} // extensions (Kafka's tokenauth) are not used
            }
        }
        let (Some(user), Some(client_nonce)) = (user, client_nonce) else { return Err(invalid) };
        if let Some(a) = authzid.strip_prefix("a=") {
            if decode_name(a).as_deref() != Some(user.as_str()) {
                return Err(LoginError::Failed(
                    "Authentication failed: Client requested an authorization id that is different from username",
                ));
            }
        }
        let credential = lookup(&user, mechanism);
        let (salt, iterations) = match &credential {
            Some(c) => (c.salt.clone(), c.iterations),
            None => (random(16), ITERATIONS_MIN),
        };
        let nonce = format!("{client_nonce}{}", B64.encode(random(18)));
        let server_first = format!("r={nonce},s={},i={iterations}", B64.encode(salt));
        let login = ScramLogin {
            mechanism,
            user,
            credential,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
        };
        Ok((login, server_first.into_bytes()))
    }

    /// The second round: checks the client's proof; returns the principal (`User:<name>`)
    /// and the server's final message.
    pub fn finish(self, client_final: &[u8]) -> Result<(String, Vec<u8>), LoginError> {
        if client_final.len() > MESSAGE_BYTES_MAX {
            return Err(FAILED);
        }
        let text = std::str::from_utf8(client_final).map_err(|_| FAILED)?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or(FAILED)?;
        let mut channel = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            match attr.split_once('=') {
                Some(("c", v)) => channel = Some(v),
                Some(("r", v)) => nonce = Some(v),
                _ => {}
            }
        }
        // Without channel binding the client sends the gs2 header back: "n,," or "y,,".
        if !matches!(channel, Some("biws") | Some("eSws")) || nonce != Some(self.nonce.as_str()) {
            tracing::debug!(?channel, ?nonce, expected = %self.nonce, "SCRAM client-final refused");
            return Err(FAILED);
        }
        let proof = B64.decode(proof).map_err(|_| FAILED)?;
        let Some(credential) = self.credential else { return Err(FAILED) };
        let auth_message = format!("{},{},{}", self.client_first_bare, self.server_first, without_proof);
        let m = self.mechanism;
        let signature = m.hmac(&credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(FAILED);
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        if !constant_time_eq(&m.hash(&client_key), &credential.stored_key) {
            return Err(FAILED);
        }
        let server_signature = m.hmac(&credential.server_key, auth_message.as_bytes());
        Ok((format!("User:{}", self.user), format!("v={}", B64.encode(server_signature)).into_bytes()))
    }
}

/// A client's side of a login (RFC 5802): the client-final message for `server_first`,
/// and the server-final message a genuine server answers with. `salted` is the salted
/// password for the salt and iteration count the server names (computed when None, which
/// is what costs a client its time; a load generator keeps it).
pub fn client_final(
    m: ScramMechanism,
    password: &str,
    client_first_bare: &str,
    server_first: &str,
    salted: Option<&[u8]>,
) -> Result<(String, String), String> {
    let attrs: std::collections::HashMap<&str, &str> =
        server_first.split(',').filter_map(|a| a.split_once('=')).collect();
    let (Some(nonce), Some(salt), Some(iterations)) = (attrs.get("r"), attrs.get("s"), attrs.get("i")) else {
        return Err(format!("not a SCRAM server-first message: {server_first}"));
    };
    let salt = B64.decode(salt).map_err(|_| "bad salt".to_string())?;
    let iterations: u32 = iterations.parse().map_err(|_| "bad iteration count".to_string())?;
    let salted = match salted {
        Some(s) => s.to_vec(),
        None => m.salted_password(password.as_bytes(), &salt, iterations),
    };
    let client_key = m.hmac(&salted, b"Client Key");
    let stored_key = m.hash(&client_key);
    let without_proof = format!("c=biws,r={nonce}");
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let sig = m.hmac(&stored_key, auth.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
    let server_signature = m.hmac(&m.hmac(&salted, b"Server Key"), auth.as_bytes());
    Ok((format!("{without_proof},p={}", B64.encode(proof)), format!("v={}", B64.encode(server_signature))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_final(m: ScramMechanism, password: &str, client_first_bare: &str, server_first: &str) -> String {
        super::client_final(m, password, client_first_bare, server_first, None).expect("server-first").0
    }

    fn store(m: ScramMechanism, password: &str) -> impl Fn(&str, ScramMechanism) -> Option<ScramCredential> {
        let salt = b"0123456789abcdef".to_vec();
        let cred = ScramCredential::new(m, &salt, 4096, &m.salted_password(password.as_bytes(), &salt, 4096));
        move |user: &str, mech| (user == "alice" && mech == m).then(|| cred.clone())
    }

    #[test]
    fn a_credential_verifies_its_password_only() {
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let cred = store(m, "alice-secret")("alice", m).expect("credential");
            assert!(cred.verifies(m, b"alice-secret"));
            assert!(!cred.verifies(m, b"alice-secreT") && !cred.verifies(m, b""));
            let bad = ScramCredential { iterations: -1, ..cred.clone() };
            assert!(!bad.verifies(m, b"alice-secret"));
        }
    }

    #[test]
    fn a_login_with_the_right_password_succeeds_in_both_mechanisms() {
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let lookup = store(m, "alice-secret");
            let (login, server_first) = ScramLogin::start(m, b"n,,n=alice,r=abc123", &lookup).expect("first");
            let server_first = String::from_utf8(server_first).expect("utf8");
            assert!(server_first.starts_with("r=abc123") && server_first.ends_with(",i=4096"), "{server_first}");
            let (fin, expected) =
                super::client_final(m, "alice-secret", "n=alice,r=abc123", &server_first, None).expect("first");
            let (principal, server_final) = login.finish(fin.as_bytes()).expect("login");
            assert_eq!(principal, "User:alice");
            assert_eq!(server_final, expected.into_bytes(), "the client checks the server's signature");
        }
    }

    #[test]
    fn a_wrong_password_and_an_unknown_user_fail_alike_at_the_proof() {
        let m = ScramMechanism::Sha512;
        let lookup = store(m, "alice-secret");
        let (login, sf) = ScramLogin::start(m, b"n,,n=alice,r=x", &lookup).expect("first");
        let sf = String::from_utf8(sf).expect("utf8");
        assert_eq!(login.finish(client_final(m, "wrong", "n=alice,r=x", &sf).as_bytes()).err(), Some(FAILED));
        let (login, sf) = ScramLogin::start(m, b"n,,n=mallory,r=x", &lookup).expect("an unknown user gets a salt too");
        let sf = String::from_utf8(sf).expect("utf8");
        assert_eq!(login.finish(client_final(m, "alice-secret", "n=mallory,r=x", &sf).as_bytes()).err(), Some(FAILED));
        // The other mechanism's credential does not exist.
        let (login, sf) = ScramLogin::start(ScramMechanism::Sha256, b"n,,n=alice,r=x", &lookup).expect("first");
        let sf = String::from_utf8(sf).expect("utf8");
        let fin = client_final(ScramMechanism::Sha256, "alice-secret", "n=alice,r=x", &sf);
        assert!(login.finish(fin.as_bytes()).is_err());
    }

    #[test]
    fn malformed_messages_fail() {
        let m = ScramMechanism::Sha256;
        let lookup = store(m, "pw");
        for bad in
            [&b""[..], b"n,,", b"p=tls-unique,,n=alice,r=x", b"n,,n=alice", b"n,,r=x", b"n,,n=al=ZZice,r=x", b"\xff"]
        {
            assert!(ScramLogin::start(m, bad, &lookup).is_err(), "{bad:?}");
        }
        assert!(ScramLogin::start(m, b"n,a=bob,n=alice,r=x", &lookup).is_err(), "another authzid");
        assert!(ScramLogin::start(m, &vec![b'n'; MESSAGE_BYTES_MAX + 1], &lookup).is_err());
        let (login, _) = ScramLogin::start(m, b"n,,n=alice,r=x", &lookup).expect("first");
        assert!(login.finish(b"c=biws,r=wrong-nonce,p=AAAA").is_err());
        let (login, _) = ScramLogin::start(m, b"n,,n=alice,r=x", &lookup).expect("first");
        assert!(login.finish(b"no proof").is_err());
        assert_eq!(decode_name("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
    }
}
