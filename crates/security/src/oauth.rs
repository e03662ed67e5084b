//! SASL/OAUTHBEARER (RFC 7628) with the checks of Kafka's
//! `OAuthBearerValidatorCallbackHandler`: the client's token is a JWT signed by a key of the
//! configured JWKS (`sasl.oauthbearer.jwks.endpoint.url`, an `https:` endpoint or a
//! `file:` URL, see `jwks`; refreshed every `sasl.oauthbearer.jwks.endpoint.refresh.ms`
//! and when a token names a key it does not hold), not expired
//! (with `sasl.oauthbearer.clock.skew.seconds`), from `sasl.oauthbearer.expected.issuer`,
//! for one of `sasl.oauthbearer.expected.audience`; its `sasl.oauthbearer.sub.claim.name`
//! claim names the principal. Unsigned tokens (`alg: none`, what Kafka's unsecured
//! validator takes) are refused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use anyhow::{anyhow, bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use ring::signature::{self, UnparsedPublicKey};
use runnel_sync::RwLockExt;
use serde_json::Value;

/// The longest token accepted, and the largest JWKS file read.
pub const TOKEN_BYTES_MAX: usize = 16 << 10;

/// One verification key of the JWKS.
struct Jwk {
    kid: Option<String>,
    key: PublicKey,
}

enum PublicKey {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (0x04 || x || y) on P-256 or P-384.
    Ec {
        curve: &'static str,
        point: Vec<u8>,
    },
}

/// What a listener checks tokens against.
pub struct OauthValidator {
    /// The JWKS as last fetched; replaced whole by a refresh.
    keys: RwLock<Arc<Vec<Jwk>>>,
    source: crate::jwks::Source,
    /// A token named a key id the JWKS lacks: the next refresh should come early.
    missing_key: AtomicBool,
    issuer: Option<String>,
    audience: Vec<String>,
    sub_claim: String,
    skew_s: i64,
}

impl OauthValidator {
    /// From the listener's settings (see [`crate::tls::Get`]) and the options of its
    /// OAuthBearerLoginModule JAAS line (the JWKS endpoint's trust store). Blocking: the
    /// JWKS is fetched now, and a listener whose JWKS cannot be had does not start.
    pub fn from_settings(get: &dyn Fn(&str) -> String, options: &[(String, String)]) -> Result<OauthValidator> {
        let url = get("sasl.oauthbearer.jwks.endpoint.url");
        if url.is_empty() {
            bail!("OAUTHBEARER needs sasl.oauthbearer.jwks.endpoint.url (https://... or file:///path/to/jwks.json)");
        }
        let source = crate::jwks::Source::parse(&url, options)?;
        let keys = parse_jwks(&source.fetch()?).with_context(|| format!("the JWKS at {url}"))?;
        let list = |s: String| s.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect::<Vec<_>>();
        let issuer = Some(get("sasl.oauthbearer.expected.issuer")).filter(|i| !i.is_empty());
        let sub_claim = Some(get("sasl.oauthbearer.sub.claim.name")).filter(|s| !s.is_empty()).unwrap_or("sub".into());
        let skew_s = get("sasl.oauthbearer.clock.skew.seconds").parse().unwrap_or(30);
        Ok(OauthValidator {
            keys: RwLock::new(Arc::new(keys)),
            source,
            missing_key: AtomicBool::new(false),
            issuer,
            audience: list(get("sasl.oauthbearer.expected.audience")),
            sub_claim,
            skew_s,
        })
    }

    /// Blocking: fetches the JWKS again and, if it holds usable keys, uses it from now on.
    /// Returns how many keys it holds.
    pub fn refresh(&self) -> Result<usize> {
        let keys = parse_jwks(&self.source.fetch()?)?;
        let n = keys.len();
        *self.keys.write_or_stop() = Arc::new(keys);
        self.missing_key.store(false, Ordering::Relaxed);
        Ok(n)
    }

    /// Whether a token named a key the JWKS lacks since the last refresh.
    pub fn missing_key(&self) -> bool {
        self.missing_key.load(Ordering::Relaxed)
    }

    /// Checks the client's first (and only) message; the principal, or why it failed.
    pub fn authenticate(&self, client_first: &[u8], now_s: i64) -> Result<String, String> {
        self.login(client_first, now_s).map(|(principal, _)| principal)
    }

