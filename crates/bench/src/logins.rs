//! `runnel bench logins`: SCRAM logins per second, the cost of authentication a broker
//! pays when clients reconnect en masse. Each of `connections` workers connects, logs in
//! (SaslHandshake, then SaslAuthenticate twice, checking the server's signature) and
//! disconnects, again and again for `duration`. The salted password is computed once per
//! salt, as a server under load sees it: the broker's work per login is two HMACs and a
//! hash, the client's PBKDF2 would otherwise dominate on the same machine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use runnel_client::Connection;
use runnel_security::scram::{client_final, ScramMechanism};
use serde::Serialize;

use crate::stats::Percentiles;

#[derive(Serialize, Debug)]
pub struct LoginReport {
    pub address: String,
    pub mechanism: String,
    pub connections: usize,
    pub elapsed_s: f64,
    pub logins: u64,
    pub failures: u64,
    pub logins_per_s: f64,
    /// Connect to logged in.
    pub latency_ms: Percentiles,
}

impl LoginReport {
    pub fn text(&self) -> String {
        let l = &self.latency_ms;
        format!(
            "{} logins on {} with {} connection(s): {} in {:.1} s, {:.0} logins/s, {} failed; \
             latency ms p50 {:.2} p99 {:.2} max {:.2}\n",
            self.mechanism,
            self.address,
            self.connections,
            self.logins,
            self.elapsed_s,
            self.logins_per_s,
            self.failures,
            l.p50,
            l.p99,
            l.max
        )
    }
}

/// Salted passwords by (salt, iterations): what a client would compute for each login.
type Salted = Arc<Mutex<HashMap<String, Vec<u8>>>>;

async fn login(address: &str, m: ScramMechanism, user: &str, password: &str, salted: &Salted) -> Result<()> {
    let conn = Connection::connect(address, "runnel-bench-logins", 1).await?;
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m.name()));
    let r = conn.call(&hs, 1).await?;
    if r.error_code != 0 {
        bail!("SaslHandshake: error {}", r.error_code);
    }
    let nonce = format!("{:032x}", rand::random::<u128>());
    let bare = format!("n={user},r={nonce}");
    let first = SaslAuthenticateRequest::default().with_auth_bytes(format!("n,,{bare}").into_bytes().into());
    let r = conn.call(&first, 2).await?;
    if r.error_code != 0 {
        bail!("SaslAuthenticate (first): error {}", r.error_code);
    }
    let server_first = String::from_utf8(r.auth_bytes.to_vec()).context("server-first")?;
    let key =
        server_first.split(',').filter(|a| a.starts_with("s=") || a.starts_with("i=")).collect::<Vec<_>>().join(",");
    let cached = salted.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
    let cached = match cached {
        Some(s) => s,
        None => {
            let attrs: HashMap<&str, &str> = server_first.split(',').filter_map(|a| a.split_once('=')).collect();
            let salt = base64_decode(attrs.get("s").copied().unwrap_or_default())?;
            let iterations: u32 = attrs.get("i").and_then(|i| i.parse().ok()).context("iterations")?;
            let s = m.salted_password(password.as_bytes(), &salt, iterations);
            salted.lock().unwrap_or_else(|e| e.into_inner()).insert(key, s.clone());
            s
        }
    };
    let (fin, expected) = client_final(m, password, &bare, &server_first, Some(&cached)).map_err(anyhow::Error::msg)?;
    let last = SaslAuthenticateRequest::default().with_auth_bytes(fin.into_bytes().into());
    let r = conn.call(&last, 2).await?;
    if r.error_code != 0 {
        bail!("SaslAuthenticate (final): error {}", r.error_code);
    }
    if r.auth_bytes.as_ref() != expected.as_bytes() {
        bail!("the server's signature does not match");
    }
    Ok(())
}

fn base64_decode(s: &str) -> Result<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).context("salt")
}

pub async fn logins(
    address: &str,
    mechanism: &str,
    user: &str,
    password: &str,
    connections: usize,
    duration: Duration,
) -> Result<LoginReport> {
    let m = ScramMechanism::from_name(mechanism).with_context(|| format!("{mechanism}: SCRAM-SHA-256 or -512"))?;
    // One login first: a wrong password or a broker without SCRAM fails here, clearly.
    let salted: Salted = Arc::default();
    login(address, m, user, password, &salted).await.context("the first login")?;
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..connections.max(1) {
        let (address, user, password, salted) =
            (address.to_string(), user.to_string(), password.to_string(), salted.clone());
        workers.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
            let mut failures = 0u64;
            while started.elapsed() < duration {
                let t = Instant::now();
                match login(&address, m, &user, &password, &salted).await {
                    Ok(()) => {
                        let _ = hist.record(t.elapsed().as_micros().max(1) as u64);
                    }
                    Err(_) => failures += 1,
                }
            }
            (hist, failures)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut failures = 0;
    for w in workers {
        let (h, f) = w.await?;
        hist.add(h)?;
        failures += f;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    Ok(LoginReport {
        address: address.to_string(),
        mechanism: m.name().to_string(),
        connections,
        elapsed_s,
        logins: hist.len(),
        failures,
        logins_per_s: hist.len() as f64 / elapsed_s,
        latency_ms: Percentiles::of(&hist),
    })
}
