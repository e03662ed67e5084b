//! A small TCP proxy that delays what it forwards: `runnel chaos` puts one between brokers
//! of different regions (each broker dials its peers through it, `fault.raft.dial`), and
//! turns the delay up to emulate the latency between regions.
//!
//! The delay is one way: each chunk read is written out `delay` after it was read, in
//! order, so a round trip through the proxy costs twice the delay. At most
//! `CHUNKS_IN_FLIGHT` chunks wait per direction; past that, reading stops (TCP pushes back).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

const CHUNKS_IN_FLIGHT: usize = 256;

/// Listens on `listen` (`host:0` for any port) and forwards each connection to `target`,
/// delayed by `delay_ms` (read at every chunk, so it can change while connections live).
/// Returns the address it listens on; runs until the process ends.
pub async fn start(listen: &str, target: String, delay_ms: Arc<AtomicU64>) -> Result<String> {
    let listener = TcpListener::bind(listen).await.with_context(|| format!("proxy listening on {listen}"))?;
    let addr = listener.local_addr()?.to_string();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let target = target.clone();
            let delay = delay_ms.clone();
            tokio::spawn(async move {
                // The peer is down or cut off: drop the connection, the broker dials again.
                let Ok(outbound) = TcpStream::connect(&target).await else { return };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::join!(pump(ri, wo, delay.clone()), pump(ro, wi, delay));
            });
        }
    });
    Ok(addr)
}

/// Copies `from` to `to`, each chunk held back until `delay` after it was read.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Arc<AtomicU64>) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(CHUNKS_IN_FLIGHT);
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = Instant::now() + Duration::from_millis(delay.load(Ordering::Relaxed));
                    if tx.send((due, Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(c: &mut TcpStream) -> Duration {
        let t = std::time::Instant::now();
        c.write_all(b"hello").await.expect("write");
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"hello");
        t.elapsed()
    }

    #[tokio::test]
    async fn forwards_both_ways_with_the_delay_set_at_the_time() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let target = echo.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let delay = Arc::new(AtomicU64::new(0));
        let proxy = start("127.0.0.1:0", target, delay.clone()).await.expect("proxy");
        let mut c = TcpStream::connect(&proxy).await.expect("connect");
        round_trip(&mut c).await;
        delay.store(150, Ordering::Relaxed);
        // Each direction is delayed: a round trip takes at least twice the delay.
        assert!(round_trip(&mut c).await >= Duration::from_millis(300));
    }
}
