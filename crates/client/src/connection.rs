//! A minimal Kafka client connection: requests pipelined over one TCP stream, responses
//! matched to requests in order (Kafka answers each connection's requests in order).
//!
//! A writer task owns the socket's write half and a reader task its read half; the number
//! of requests waiting for an answer is bounded by the outgoing channel plus `in_flight`.
//! The writer runs on the runtime, or on a thread of its own ([`Writer::Thread`]) for a
//! caller that keeps its worker busy between sends, as the load generator's producer does.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::netns::Netns;

/// TLS for every connection this process makes (security.protocol=SSL), once set.
static TLS: std::sync::OnceLock<Arc<runnel_security::tls::rustls::ClientConfig>> = std::sync::OnceLock::new();

/// Makes every later connection use TLS with `config` (a client's `ssl.*` settings, see
/// `runnel_security::tls::client_config`). Set once, before connecting.
pub fn use_tls(config: Arc<runnel_security::tls::rustls::ClientConfig>) {
    let _ = TLS.set(config);
}

/// How long a connection made from a network namespace may take (its thread blocks).
const CONNECT_IN_NAMESPACE_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Largest response frame accepted.
const RESPONSE_BYTES_MAX: usize = 256 << 20;

/// A request waiting for its answer: correlation id, response header version, where the
/// answer (with the time it arrived) goes, and the in-flight slot it holds.
type Waiter = (i32, i16, oneshot::Sender<Result<(Bytes, Instant)>>, OwnedSemaphorePermit);

/// What the writer task is given: a frame, and who waits for its answer.
type Out = (Bytes, Option<Waiter>);

/// Where a connection's writer task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// On the runtime, beside the caller's tasks: a request goes out when the caller's
    /// worker next has time for it.
    Runtime,
    /// On a thread of its own, as a Kafka producer's sender thread: a request goes out as
    /// soon as it is sent, while the caller goes on with work that does not yield (with
    /// one Tokio worker, a producer generating records would otherwise hold its requests
    /// back for milliseconds). The thread ends when the connection is dropped.
    Thread,
}

pub struct Connection {
    out: mpsc::Sender<Out>,
    next_id: AtomicI32,
    in_flight: Arc<Semaphore>,
    client_id: String,
}

impl Connection {
    /// Connects and starts the reader and writer tasks. At most `in_flight` requests wait
    /// for an answer at a time; [`Connection::send`] waits for a slot.
    pub async fn connect(addr: &str, client_id: &str, in_flight: usize) -> Result<Arc<Connection>> {
        Self::open(None, addr, client_id, in_flight, Writer::Runtime).await
    }

    /// [`Connection::connect`] with its writer where `writer` says.
    pub async fn connect_with(
        addr: &str,
        client_id: &str,
        in_flight: usize,
        writer: Writer,
    ) -> Result<Arc<Connection>> {
        Self::open(None, addr, client_id, in_flight, writer).await
    }

    /// Connects to the first of a comma-separated list of addresses that answers.
    pub async fn connect_any(addresses: &str, client_id: &str, in_flight: usize) -> Result<Arc<Connection>> {
        let mut last = None;
        for addr in addresses.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            match Self::connect(addr, client_id, in_flight).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no broker address given")))
    }

    /// [`Connection::connect`] from inside network namespace `netns` when given.
    pub async fn connect_from(
        netns: Option<&Netns>,
        addr: &str,
        client_id: &str,
        in_flight: usize,
    ) -> Result<Arc<Connection>> {
        Self::open(netns, addr, client_id, in_flight, Writer::Runtime).await
    }

