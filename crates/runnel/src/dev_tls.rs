//! `runnel dev --tls`: a throwaway certificate authority in the data directory, brokers
//! that listen with TLS only (client certificates requested, so both TLS and mutual TLS
//! clients get in) and talk to each other over mutual TLS, and the client settings to paste.

use std::path::Path;

use anyhow::{Context, Result};
use runnel_security::dev_certs::{self, DevCerts, STORE_PASSWORD};

/// Makes (or reuses) the certificates under `data_dir/tls` and returns them with the
/// broker settings that use them.
pub fn prepare(data_dir: &Path) -> Result<(DevCerts, Vec<String>)> {
    std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let dir = data_dir.canonicalize().with_context(|| format!("resolving {}", data_dir.display()))?.join("tls");
    let certs = dev_certs::make(&dir, &["broker", "client"])?;
    let settings = vec![
        "ssl.keystore.type=PKCS12".to_string(),
        format!("ssl.keystore.location={}", certs.p12("broker").display()),
        format!("ssl.keystore.password={STORE_PASSWORD}"),
        "ssl.truststore.type=PEM".to_string(),
        format!("ssl.truststore.location={}", certs.ca().display()),
        "ssl.client.auth=requested".to_string(),
        // Raft and controller traffic between brokers: mutual TLS with the same stores.
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:SSL".to_string(),
    ];
    Ok((certs, settings))
}

/// What a client needs to connect, for the Java client and for librdkafka.
pub fn client_settings(certs: &DevCerts, bootstrap: &str) -> String {
    let (ca, p12, crt, key) = (
        certs.ca().display().to_string(),
        certs.p12("client").display().to_string(),
        certs.cert("client").display().to_string(),
        certs.key("client").display().to_string(),
    );
    format!(
        "TLS: a throwaway CA and certificates are in {dir} (for trying things, never for production).\n\
         \n\
         Java client (client.properties; Kafka's command-line tools take --command-config):\n\
         \x20 bootstrap.servers={bootstrap}\n\
         \x20 security.protocol=SSL\n\
         \x20 ssl.truststore.type=PEM\n\
         \x20 ssl.truststore.location={ca}\n\
         \x20 # mutual TLS, also:\n\
         \x20 ssl.keystore.type=PKCS12\n\
         \x20 ssl.keystore.location={p12}\n\
         \x20 ssl.keystore.password={STORE_PASSWORD}\n\
         \n\
         librdkafka (confluent-kafka, kcat -X):\n\
         \x20 bootstrap.servers={bootstrap}\n\
         \x20 security.protocol=ssl\n\
         \x20 ssl.ca.location={ca}\n\
         \x20 # mutual TLS, also:\n\
         \x20 ssl.certificate.location={crt}\n\
         \x20 ssl.key.location={key}\n",
        dir = certs.dir.display(),
    )
}
