//! A throwaway certificate authority for trying TLS in one command (`runnel dev --tls`)
//! and for the tests: a CA, one certificate for the brokers (valid for localhost and
//! 127.0.0.1) and one for a client, as PEM files (what librdkafka and Kafka's PEM stores
//! read) and PKCS12 stores (what Java's keytool makes). Never for production: the keys sit
//! unencrypted beside the data.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// The password of the PKCS12 stores written here.
pub const STORE_PASSWORD: &str = "runnel-dev";

/// Where the files are.
#[derive(Debug, Clone)]
pub struct DevCerts {
    pub dir: PathBuf,
}

impl DevCerts {
    /// The CA certificate (PEM): the trust store of clients and brokers.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
    /// `name`'s private key and certificate chain in one PEM file (Kafka's PEM key store).
    pub fn pem(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }
    /// `name`'s private key alone (PEM, PKCS#8): librdkafka's `ssl.key.location`.
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }
    /// `name`'s certificate alone (PEM): librdkafka's `ssl.certificate.location`.
    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }
    /// `name`'s key and chain as a PKCS12 store with [`STORE_PASSWORD`].
    pub fn p12(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.p12"))
    }
}

/// Makes a CA and certificates for `names` (e.g. "broker", "client") in `dir`, or uses the
/// ones already there. Each certificate is valid for localhost and 127.0.0.1 and has the
/// common name it is named by.
pub fn make(dir: &Path, names: &[&str]) -> Result<DevCerts> {
    let certs = DevCerts { dir: dir.to_path_buf() };
    if certs.ca().exists() && names.iter().all(|n| certs.p12(n).exists()) {
        return Ok(certs);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "Runnel dev CA");
    ca.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    write(&certs.ca(), ca_cert.pem().as_bytes())?;
    for name in names {
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        params.distinguished_name.push(DnType::CommonName, *name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        let chain_pem = format!("{}{}", cert.pem(), ca_cert.pem());
        write(&certs.key(name), key.serialize_pem().as_bytes())?;
        write(&certs.cert(name), chain_pem.as_bytes())?;
        write(&certs.pem(name), format!("{}{}", key.serialize_pem(), chain_pem).as_bytes())?;
        let chain = [cert.der().to_vec(), ca_cert.der().to_vec()]
            .iter()
            .map(|d| p12_keystore::Certificate::from_der(d).map_err(|e| anyhow!("certificate: {e:?}")))
            .collect::<Result<Vec<_>>>()?;
        let p12_key = p12_keystore::PrivateKey::from_der(&key.serialize_der()).map_err(|e| anyhow!("key: {e:?}"))?;
        let entry = p12_keystore::PrivateKeyChain::new(name.as_bytes().to_vec(), p12_key, chain);
        let mut store = p12_keystore::KeyStore::new();
        store.add_entry(name, p12_keystore::KeyStoreEntry::PrivateKeyChain(entry));
        let bytes = store.writer(STORE_PASSWORD).write().map_err(|e| anyhow!("writing a PKCS12 store: {e:?}"))?;
        write(&certs.p12(name), &bytes)?;
    }
    Ok(certs)
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
