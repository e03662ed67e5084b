//! Where an OAUTHBEARER listener gets its JWKS (`sasl.oauthbearer.jwks.endpoint.url`): a
//! `file:` URL, or an `https:` endpoint fetched with an HTTP/1.1 GET over rustls, trusting
//! the `ssl.truststore.*` options of the listener's OAuthBearerLoginModule JAAS line (as
//! Kafka does) or else the system's certificate bundle. Every fetch is bounded in time and
//! size; these are blocking calls, for start-up and `spawn_blocking`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rustls::ClientConfig;
use rustls_pki_types::ServerName;

/// The largest JWKS read, from a file or an endpoint (headers included).
pub const JWKS_BYTES_MAX: usize = 1 << 20;
/// How long a fetch may take to connect, and then to send and answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Where Debian, Ubuntu and Alpine keep the system's trusted certificates (`SSL_CERT_FILE`
/// overrides it).
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub enum Source {
    File(PathBuf),
    Https { host: String, port: u16, path: String, tls: Arc<ClientConfig> },
}

impl Source {
    /// `options` are the JAAS options of the listener's OAuthBearerLoginModule line.
    pub fn parse(url: &str, options: &[(String, String)]) -> Result<Source> {
        if let Some(path) = url.strip_prefix("file://").or_else(|| url.strip_prefix("file:")) {
            return Ok(Source::File(PathBuf::from(path)));
        }
        let rest = url.strip_prefix("https://").ok_or_else(|| {
            anyhow!("sasl.oauthbearer.jwks.endpoint.url must be an https:// or file: URL, not '{url}'")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                (h, p.parse::<u16>().with_context(|| format!("the port of {url}"))?)
            }
            _ => (authority, 443),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        if host.is_empty() || path.contains(['\r', '\n', ' ']) {
            bail!("sasl.oauthbearer.jwks.endpoint.url {url}: not a usable URL");
        }
        let option = |k: &str| options.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let bundle = std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| SYSTEM_BUNDLE.to_string());
        let own_trust = option("ssl.truststore.location").is_some() || option("ssl.truststore.certificates").is_some();
        let get = |k: &str| -> String {
            if let Some(v) = option(k) {
                return v;
            }
            match k {
                "ssl.truststore.location" if !own_trust => bundle.clone(),
                "ssl.truststore.type" if !own_trust => "PEM".into(),
                "ssl.truststore.type" | "ssl.keystore.type" => "JKS".into(),
                "ssl.enabled.protocols" => "TLSv1.2,TLSv1.3".into(),
                "ssl.endpoint.identification.algorithm" => "https".into(),
                // The broker presents no certificate to the identity provider.
                _ => String::new(),
            }
        };
        let (tls, _) = crate::tls::client_config(&get).context("TLS to the JWKS endpoint")?;
        Ok(Source::Https { host, port, path: path.to_string(), tls })
    }

    pub fn https(&self) -> bool {
        matches!(self, Source::Https { .. })
    }

    /// Blocking: the JWKS document.
    pub fn fetch(&self) -> Result<String> {
        match self {
            Source::File(path) => {
                let len =
                    std::fs::metadata(path).with_context(|| format!("reading the JWKS {}", path.display()))?.len();
                if len > JWKS_BYTES_MAX as u64 {
                    bail!("the JWKS {} is {len} bytes, more than {JWKS_BYTES_MAX}", path.display());
                }
                std::fs::read_to_string(path).with_context(|| format!("reading the JWKS {}", path.display()))
            }
            Source::Https { host, port, path, tls } => {
                let body = https_get(host, *port, path, tls.clone())
                    .with_context(|| format!("fetching the JWKS from https://{host}:{port}{path}"))?;
                String::from_utf8(body).map_err(|_| anyhow!("the JWKS is not UTF-8"))
            }
        }
    }
}

