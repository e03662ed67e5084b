//! TLS for listeners, configured with Kafka's `ssl.*` settings so an existing
//! `server.properties` works unchanged: key stores and trust stores as PKCS12 (what Java's
//! keytool writes; a `JKS`-typed store that is really PKCS12 is read too, as Java does) or
//! PEM (a file, or the key and chain inline), `ssl.client.auth`, `ssl.enabled.protocols`
//! and `ssl.cipher.suites` by their Java names.
//!
//! [`ServerTls`] holds the current rustls configuration of one listener and the files it
//! was read from; [`ServerTls::reload_if_changed`] reads them again when one changes, so
//! certificates rotate without a restart: connections already open keep the certificate
//! they were made with, new ones get the new one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use runnel_sync::RwLockExt;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

// For the clients built on this crate (`runnel bench` over TLS).
pub use rustls;
pub use rustls_pki_types::ServerName;

/// Reads one setting of the listener being configured: the `listener.name.<name>.` form
/// first, then the plain name, "" when unset.
pub type Get<'a> = &'a dyn Fn(&str) -> String;

/// Key and trust store files are small; anything bigger is not one.
const STORE_BYTES_MAX: u64 = 4 << 20;

/// The first bytes of a Java KeyStore (JKS) file, which is not PKCS12.
const JKS_MAGIC: [u8; 4] = [0xfe, 0xed, 0xfe, 0xed];

/// A certificate chain (leaf first) and its private key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

fn read_store(path: &Path) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?.len();
    if len > STORE_BYTES_MAX {
        bail!("{}: {len} bytes, more than a key or trust store can be ({STORE_BYTES_MAX})", path.display());
    }
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn store_type(get: Get, name: &str) -> Result<String> {
    let t = get(name).to_ascii_uppercase();
    match t.as_str() {
        "" | "JKS" | "PKCS12" | "PEM" => Ok(if t.is_empty() { "JKS".into() } else { t }),
        other => bail!("{name}={other}: expected PKCS12, PEM or JKS"),
    }
}

fn pkcs12(data: &[u8], password: &str, what: &str) -> Result<p12_keystore::KeyStore> {
    if data.starts_with(&JKS_MAGIC) {
        bail!(
            "{what} is a Java KeyStore (JKS), which Runnel does not read: convert it with \
             `keytool -importkeystore -srckeystore FILE -destkeystore FILE.p12 -deststoretype PKCS12`"
        );
    }
    p12_keystore::KeyStore::from_pkcs12(data, password, p12_keystore::Pkcs12ImportPolicy::Relaxed)
        .map_err(|e| anyhow!("{what}: not a PKCS12 store this password opens ({e:?})"))
}

fn pem_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{what}: bad PEM certificate ({e:?})"))?;
    if certs.is_empty() {
        bail!("{what}: no certificate in it");
    }
    Ok(certs)
}

fn pem_key(pem: &[u8], key_password: &str, what: &str) -> Result<PrivateKeyDer<'static>> {
    if String::from_utf8_lossy(pem).contains("ENCRYPTED PRIVATE KEY") {
        bail!("{what}: an encrypted PEM private key; Runnel reads unencrypted PKCS#8 keys (or a PKCS12 store) so far");
    }
    let _ = key_password;
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| anyhow!("{what}: no usable private key ({e:?})"))
}

