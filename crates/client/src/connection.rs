//! A minimal Kafka client connection: requests pipelined over one TCP stream, responses
//! matched to requests in order (Kafka answers each connection's requests in order).
//!
//! A reader task owns the socket's read half. The write half belongs to a writer task on
//! the runtime, or to the callers themselves ([`Writer::Caller`]), for a caller that keeps
//! its worker busy between sends, as the load generator's producer does. The number of
//! requests waiting for an answer is bounded by `in_flight` (plus the writer task's queue).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Request, StrBytes};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use runnel_wire::pieces::{encode_frame, SHARE_MIN};

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

/// What the writer task is given: a frame in pieces, and who waits for its answer.
type Out = (Vec<Bytes>, Option<Waiter>);

/// Who writes a connection's frames to its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// A task on the runtime, beside the caller's tasks: a request goes out when the
    /// caller's worker next has time for it.
    Runtime,
    /// The caller's own task: [`Connection::send`] returns once its frame is written, so
    /// a caller that goes on with work that does not yield (a producer generating records,
    /// with one Tokio worker) holds none of its requests back. A writer on a thread of its
    /// own did the same but, on the load generator's one CPU, often woke 1-4 ms after it was
    /// handed a request (docs/bench.md). A send dropped before it returns may leave a frame
    /// half written; the connection then refuses every later send.
    Caller,
}

/// A frame, and who waits for its answer; the waiter, if any, is queued for the reader
/// before the frame is written, so an answer never finds its waiter missing.
enum Sink {
    /// To the writer task.
    Task(mpsc::Sender<Out>),
    /// Written by the caller, one caller at a time.
    Caller { wr: tokio::sync::Mutex<CallerHalf>, pending: Pending },
}

/// The write half of a [`Writer::Caller`] connection.
struct CallerHalf {
    wr: Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
    /// A write did not finish (it failed, or its send was dropped): the stream may end in
    /// part of a frame, so nothing more may follow.
    torn: bool,
}

/// The waiters for answers, oldest first; `None` once the reader has stopped.
type Pending = Arc<Mutex<Option<VecDeque<Waiter>>>>;

impl Sink {
    async fn put(&self, frame: Vec<Bytes>, waiter: Option<Waiter>) -> Result<()> {
        let (half, pending) = match self {
            Sink::Task(tx) => return tx.send((frame, waiter)).await.map_err(|_| anyhow!("connection closed")),
            Sink::Caller { wr, pending } => (wr, pending),
        };
        let mut half = half.lock().await;
        if half.torn || !queue_waiter(pending, waiter) {
            bail!("connection closed");
        }
        half.torn = true;
        write_pieces(&mut half.wr, &frame).await.context("writing a request")?;
        // A TLS stream may keep the frame's last record until flushed.
        half.wr.flush().await.context("writing a request")?;
        half.torn = false;
        Ok(())
    }
}

/// Writes `pieces` in order, with as few system calls as the stream takes (one `writev`
/// for a produce request's batches on a plain socket).
async fn write_pieces<W: tokio::io::AsyncWrite + Unpin + ?Sized>(wr: &mut W, pieces: &[Bytes]) -> std::io::Result<()> {
    // Where the bytes not yet written start: piece `at`, from byte `from` of it.
    let (mut at, mut from) = (0, 0);
    while at < pieces.len() {
        let slices: Vec<std::io::IoSlice> = std::iter::once(&pieces[at][from..])
            .chain(pieces[at + 1..].iter().map(|b| &b[..]))
            .take(WRITE_SLICES_MAX)
            .map(std::io::IoSlice::new)
            .collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 && slices.iter().any(|s| !s.is_empty()) {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while at < pieces.len() && n >= pieces[at].len() - from {
            n -= pieces[at].len() - from;
            (at, from) = (at + 1, 0);
        }
        from += n;
    }
    Ok(())
}

/// At most this many pieces go to one `writev` (Linux takes 1024).
const WRITE_SLICES_MAX: usize = 64;

/// Queues `waiter` for the reader; false (the waiter told) once the reader has stopped.
fn queue_waiter(pending: &Pending, waiter: Option<Waiter>) -> bool {
    let Some(w) = waiter else { return true };
    match pending.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        Some(queue) => {
            queue.push_back(w);
            true
        }
        None => {
            let _ = w.2.send(Err(anyhow!("connection closed")));
            false
        }
    }
}