fn https_get(host: &str, port: u16, path: &str, tls: Arc<ClientConfig>) -> Result<Vec<u8>> {
    let addr = (host, port).to_socket_addrs()?.next().ok_or_else(|| anyhow!("{host} has no address"))?;
    let sock = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    sock.set_read_timeout(Some(IO_TIMEOUT))?;
    sock.set_write_timeout(Some(IO_TIMEOUT))?;
    let name = ServerName::try_from(host.to_string()).map_err(|e| anyhow!("server name {host}: {e}"))?;
    let conn = rustls::ClientConnection::new(tls, name)?;
    let mut stream = rustls::StreamOwned::new(conn, sock);
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nUser-Agent: runnel\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let deadline = std::time::Instant::now() + IO_TIMEOUT;
    let mut got = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if let Some(body) = complete_body(&got)? {
            return Ok(body);
        }
        if std::time::Instant::now() > deadline {
            bail!("no complete answer within {IO_TIMEOUT:?}");
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            // A server that closes without TLS close_notify: what came is what there is.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        }
        if got.len() > JWKS_BYTES_MAX {
            bail!("the answer is larger than {JWKS_BYTES_MAX} bytes");
        }
    }
    // Closed: a body delimited by the end of the connection.
    let (status, headers, body) = split_response(&got)?.ok_or_else(|| anyhow!("the answer ended in its headers"))?;
    check_status(status)?;
    if header(&headers, "transfer-encoding").is_some() || header(&headers, "content-length").is_some() {
        bail!("the answer ended early");
    }
    Ok(body.to_vec())
}

/// The body, once `got` holds a whole answer delimited by Content-Length or chunks.
fn complete_body(got: &[u8]) -> Result<Option<Vec<u8>>> {
    let Some((status, headers, body)) = split_response(got)? else { return Ok(None) };
    check_status(status)?;
    if header(&headers, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        return dechunk(body);
    }
    match header(&headers, "content-length") {
        Some(n) => {
            let n: usize = n.trim().parse().map_err(|_| anyhow!("bad Content-Length {n}"))?;
            if n > JWKS_BYTES_MAX {
                bail!("Content-Length {n} is more than {JWKS_BYTES_MAX}");
            }
            Ok((body.len() >= n).then(|| body[..n].to_vec()))
        }
        None => Ok(None),
    }
}

type Response<'a> = (u16, Vec<(String, String)>, &'a [u8]);

fn split_response(got: &[u8]) -> Result<Option<Response<'_>>> {
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else { return Ok(None) };
    let head = std::str::from_utf8(&got[..end]).map_err(|_| anyhow!("headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if !version.starts_with("HTTP/1.") {
        bail!("not an HTTP/1 answer: {status_line}");
    }
    let status = code.parse().map_err(|_| anyhow!("bad status line: {status_line}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Some((status, headers, &got[end + 4..])))
}

fn check_status(status: u16) -> Result<()> {
    match status {
        200 => Ok(()),
        other => bail!("the endpoint answered HTTP {other}"),
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A chunked body, once its last chunk has come.
fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let line = std::str::from_utf8(&rest[..eol]).map_err(|_| anyhow!("bad chunk size"))?;
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| anyhow!("bad chunk size {size_text}"))?;
        if size > JWKS_BYTES_MAX || out.len() + size > JWKS_BYTES_MAX {
            bail!("the answer is larger than {JWKS_BYTES_MAX} bytes");
        }
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_by_length_or_chunks() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(complete_body(whole).expect("ok"), Some(b"hello".to_vec()));
        assert_eq!(complete_body(&whole[..whole.len() - 1]).expect("ok"), None);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(complete_body(chunked).expect("ok"), Some(b"hello".to_vec()));
        assert_eq!(complete_body(&chunked[..40]).expect("ok"), None);
        assert!(complete_body(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").is_err());
        assert!(complete_body(b"SSH-2.0\r\n\r\n").is_err());
        assert!(complete_body(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n").is_err());
        assert!(complete_body(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffff\r\n").is_err());
        assert!(complete_body(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }

    #[test]
    fn urls_are_parsed() {
        let trust = [("ssl.truststore.type".to_string(), "PEM".to_string())];
        assert!(
            matches!(Source::parse("file:///x/jwks.json", &[]), Ok(Source::File(p)) if p == std::path::Path::new("/x/jwks.json"))
        );
        assert!(Source::parse("http://idp/jwks", &[]).is_err(), "plain HTTP");
        // The trust store option names a file that does not exist: refused, with the reason.
        let missing = [("ssl.truststore.location".to_string(), "/nonexistent/ca.pem".to_string())];
        let err = Source::parse("https://idp.example:8443/keys", &[trust[0].clone(), missing[0].clone()])
            .err()
            .expect("refused");
        assert!(format!("{err:#}").contains("nonexistent"), "{err:#}");
        assert!(Source::parse("https://idp/a b", &[]).is_err());
    }
}