/// The key store a listener presents (`ssl.keystore.*`, or `ssl.keystore.key` with
/// `ssl.keystore.certificate.chain` inline), with the files it came from. None when none
/// is configured.
pub fn keystore(get: Get) -> Result<Option<(Identity, Vec<PathBuf>)>> {
    let kind = store_type(get, "ssl.keystore.type")?;
    let (inline_key, inline_chain) = (get("ssl.keystore.key"), get("ssl.keystore.certificate.chain"));
    if !inline_key.is_empty() || !inline_chain.is_empty() {
        if kind != "PEM" {
            bail!("ssl.keystore.key and ssl.keystore.certificate.chain need ssl.keystore.type=PEM");
        }
        let chain = pem_certs(inline_chain.as_bytes(), "ssl.keystore.certificate.chain")?;
        let key = pem_key(inline_key.as_bytes(), &get("ssl.key.password"), "ssl.keystore.key")?;
        return Ok(Some((Identity { chain, key }, Vec::new())));
    }
    let location = get("ssl.keystore.location");
    if location.is_empty() {
        return Ok(None);
    }
    let path = PathBuf::from(&location);
    let data = read_store(&path)?;
    let what = format!("ssl.keystore.location {location}");
    let identity = if kind == "PEM" {
        Identity { chain: pem_certs(&data, &what)?, key: pem_key(&data, &get("ssl.key.password"), &what)? }
    } else {
        let store = pkcs12(&data, &get("ssl.keystore.password"), &what)?;
        let (_, entry) = store.private_key_chain().ok_or_else(|| anyhow!("{what}: no private key entry"))?;
        let chain: Vec<_> = entry.certs().iter().map(|c| CertificateDer::from(c.as_der().to_vec())).collect();
        if chain.is_empty() {
            bail!("{what}: the private key has no certificate");
        }
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(entry.key().as_der().to_vec()));
        Identity { chain, key }
    };
    Ok(Some((identity, vec![path])))
}

/// The certificates a listener trusts (`ssl.truststore.*`, or `ssl.truststore.certificates`
/// inline), with the files they came from. None when none is configured.
pub fn truststore(get: Get) -> Result<Option<(RootCertStore, Vec<PathBuf>)>> {
    let kind = store_type(get, "ssl.truststore.type")?;
    let inline = get("ssl.truststore.certificates");
    let location = get("ssl.truststore.location");
    let (certs, files) = if !inline.is_empty() {
        if kind != "PEM" {
            bail!("ssl.truststore.certificates needs ssl.truststore.type=PEM");
        }
        (pem_certs(inline.as_bytes(), "ssl.truststore.certificates")?, Vec::new())
    } else if location.is_empty() {
        return Ok(None);
    } else {
        let path = PathBuf::from(&location);
        let data = read_store(&path)?;
        let what = format!("ssl.truststore.location {location}");
        let certs = if kind == "PEM" {
            pem_certs(&data, &what)?
        } else {
            let store = pkcs12(&data, &get("ssl.truststore.password"), &what)?;
            let mut certs = Vec::new();
            for (_, entry) in store.entries() {
                match entry {
                    p12_keystore::KeyStoreEntry::Certificate(c) => {
                        certs.push(CertificateDer::from(c.as_der().to_vec()))
                    }
                    p12_keystore::KeyStoreEntry::PrivateKeyChain(k) => {
                        certs.extend(k.certs().iter().map(|c| CertificateDer::from(c.as_der().to_vec())))
                    }
                    _ => {}
                }
            }
            if certs.is_empty() {
                bail!("{what}: no certificate in it");
            }
            certs
        };
        (certs, vec![path])
    };
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| anyhow!("a trusted certificate: {e}"))?;
    }
    Ok(Some((roots, files)))
}

/// The crypto provider with only the suites `ssl.cipher.suites` names (Java's names, e.g.
/// TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384); all of ring's when empty.
fn provider(get: Get) -> Result<Arc<CryptoProvider>> {
    let mut provider = rustls::crypto::ring::default_provider();
    let wanted: Vec<String> =
        get("ssl.cipher.suites").split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    if !wanted.is_empty() {
        let java_name = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite()).replacen("TLS13_", "TLS_", 1);
        provider.cipher_suites.retain(|s| wanted.contains(&java_name(s)));
        if provider.cipher_suites.is_empty() {
            let known: Vec<_> = rustls::crypto::ring::ALL_CIPHER_SUITES.iter().map(java_name).collect();
            bail!("ssl.cipher.suites: none of {} is supported; these are: {}", wanted.join(","), known.join(","));
        }
    }
    Ok(Arc::new(provider))
}