    async fn open(
        netns: Option<&Netns>,
        addr: &str,
        client_id: &str,
        in_flight: usize,
        writer: Writer,
    ) -> Result<Arc<Connection>> {
        let stream = match netns {
            None => TcpStream::connect(addr).await,
            Some(ns) => ns.connect(addr, CONNECT_IN_NAMESPACE_MAX).await,
        };
        let stream = stream.with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        match TLS.get() {
            None => {
                let (rd, wr) = stream.into_split();
                Self::start(rd, wr, client_id, in_flight, writer)
            }
            Some(config) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
                let name = runnel_security::tls::ServerName::try_from(host.to_string())
                    .map_err(|e| anyhow!("TLS server name {host}: {e}"))?;
                let tls = runnel_security::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                    .with_context(|| format!("TLS handshake with {addr}"))?;
                let (rd, wr) = tokio::io::split(tls);
                Self::start(rd, wr, client_id, in_flight, writer)
            }
        }
    }

    /// Starts the reader and writer tasks on the two halves of a connection.
    fn start<R, W>(mut rd: R, mut wr: W, client_id: &str, in_flight: usize, writer: Writer) -> Result<Arc<Connection>>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel::<Out>(in_flight.max(1));
        // `None` once the reader has stopped: nothing more will be answered, so a waiter
        // arriving after that is failed at once instead of waiting forever.
        let pending: Arc<Mutex<Option<VecDeque<Waiter>>>> = Arc::new(Mutex::new(Some(VecDeque::new())));
        let p = pending.clone();
        let write = async move {
            while let Some((frame, waiter)) = rx.recv().await {
                if let Some(w) = waiter {
                    match p.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                        Some(queue) => queue.push_back(w),
                        None => {
                            let _ = w.2.send(Err(anyhow!("connection closed")));
                            continue;
                        }
                    }
                }
                if wr.write_all(&frame).await.is_err() {
                    break;
                }
                // A TLS stream may keep the frame's last record until flushed; a plain
                // socket's flush does nothing. Flushed once the queue is empty.
                if rx.is_empty() && wr.flush().await.is_err() {
                    break;
                }
            }
        };
        match writer {
            Writer::Runtime => drop(tokio::spawn(write)),
            Writer::Thread => {
                // The socket stays registered with the caller's runtime, whose I/O driver
                // wakes this thread's writes; the thread's own runtime only runs the task.
                let rt = tokio::runtime::Builder::new_current_thread().build().context("the writer's runtime")?;
                std::thread::Builder::new()
                    .name("runnel-writer".into())
                    .spawn(move || rt.block_on(write))
                    .context("starting the writer thread")?;
            }
        }
        tokio::spawn(async move {
            let fail_all = |why: &str| {
                let queue = pending.lock().unwrap_or_else(|e| e.into_inner()).take();
                for (_, _, w, _) in queue.into_iter().flatten() {
                    let _ = w.send(Err(anyhow!("{why}")));
                }
            };
            loop {
                let mut len = [0u8; 4];
                if rd.read_exact(&mut len).await.is_err() {
                    fail_all("connection closed");
                    return;
                }
                let len = i32::from_be_bytes(len);
                if len < 4 || len as usize > RESPONSE_BYTES_MAX {
                    fail_all("bad response frame length");
                    return;
                }
                // Read into spare capacity, not zeroed first (a fetch answer may be 50 MB).
                let len = len as usize;
                let mut buf = BytesMut::with_capacity(len);
                while buf.len() < len {
                    let want = len - buf.len();
                    match rd.read_buf(&mut (&mut buf).limit(want)).await {
                        Ok(n) if n > 0 => {}
                        _ => {
                            fail_all("connection closed");
                            return;
                        }
                    }
                }
                let arrived = Instant::now();
                let next = pending.lock().unwrap_or_else(|e| e.into_inner()).as_mut().and_then(VecDeque::pop_front);
                let Some((id, header_version, waiter, permit)) = next else {
                    fail_all("response without a request");
                    return;
                };
                drop(permit);
                let mut frame = buf.freeze();
                let answer = ResponseHeader::decode(&mut frame, header_version)
                    .map_err(|e| anyhow!("bad response header: {e}"))
                    .and_then(|h| {
                        if h.correlation_id == id {
                            Ok((frame, arrived))
                        } else {
                            Err(anyhow!("response for request {} where {id} was expected", h.correlation_id))
                        }
                    });
                let _ = waiter.send(answer);
            }
        });
        Ok(Arc::new(Connection {
            out: tx,
            next_id: AtomicI32::new(1),
            in_flight: Arc::new(Semaphore::new(in_flight.max(1))),
            client_id: client_id.to_string(),
        }))
    }

    /// Sends a request that gets no answer (Produce with acks=0).
    pub async fn send_no_reply<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        let frame = self.frame(req, version)?.0;
        self.out.send((frame, None)).await.map_err(|_| anyhow!("connection closed"))
    }

    fn frame<R: Request>(&self, req: &R, version: i16) -> Result<(Bytes, i32, ApiKey)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let key = ApiKey::try_from(R::KEY).map_err(|_| anyhow!("unknown api key {}", R::KEY))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let header_version = key.request_header_version(version);
        // Sized up front: a 1.5 MB produce request is copied into the frame once, not again
        // each time the buffer would have doubled.
        let size = header.compute_size(header_version).map_err(|e| anyhow!("{e}"))?
            + req.compute_size(version).map_err(|e| anyhow!("sizing {key:?} v{version}: {e}"))?;
        let mut buf = BytesMut::with_capacity(4 + size);
        buf.put_i32(0);
        header.encode(&mut buf, header_version).map_err(|e| anyhow!("{e}"))?;
        req.encode(&mut buf, version).map_err(|e| anyhow!("encoding {key:?} v{version}: {e}"))?;
        let len = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&len.to_be_bytes());
        Ok((buf.freeze(), id, key))
    }

    /// In-flight slots free now: a [`Connection::send`] of this many requests waits for none.
    pub fn free_slots(&self) -> usize {
        self.in_flight.available_permits()
    }

    /// Sends a request once an in-flight slot is free; the returned future resolves to the
    /// decoded response and the time it arrived. Requests go out in the order `send` is
    /// awaited; the slot frees when the answer arrives, whether or not the future is polled.
    pub async fn send<R: Request>(
        &self,
        req: &R,
        version: i16,
    ) -> Result<impl Future<Output = Result<(R::Response, Instant)>> + Send + 'static> {
        let permit = self.in_flight.clone().acquire_owned().await.map_err(|_| anyhow!("connection closed"))?;
        let (frame, id, key) = self.frame(req, version)?;
        let (tx, rx) = oneshot::channel();
        let header_version = key.response_header_version(version);
        let waiter = (id, header_version, tx, permit);
        self.out.send((frame, Some(waiter))).await.map_err(|_| anyhow!("connection closed"))?;
        Ok(async move {
            let (mut body, arrived) = rx.await.map_err(|_| anyhow!("connection closed"))??;
            let resp =
                R::Response::decode(&mut body, version).map_err(|e| anyhow!("decoding {key:?} v{version}: {e}"))?;
            if body.has_remaining() {
                bail!("{} trailing bytes after {key:?} v{version} response", body.remaining());
            }
            Ok((resp, arrived))
        })
    }

    /// Sends and waits for the answer.
    pub async fn call<R: Request>(&self, req: &R, version: i16) -> Result<R::Response> {
        Ok(self.send(req, version).await?.await?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    use tokio::net::TcpListener;

    /// Threads of this process named `runnel-writer`.
    fn writer_threads() -> usize {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
        tasks
            .flatten()
            .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "runnel-writer"))
            .count()
    }

    /// The writer threads once there are `n`, or after a second of waiting for that.
    async fn writer_threads_once(n: usize) -> usize {
        for _ in 0..100 {
            if writer_threads() == n {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        writer_threads()
    }

    /// Answers every ApiVersions v0 request read from one connection, in order.
    async fn answer_all(listener: TcpListener) {
        let Ok((mut s, _)) = listener.accept().await else { return };
        loop {
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
            if s.read_exact(&mut frame).await.is_err() {
                return;
            }
            // api key, api version, then the correlation id.
            let id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            let mut body = BytesMut::new();
            body.put_i32(0);
            ResponseHeader::default().with_correlation_id(id).encode(&mut body, 0).expect("header");
            ApiVersionsResponse::default().encode(&mut body, 0).expect("body");
            let n = (body.len() - 4) as i32;
            body[0..4].copy_from_slice(&n.to_be_bytes());
            if s.write_all(&body).await.is_err() {
                return;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn either_writer_sends_pipelined_requests_in_order_and_a_thread_ends_with_its_connection() {
        for writer in [Writer::Runtime, Writer::Thread] {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("address").to_string();
            let server = tokio::spawn(answer_all(listener));
            let conn = Connection::connect_with(&addr, "test", 5, writer).await.expect("connect");
            if writer == Writer::Thread {
                // A spawned thread names itself once it runs, which may be after
                // `connect_with` returned.
                assert_eq!(writer_threads_once(1).await, 1);
            }
            let mut answers = Vec::new();
            for _ in 0..20 {
                answers.push(conn.send(&ApiVersionsRequest::default(), 0).await.expect("send"));
            }
            // Each answer was matched to its request by correlation id, in order.
            for a in answers {
                assert_eq!(a.await.expect("answer").0.error_code, 0);
            }
            drop(conn);
            server.await.expect("server");
            // The writer's queue closed with the connection: its thread ends.
            assert_eq!(writer_threads_once(0).await, 0, "{writer:?}");
        }
    }
}