    /// [`Self::authenticate`], with the token's expiry (its `exp` claim, in seconds).
    pub fn login(&self, client_first: &[u8], now_s: i64) -> Result<(String, i64), String> {
        if client_first.len() > TOKEN_BYTES_MAX {
            return Err("the token is too large".into());
        }
        let text = std::str::from_utf8(client_first).map_err(|_| "not UTF-8".to_string())?;
        // gs2-header, then key=value pairs separated by 0x01, ending in 0x01 0x01.
        let (gs2, rest) = text.split_once('\u{1}').ok_or("no kvpairs")?;
        if !(gs2.starts_with("n,") || gs2.starts_with("y,")) {
            return Err("channel binding is not supported".into());
        }
        let token = rest
            .split('\u{1}')
            .find_map(|kv| kv.strip_prefix("auth="))
            .and_then(|auth| auth.strip_prefix("Bearer ").or_else(|| auth.strip_prefix("bearer ")))
            .ok_or("no auth=Bearer token")?;
        self.validate(token.trim(), now_s)
    }

    fn validate(&self, token: &str, now_s: i64) -> Result<(String, i64), String> {
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err("not a signed JWT (three parts)".into());
        };
        let json = |part: &str| -> Result<BTreeMap<String, Value>, String> {
            let bytes = B64URL.decode(part).map_err(|_| "bad base64url".to_string())?;
            serde_json::from_slice(&bytes).map_err(|_| "bad JSON".to_string())
        };
        let header = json(h)?;
        let claims = json(p)?;
        let sig = B64URL.decode(s).map_err(|_| "bad signature encoding".to_string())?;
        let alg = header.get("alg").and_then(Value::as_str).ok_or("no alg")?;
        let kid = header.get("kid").and_then(Value::as_str);
        let signed = format!("{h}.{p}");
        let keys = self.keys.read_or_stop().clone();
        if kid.is_some_and(|kid| !keys.iter().any(|k| k.kid.as_deref() == Some(kid))) {
            self.missing_key.store(true, Ordering::Relaxed);
        }
        let verified = keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .any(|k| verify(alg, &k.key, signed.as_bytes(), &sig));
        if !verified {
            return Err(format!("no key of the JWKS verifies this {alg} signature"));
        }
        let number = |name: &str| claims.get(name).and_then(Value::as_f64).map(|v| v as i64);
        let exp = number("exp").ok_or("no exp claim")?;
        if now_s > exp + self.skew_s {
            return Err("the token has expired".into());
        }
        if number("nbf").is_some_and(|nbf| now_s + self.skew_s < nbf) {
            return Err("the token is not valid yet".into());
        }
        if number("iat").is_some_and(|iat| now_s + self.skew_s < iat) {
            return Err("the token was issued in the future".into());
        }
        if let Some(want) = &self.issuer {
            if claims.get("iss").and_then(Value::as_str) != Some(want.as_str()) {
                return Err("wrong issuer".into());
            }
        }
        if !self.audience.is_empty() {
            let aud: Vec<&str> = match claims.get("aud") {
                Some(Value::String(a)) => vec![a.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !aud.iter().any(|a| self.audience.iter().any(|w| w == a)) {
                return Err("wrong audience".into());
            }
        }
        let sub = claims.get(&self.sub_claim).and_then(Value::as_str).filter(|s| !s.is_empty());
        let sub = sub.ok_or_else(|| format!("no {} claim", self.sub_claim))?;
        Ok((format!("User:{sub}"), exp))
    }
}

fn verify(alg: &str, key: &PublicKey, msg: &[u8], sig: &[u8]) -> bool {
    match (alg, key) {
        ("RS256" | "RS384" | "RS512", PublicKey::Rsa { n, e }) => {
            let params = match alg {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                _ => &signature::RSA_PKCS1_2048_8192_SHA512,
            };
            signature::RsaPublicKeyComponents { n, e }.verify(params, msg, sig).is_ok()
        }
        ("ES256", PublicKey::Ec { curve: "P-256", point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(msg, sig).is_ok()
        }
        ("ES384", PublicKey::Ec { curve: "P-384", point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point).verify(msg, sig).is_ok()
        }
        _ => false,
    }
}

fn parse_jwks(text: &str) -> Result<Vec<Jwk>> {
    let doc: Value = serde_json::from_str(text).context("not JSON")?;
    let keys = doc.get("keys").and_then(Value::as_array).ok_or_else(|| anyhow!("no \"keys\" array"))?;
    let field = |k: &Value, name: &str| -> Option<Vec<u8>> { B64URL.decode(k.get(name)?.as_str()?).ok() };
    let mut out = Vec::new();
    for k in keys {
        if k.get("use").and_then(Value::as_str).is_some_and(|u| u != "sig") {
            continue;
        }
        let kid = k.get("kid").and_then(Value::as_str).map(str::to_string);
        let key = match k.get("kty").and_then(Value::as_str) {
            Some("RSA") => match (field(k, "n"), field(k, "e")) {
                (Some(n), Some(e)) => PublicKey::Rsa { n, e },
                _ => continue,
            },
            Some("EC") => {
                let curve = match k.get("crv").and_then(Value::as_str) {
                    Some("P-256") => "P-256",
                    Some("P-384") => "P-384",
                    _ => continue,
                };
                let (Some(x), Some(y)) = (field(k, "x"), field(k, "y")) else { continue };
                let mut point = vec![4u8];
                point.extend(x);
                point.extend(y);
                PublicKey::Ec { curve, point }
            }
            _ => continue,
        };
        out.push(Jwk { kid, key });
    }
    if out.is_empty() {
        bail!("no RSA or EC (P-256, P-384) signing key in it");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    struct Issuer {
        key: EcdsaKeyPair,
    }

    impl Issuer {
        fn new() -> Issuer {
            let rng = SystemRandom::new();
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
            Issuer {
                key: EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).expect("key"),
            }
        }
        fn jwks(&self, kid: &str) -> String {
            let p = self.key.public_key().as_ref();
            let (x, y) = (B64URL.encode(&p[1..33]), B64URL.encode(&p[33..]));
            format!(r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"{kid}","use":"sig","x":"{x}","y":"{y}"}}]}}"#)
        }
        fn token(&self, kid: &str, claims: &str) -> String {
            let h = B64URL.encode(format!(r#"{{"alg":"ES256","kid":"{kid}","typ":"JWT"}}"#));
            let p = B64URL.encode(claims);
            let sig = self.key.sign(&SystemRandom::new(), format!("{h}.{p}").as_bytes()).expect("sign");
            format!("{h}.{p}.{}", B64URL.encode(sig.as_ref()))
        }
    }

    fn validator(jwks: &str, audience: &str) -> OauthValidator {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, jwks).expect("write");
        let url = format!("file://{}", path.display());
        let audience = audience.to_string();
        let settings = move |k: &str| match k {
            "sasl.oauthbearer.jwks.endpoint.url" => url.clone(),
            "sasl.oauthbearer.expected.issuer" => "https://idp.example".into(),
            "sasl.oauthbearer.expected.audience" => audience.clone(),
            _ => String::new(),
        };
        OauthValidator::from_settings(&settings, &[]).expect("valid")
    }

    fn message(token: &str) -> Vec<u8> {
        format!("n,,\u{1}host=localhost\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
    }

    #[test]
    fn a_signed_current_token_for_us_logs_in_and_nothing_else_does() {
        let idp = Issuer::new();
        let v = validator(&idp.jwks("k1"), "kafka,other");
        let now = 1_800_000_000;
        let good = r#"{"sub":"alice","iss":"https://idp.example","aud":["kafka"],"exp":1800000600,"iat":1800000000}"#;
        assert_eq!(v.authenticate(&message(&idp.token("k1", good)), now), Ok("User:alice".into()));
        let refused = |claims: &str| v.authenticate(&message(&idp.token("k1", claims)), now);
        assert!(
            refused(r#"{"sub":"alice","iss":"https://idp.example","aud":"kafka","exp":1799990000}"#).is_err(),
            "expired"
        );
        assert!(
            refused(r#"{"sub":"alice","iss":"https://evil.example","aud":"kafka","exp":1800000600}"#).is_err(),
            "issuer"
        );
        assert!(
            refused(r#"{"sub":"alice","iss":"https://idp.example","aud":"other-app","exp":1800000600}"#).is_err(),
            "audience"
        );
        assert!(refused(r#"{"iss":"https://idp.example","aud":"kafka","exp":1800000600}"#).is_err(), "no sub");
        assert!(refused(r#"{"sub":"alice","iss":"https://idp.example","aud":"kafka"}"#).is_err(), "no exp");
        // Another key, a wrong kid, a tampered payload, an unsigned token.
        let other = Issuer::new();
        assert!(v.authenticate(&message(&other.token("k1", good)), now).is_err());
        assert!(v.authenticate(&message(&idp.token("k2", good)), now).is_err());
        let t = idp.token("k1", good);
        let mut parts: Vec<&str> = t.split('.').collect();
        let forged = B64URL.encode(good.replace("alice", "admin"));
        parts[1] = &forged;
        assert!(v.authenticate(&message(&parts.join(".")), now).is_err());
        let none = format!("{}.{}.", B64URL.encode(r#"{"alg":"none"}"#), B64URL.encode(good));
        assert!(v.authenticate(&message(&none), now).is_err());
        for bad in [&b""[..], b"n,,", b"n,,\x01auth=Basic x\x01\x01", b"p=x,,\x01auth=Bearer a.b.c\x01\x01", b"\xff"] {
            assert!(v.authenticate(bad, now).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn jwks_without_usable_keys_are_refused() {
        assert!(parse_jwks("{}").is_err());
        assert!(parse_jwks(r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).is_err());
        assert!(parse_jwks("not json").is_err());
    }
}
