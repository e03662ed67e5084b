use std::collections::HashMap;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::dev_certs;

fn getter(pairs: &[(&str, String)]) -> impl Fn(&str) -> String + Send + Sync + 'static {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    move |k: &str| {
        map.get(k).cloned().unwrap_or_else(|| {
            if k == "ssl.enabled.protocols" {
                "TLSv1.2,TLSv1.3".into()
            } else {
                String::new()
            }
        })
    }
}

fn client(certs: &dev_certs::DevCerts, with_cert: Option<&str>) -> rustls::ClientConfig {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(certs.ca()).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    match with_cert {
        None => b.with_no_client_auth(),
        Some(name) => {
            let chain = CertificateDer::pem_file_iter(certs.cert(name)).unwrap().map(|c| c.unwrap()).collect();
            let key = PrivateKeyDer::from_pem_file(certs.key(name)).unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
    }
}

/// Serves one connection on a loopback port with `server`, echoing 4 bytes, and connects
/// to it with `client`; Ok when the bytes came back.
async fn handshake(server: Arc<ServerConfig>, client: rustls::ClientConfig) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let served = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let mut buf = [0u8; 4];
        tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        tls.write_all(&buf).await.map_err(|e| e.to_string())?;
        tls.flush().await.map_err(|e| e.to_string())
    });
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let res = async {
        let mut tls =
            connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.map_err(|e| e.to_string())?;
        tls.write_all(b"ping").await.map_err(|e| e.to_string())?;
        let mut buf = [0u8; 4];
        tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        if &buf != b"ping" {
            return Err("echo differs".to_string());
        }
        Ok(())
    }
    .await;
    let server_res = served.await.unwrap();
    res.and(server_res)
}

#[tokio::test]
async fn pem_and_pkcs12_key_stores_serve_tls_and_client_auth_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dev_certs::make(dir.path(), &["broker", "client"]).unwrap();
    let p = |p: PathBuf| p.display().to_string();

    // PEM key store, no client authentication.
    let get = getter(&[("ssl.keystore.type", "PEM".into()), ("ssl.keystore.location", p(certs.pem("broker")))]);
    let (config, files) = server_config(&get).unwrap();
    assert_eq!(files, vec![certs.pem("broker")]);
    handshake(config, client(&certs, None)).await.unwrap();

    // PKCS12 key store (the default type name JKS reads PKCS12 too), client certificate required.
    let get = getter(&[
        ("ssl.keystore.location", p(certs.p12("broker"))),
        ("ssl.keystore.password", dev_certs::STORE_PASSWORD.into()),
        ("ssl.truststore.type", "PEM".into()),
        ("ssl.truststore.location", p(certs.ca())),
        ("ssl.client.auth", "required".into()),
    ]);
    let (config, _) = server_config(&get).unwrap();
    handshake(config.clone(), client(&certs, Some("client"))).await.unwrap();
    let refused = handshake(config, client(&certs, None)).await;
    assert!(refused.is_err(), "a client without a certificate got through: {refused:?}");

    // A client certificate from another CA is refused.
    let other = tempfile::tempdir().unwrap();
    let other_certs = dev_certs::make(other.path(), &["client"]).unwrap();
    let (config, _) = server_config(&get).unwrap();
    // Trust the broker's CA, present the other CA's client certificate.
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::pem_file_iter(certs.ca()).unwrap().next().unwrap().unwrap()).unwrap();
    let chain: Vec<_> =
        CertificateDer::pem_file_iter(other_certs.cert("client")).unwrap().map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_file(other_certs.key("client")).unwrap();
    let c = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    assert!(handshake(config, c).await.is_err());

    // Requested: both kinds of client get through.
    let get = getter(&[
        ("ssl.keystore.location", p(certs.p12("broker"))),
        ("ssl.keystore.password", dev_certs::STORE_PASSWORD.into()),
        ("ssl.truststore.type", "PEM".into()),
        ("ssl.truststore.location", p(certs.ca())),
        ("ssl.client.auth", "requested".into()),
    ]);
    let (config, _) = server_config(&get).unwrap();
    handshake(config.clone(), client(&certs, None)).await.unwrap();
    handshake(config, client(&certs, Some("client"))).await.unwrap();
}