/// `ssl.enabled.protocols`: TLSv1.2 and TLSv1.3 (older ones are not offered).
fn versions(get: Get) -> Result<Vec<&'static SupportedProtocolVersion>> {
    let mut versions = Vec::new();
    for p in get("ssl.enabled.protocols").split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p {
            "TLSv1.3" => versions.push(&rustls::version::TLS13),
            "TLSv1.2" => versions.push(&rustls::version::TLS12),
            other => {
                tracing::warn!(protocol = other, "ssl.enabled.protocols: not offered (only TLSv1.2 and TLSv1.3 are)")
            }
        }
    }
    if versions.is_empty() {
        bail!("ssl.enabled.protocols: none of TLSv1.2, TLSv1.3 is enabled");
    }
    Ok(versions)
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

impl ClientAuth {
    pub fn parse(s: &str) -> Result<ClientAuth> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            other => bail!("ssl.client.auth={other}: expected none, requested or required"),
        }
    }
}

/// A listener's rustls configuration from its settings, and the files it was read from.
pub fn server_config(get: Get) -> Result<(Arc<ServerConfig>, Vec<PathBuf>)> {
    let (identity, mut files) =
        keystore(get)?.ok_or_else(|| anyhow!("a TLS listener needs ssl.keystore.location (or ssl.keystore.key)"))?;
    let provider = provider(get)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions(get)?)
        .map_err(|e| anyhow!("ssl.enabled.protocols with ssl.cipher.suites: {e}"))?;
    let auth = ClientAuth::parse(&get("ssl.client.auth"))?;
    let builder = match auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let (roots, trust_files) = truststore(get)?
                .ok_or_else(|| anyhow!("ssl.client.auth={auth:?} needs ssl.truststore.location (or certificates)"))?;
            files.extend(trust_files);
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| anyhow!("ssl.truststore: {e}"))?)
        }
    };
    let config = builder
        .with_single_cert(identity.chain, identity.key)
        .map_err(|e| anyhow!("the key store's key does not fit its certificate: {e}"))?;
    Ok((Arc::new(config), files))
}

