//! A little HTTP/1.1 client for the admin API, both for `runnel admin` and for a broker
//! asking its peers (`/v1/groups` of the whole cluster): one request per connection,
//! answers bounded.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Answers larger than this are refused.
pub const ANSWER_MAX: u64 = 4 << 20;

/// GET `path` of the admin API at `base` (`http://host:port`), with the `authorization`
/// header value when given: the body of a 2xx answer, within `timeout` in all.
pub async fn get(base: &str, path: &str, authorization: Option<&str>, timeout: Duration) -> Result<Vec<u8>> {
    let (status, body) = request(base, "GET", path, None, authorization, timeout).await?;
    if !(200..300).contains(&status) {
        bail!("GET {base}{path}: {status}");
    }
    Ok(body)
}

/// One request (a JSON `body` when given) to the admin API at `base` (`http://host:port`),
/// with the `authorization` header value when given: the answer's status and body, within
/// `timeout` in all.
pub async fn request(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    authorization: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>)> {
    tokio::time::timeout(timeout, async {
        let Some(address) = base.strip_prefix("http://").map(|a| a.trim_end_matches('/')) else {
            bail!("{base}: expected http://host:port");
        };
        if authorization.is_some_and(|a| a.contains(['\r', '\n'])) {
            bail!("an Authorization header across lines");
        }
        let mut stream = TcpStream::connect(address).await.with_context(|| format!("connecting to {base}"))?;
        let authorization = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        let body = body.unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{authorization}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.take(ANSWER_MAX + 1).read_to_end(&mut raw).await?;
        if raw.len() as u64 > ANSWER_MAX {
            bail!("the answer is larger than {ANSWER_MAX} bytes");
        }
        parse_answer(&raw)
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer within {timeout:?}"))?
    .with_context(|| format!("{method} {base}{path}"))
}

/// Status and body of an HTTP/1.1 answer read to its end (Content-Length or chunked).
pub fn parse_answer(raw: &[u8]) -> Result<(u16, Vec<u8>)> {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("an incomplete HTTP answer");
    };
    let head = std::str::from_utf8(&raw[..split]).context("an HTTP head that is not UTF-8")?;
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("no HTTP status")?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if !chunked {
        return Ok((status, rest.to_vec()));
    }
    let (mut body, mut at) = (Vec::new(), rest);
    loop {
        let Some(eol) = at.windows(2).position(|w| w == b"\r\n") else { bail!("a truncated chunk") };
        let size = std::str::from_utf8(&at[..eol]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(size) = size else { bail!("a bad chunk size") };
        at = &at[eol + 2..];
        if size == 0 {
            return Ok((status, body));
        }
        if at.len() < size {
            bail!("a truncated chunk");
        }
        body.extend_from_slice(&at[..size]);
        at = at.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_with_a_length_or_in_chunks() {
        let (s, b) = parse_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((s, b.as_slice()), (200, b"{}".as_slice()));
        let (s, b) = parse_answer(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((s, b.as_slice()), (404, b"abcde".as_slice()));
        for bad in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"nonsense\r\n\r\n",
            b"HTTP/1.1 200\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            assert!(parse_answer(bad).is_err(), "{bad:?}");
        }
        assert!(parse_answer(b"HTTP/1.1 200\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc").is_err());
    }
}