#[test]
fn bad_stores_and_settings_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dev_certs::make(dir.path(), &["broker"]).unwrap();
    let p = |p: PathBuf| p.display().to_string();
    let err = |pairs: &[(&str, String)]| match server_config(&getter(pairs)) {
        Ok(_) => panic!("accepted {pairs:?}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err(&[]).contains("ssl.keystore.location"));
    let wrong_password =
        err(&[("ssl.keystore.location", p(certs.p12("broker"))), ("ssl.keystore.password", "nope".into())]);
    assert!(wrong_password.contains("PKCS12"), "{wrong_password}");
    let jks = dir.path().join("k.jks");
    std::fs::write(&jks, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]).unwrap();
    assert!(err(&[("ssl.keystore.location", p(jks))]).contains("keytool -importkeystore"));
    let pem = [("ssl.keystore.type", "PEM".to_string()), ("ssl.keystore.location", p(certs.pem("broker")))];
    let with = |k: &str, v: &str| {
        let mut v2 = pem.to_vec();
        v2.push((Box::leak(k.to_string().into_boxed_str()), v.to_string()));
        v2
    };
    assert!(err(&with("ssl.client.auth", "required")).contains("truststore"));
    assert!(err(&with("ssl.client.auth", "sometimes")).contains("ssl.client.auth"));
    assert!(err(&with("ssl.enabled.protocols", "TLSv1.1")).contains("ssl.enabled.protocols"));
    assert!(err(&with("ssl.cipher.suites", "TLS_RSA_WITH_RC4_128_MD5")).contains("ssl.cipher.suites"));
    // A suite by its Java name narrows the offer.
    let ok = getter(&with("ssl.cipher.suites", "TLS_AES_256_GCM_SHA384"));
    let (config, _) = server_config(&ok).unwrap();
    assert_eq!(config.crypto_provider().cipher_suites.len(), 1);
    // Garbage where a store should be.
    let junk = dir.path().join("junk.p12");
    std::fs::write(&junk, b"not a store").unwrap();
    assert!(err(&[("ssl.keystore.location", p(junk.clone()))]).contains("PKCS12"));
    assert!(err(&[("ssl.keystore.type", "PEM".into()), ("ssl.keystore.location", p(junk))]).contains("certificate"));
}

#[tokio::test]
async fn a_rewritten_key_store_is_used_for_new_connections() {
    let dir = tempfile::tempdir().unwrap();
    let first = dev_certs::make(&dir.path().join("a"), &["broker"]).unwrap();
    let second = dev_certs::make(&dir.path().join("b"), &["broker"]).unwrap();
    let live = dir.path().join("live.pem");
    std::fs::copy(first.pem("broker"), &live).unwrap();
    let get = getter(&[("ssl.keystore.type", "PEM".into()), ("ssl.keystore.location", live.display().to_string())]);
    let tls = ServerTls::server(Box::new(get)).unwrap();
    handshake(tls.current(), client(&first, None)).await.unwrap();
    assert!(!tls.reload_if_changed().unwrap());
    // A half-written file keeps the old certificate in use.
    std::fs::write(&live, b"-----BEGIN PRIVATE KEY-----\n").unwrap();
    bump_mtime(&live, 1);
    assert!(tls.reload_if_changed().is_err());
    handshake(tls.current(), client(&first, None)).await.unwrap();
    // The new one, once whole, replaces it: the old CA no longer verifies, the new one does.
    std::fs::copy(second.pem("broker"), &live).unwrap();
    bump_mtime(&live, 2);
    assert!(tls.reload_if_changed().unwrap());
    handshake(tls.current(), client(&second, None)).await.unwrap();
    assert!(handshake(tls.current(), client(&first, None)).await.is_err());
}

fn bump_mtime(path: &Path, secs: u64) {
    let t = SystemTime::now() + std::time::Duration::from_secs(secs);
    std::fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
}