/// The broker's own outgoing TLS (to its peers): it trusts `ssl.truststore.*`, presents
/// its key store when it has one, and checks the peer's name against the address it dialled
/// unless `ssl.endpoint.identification.algorithm` is empty.
pub fn client_config(get: Get) -> Result<(Arc<ClientConfig>, Vec<PathBuf>)> {
    let (roots, mut files) =
        truststore(get)?.ok_or_else(|| anyhow!("outgoing TLS needs ssl.truststore.location (or certificates)"))?;
    let provider = provider(get)?;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions(get)?)
        .map_err(|e| anyhow!("ssl.enabled.protocols with ssl.cipher.suites: {e}"))?;
    let roots = Arc::new(roots);
    let builder = match get("ssl.endpoint.identification.algorithm").to_ascii_lowercase().as_str() {
        "https" => builder.with_root_certificates(roots),
        "" => {
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| anyhow!("ssl.truststore: {e}"))?;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyName(inner)))
        }
        other => bail!("ssl.endpoint.identification.algorithm={other}: expected https or empty"),
    };
    let config = match keystore(get)? {
        Some((identity, key_files)) => {
            files.extend(key_files);
            builder
                .with_client_auth_cert(identity.chain, identity.key)
                .map_err(|e| anyhow!("the key store's key does not fit its certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok((Arc::new(config), files))
}

/// `ssl.endpoint.identification.algorithm=` (empty): the peer's chain must verify, whatever
/// names its certificate holds.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls_pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A TLS configuration, read again when its files change.
pub struct Reloading<T> {
    /// Builds the configuration from the settings; replaced when the settings change.
    build: RwLock<Builder<T>>,
    state: RwLock<Loaded<T>>,
}

type Builder<T> = Arc<dyn Fn() -> Result<(Arc<T>, Vec<PathBuf>)> + Send + Sync>;

/// A listener's configuration.
pub type ServerTls = Reloading<ServerConfig>;
/// The configuration of the broker's own outgoing connections.
pub type ClientTls = Reloading<ClientConfig>;

struct Loaded<T> {
    config: Arc<T>,
    /// The key and trust store files, with the modification time they were read at.
    files: Vec<(PathBuf, Option<SystemTime>)>,
}

fn stamped(files: Vec<PathBuf>) -> Vec<(PathBuf, Option<SystemTime>)> {
    files.into_iter().map(|f| (f.clone(), modified(&f))).collect()
}

/// Settings as one listener sees them (see [`Get`]), owned.
pub type Settings = Box<dyn Fn(&str) -> String + Send + Sync>;

impl ServerTls {
    /// A listener's configuration, its stores read now (an error here stops start-up).
    pub fn server(settings: Settings) -> Result<ServerTls> {
        Reloading::new(Arc::new(move || server_config(&*settings)))
    }

    /// Blocking (reads the stores): whether `settings` make a valid listener configuration.
    pub fn check(settings: &dyn Fn(&str) -> String) -> Result<()> {
        server_config(settings).map(|_| ())
    }

    /// Blocking (reads the stores): uses `settings` from now on (Kafka's dynamic
    /// `listener.name.<l>.ssl.*`), if they make a valid configuration; new connections get
    /// it, existing ones keep theirs.
    pub fn reconfigure(&self, settings: Settings) -> Result<()> {
        self.replace(Arc::new(move || server_config(&*settings)))
    }
}

impl ClientTls {
    /// The broker's outgoing configuration, its stores read now.
    pub fn client(settings: Settings) -> Result<ClientTls> {
        Reloading::new(Arc::new(move || client_config(&*settings)))
    }
}

impl<T> Reloading<T> {
    fn new(build: Builder<T>) -> Result<Reloading<T>> {
        let (config, files) = build()?;
        Ok(Reloading { build: RwLock::new(build), state: RwLock::new(Loaded { config, files: stamped(files) }) })
    }

    /// Builds with `build` now and, if that works, keeps it for later reloads.
    fn replace(&self, build: Builder<T>) -> Result<()> {
        let (config, files) = build()?;
        let loaded = Loaded { config, files: stamped(files) };
        *self.build.write_or_stop() = build;
        *self.state.write_or_stop() = loaded;
        Ok(())
    }

    /// The configuration new connections use.
    pub fn current(&self) -> Arc<T> {
        self.state.read_or_stop().config.clone()
    }

    /// Blocking (file-system work): when a store file changed since it was read, reads the
    /// stores again and, if they make a valid configuration, uses it for new connections.
    /// Returns whether it did. A store that does not load (half written, wrong password)
    /// leaves the old configuration in use and returns the error, once per change.
    pub fn reload_if_changed(&self) -> Result<bool> {
        let files: Vec<PathBuf> = {
            let state = self.state.read_or_stop();
            if state.files.iter().all(|(path, seen)| modified(path) == *seen) {
                return Ok(false);
            }
            state.files.iter().map(|(p, _)| p.clone()).collect()
        };
        let stamps = stamped(files);
        // Files are read and stamped before the lock: it is held for the swap alone.
        let build = self.build.read_or_stop().clone();
        let loaded = build().map(|(config, files)| Loaded { config, files: stamped(files) });
        let mut state = self.state.write_or_stop();
        match loaded {
            Ok(fresh) => {
                *state = fresh;
                Ok(true)
            }
            Err(e) => {
                state.files = stamps;
                Err(e)
            }
        }
    }
}

/// Looks for changed store files every `interval` for as long as the process runs, and
/// logs what it did under the name `what`.
pub async fn reload_loop<T: Send + Sync + 'static>(what: Arc<str>, tls: Arc<Reloading<T>>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let t = tls.clone();
        match tokio::task::spawn_blocking(move || t.reload_if_changed()).await {
            Ok(Ok(true)) => tracing::info!(listener = %what, "TLS key or trust store changed: new connections use it"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(
                listener = %what, error = %format!("{e:#}"),
                "TLS stores changed but do not load; keeping the previous ones"
            ),
            Err(e) => tracing::warn!(listener = %what, error = %e, "TLS reload task failed"),
        }
    }
}

#[cfg(test)]
mod tests;