pub struct Connection {
    out: Sink,
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

    /// Starts the reader task, and the writer task unless the callers write, on the two
    /// halves of a connection.
    fn start<R, W>(mut rd: R, wr: W, client_id: &str, in_flight: usize, writer: Writer) -> Result<Arc<Connection>>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        // `None` once the reader has stopped: nothing more will be answered, so a waiter
        // arriving after that is failed at once instead of waiting forever.
        let pending: Pending = Arc::new(Mutex::new(Some(VecDeque::new())));
        let out = match writer {
            Writer::Caller => Sink::Caller {
                wr: tokio::sync::Mutex::new(CallerHalf { wr: Box::new(wr), torn: false }),
                pending: pending.clone(),
            },
            Writer::Runtime => {
                let (tx, mut rx) = mpsc::channel::<Out>(in_flight.max(1));
                let p = pending.clone();
                let mut wr = wr;
                tokio::spawn(async move {
                    while let Some((frame, waiter)) = rx.recv().await {
                        if !queue_waiter(&p, waiter) {
                            continue;
                        }
                        if write_pieces(&mut wr, &frame).await.is_err() {
                            break;
                        }
                        // A TLS stream may keep the frame's last record until flushed; a
                        // plain socket's flush does nothing. Flushed once the queue is empty.
                        if rx.is_empty() && wr.flush().await.is_err() {
                            break;
                        }
                    }
                });
                Sink::Task(tx)
            }
        };
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
            out,
            next_id: AtomicI32::new(1),
            in_flight: Arc::new(Semaphore::new(in_flight.max(1))),
            client_id: client_id.to_string(),
        }))
    }

    /// Sends a request that gets no answer (Produce with acks=0); `shared` as for
    /// [`Connection::send_sharing`].
    pub async fn send_no_reply<R: Request>(&self, req: &R, version: i16, shared: &[Bytes]) -> Result<()> {
        let frame = self.frame(req, version, shared)?.0;
        self.out.put(frame, None).await
    }

    /// The request's frame in pieces: each of `shared` of at least [`SHARE_MIN`] bytes is a
    /// piece of its own, the rest is encoded into one buffer of the size computed for it.
    fn frame<R: Request>(&self, req: &R, version: i16, shared: &[Bytes]) -> Result<(Vec<Bytes>, i32, ApiKey)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let key = ApiKey::try_from(R::KEY).map_err(|_| anyhow!("unknown api key {}", R::KEY))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let header_version = key.request_header_version(version);
        let shared: Vec<(Bytes, Bytes)> =
            shared.iter().filter(|b| b.len() >= SHARE_MIN).map(|b| (b.clone(), b.clone())).collect();
        let frame = encode_frame(&header, header_version, req, version, &shared)
            .map_err(|e| anyhow!("encoding {key:?} v{version}: {e}"))?;
        Ok((frame, id, key))
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
        self.send_sharing(req, version, &[]).await
    }

    /// [`Connection::send`] of a request whose byte fields `shared` (its records, in the
    /// order the request holds them) go to the socket as they are, not copied into the
    /// frame first: a produce request of 1.5 MB was one more copy of every byte sent.
    pub async fn send_sharing<R: Request>(
        &self,
        req: &R,
        version: i16,
        shared: &[Bytes],
    ) -> Result<impl Future<Output = Result<(R::Response, Instant)>> + Send + 'static> {
        let permit = self.in_flight.clone().acquire_owned().await.map_err(|_| anyhow!("connection closed"))?;
        let (frame, id, key) = self.frame(req, version, shared)?;
        let (tx, rx) = oneshot::channel();
        let header_version = key.response_header_version(version);
        let waiter = (id, header_version, tx, permit);
        self.out.put(frame, Some(waiter)).await?;
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
    use kafka_protocol::protocol::Encodable;
    use tokio::net::TcpListener;

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
    async fn either_writer_sends_pipelined_requests_in_order() {
        for writer in [Writer::Runtime, Writer::Caller] {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("address").to_string();
            let server = tokio::spawn(answer_all(listener));
            let conn = Connection::connect_with(&addr, "test", 5, writer).await.expect("connect");
            let mut answers = Vec::new();
            for _ in 0..20 {
                answers.push(conn.send(&ApiVersionsRequest::default(), 0).await.expect("send"));
            }
            // Each answer was matched to its request by correlation id, in order.
            for a in answers {
                assert_eq!(a.await.expect("answer").0.error_code, 0, "{writer:?}");
            }
            drop(conn);
            // The server saw the connection end.
            server.await.expect("server");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_request_with_shared_records_goes_out_as_the_one_buffer_encoding() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::ProduceRequest;
        // Records large enough to be shared, one too small to be, and one empty.
        let records: Vec<Bytes> = [70_000usize, 100, SHARE_MIN, 0, 200_000]
            .iter()
            .enumerate()
            .map(|(i, n)| Bytes::from((0..*n).map(|j| (i * 7 + j) as u8).collect::<Vec<u8>>()))
            .collect();
        let parts = records
            .iter()
            .enumerate()
            .map(|(i, r)| PartitionProduceData::default().with_index(i as i32).with_records(Some(r.clone())))
            .collect();
        let req = ProduceRequest::default().with_acks(0).with_topic_data(vec![TopicProduceData::default()
            .with_name(crate::topic_name("t"))
            .with_partition_data(parts)]);
        for writer in [Writer::Runtime, Writer::Caller] {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("address").to_string();
            let server = tokio::spawn(async move {
                let (mut s, _) = listener.accept().await.expect("accept");
                let mut all = Vec::new();
                s.read_to_end(&mut all).await.expect("read");
                all
            });
            let conn = Connection::connect_with(&addr, "test", 5, writer).await.expect("connect");
            let (pieces, _, _) = conn.frame(&req, 9, &records).expect("frame");
            let kept =
                pieces.iter().filter(|p| records.iter().any(|r| r.len() >= SHARE_MIN && r.as_ptr() == p.as_ptr()));
            assert_eq!(kept.count(), 3, "the three large records are pieces of their own ({writer:?})");
            conn.send_no_reply(&req, 9, &records).await.expect("send shared");
            conn.send_no_reply(&req, 9, &[]).await.expect("send copied");
            drop(conn);
            let all = server.await.expect("server");
            let frame_len = all.len() / 2;
            assert_eq!(all.len(), 2 * frame_len);
            let (shared, copied) = all.split_at(frame_len);
            // The frames differ only in their correlation id (bytes 8..12 of each).
            assert_eq!(shared[..8], copied[..8], "{writer:?}");
            assert_eq!(shared[12..], copied[12..], "{writer:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_callers_send_dropped_mid_frame_closes_the_connection_to_later_sends() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::ProduceRequest;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        // Accepts and never reads: a large frame cannot be written whole.
        let server = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
        let conn = Connection::connect_with(&addr, "test", 5, Writer::Caller).await.expect("connect");
        let records = Bytes::from(vec![0u8; 64 << 20]);
        let big = ProduceRequest::default().with_topic_data(vec![TopicProduceData::default()
            .with_partition_data(vec![PartitionProduceData::default().with_records(Some(records))])]);
        let sent = tokio::time::timeout(std::time::Duration::from_millis(200), conn.send(&big, 9)).await;
        assert!(sent.is_err(), "64 MB went into a socket nobody reads");
        // The stream may end inside that frame: nothing may follow it.
        let next = conn.send(&ApiVersionsRequest::default(), 0).await;
        assert!(next.is_err());
        drop(server);
    }
}
