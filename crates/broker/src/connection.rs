//! One client connection: size-prefixed frames in, responses out in request order.
//!
//! The reader decodes each request and runs its handler up to the point where it would
//! wait (so appends from one connection happen in the order they were sent); the writer
//! awaits the replies in order. The queue between them is bounded by
//! `queued.max.requests.per.connection`, which is also how a client that pipelines too
//! much is slowed down; and the bytes of every frame read and not yet answered, over all
//! connections, are bounded by `queued.max.request.bytes` (a reader waits for room before
//! it reads the next frame), and a connection that sends nothing, or not the rest of a
//! frame, for `connections.max.idle.ms` is closed. A frame that cannot be decoded ends
//! this connection, never the process, and so does a panic in this connection's tasks
//! (they run as `runnel_sync::restartable`: they own no shared state).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use crate::broker::Broker;
use crate::ctx::{Reply, Session};
use crate::dispatch;
use crate::out_frame::{encode_response, OutFrame, Piece};
use crate::sendfile::{FileRecords, FileSink};

type Framed = std::pin::Pin<Box<dyn std::future::Future<Output = Option<OutFrame>> + Send>>;

/// A reply on its way out, with the room its request took in `queued.max.request.bytes`.
type Queued = (Framed, OwnedSemaphorePermit);

/// The room for request frames read and not yet answered (`queued.max.request.bytes`),
/// shared by every connection of a listener.
pub fn request_bytes_pool(broker: &Broker) -> Arc<Semaphore> {
    let max = broker.config.settings.i64("queued.max.request.bytes");
    Arc::new(Semaphore::new(if max <= 0 { Semaphore::MAX_PERMITS } else { (max as usize).min(Semaphore::MAX_PERMITS) }))
}

/// The listener a connection came in through: its name (Metadata answers with the
/// addresses advertised for it), its TLS configuration (SSL, SASL_SSL) and its SASL
/// logins (SASL_PLAINTEXT, SASL_SSL).
pub struct Entry {
    pub name: Arc<str>,
    pub tls: Option<Arc<runnel_security::ServerTls>>,
    /// ssl.principal.mapping.rules: a TLS client's certificate subject to its principal.
    pub principal_rules: Option<Arc<runnel_security::principal::PrincipalRules>>,
    pub sasl: Option<Arc<runnel_security::SaslServer>>,
}

/// How long a client gets to finish its TLS handshake.
const TLS_HANDSHAKE_MS_MAX: u64 = 10_000;

pub async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    entry: Arc<Entry>,
    mut shutdown: watch::Receiver<bool>,
    pool: Arc<Semaphore>,
) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = &entry.tls else {
        let (rd, wr) = stream.into_split();
        let anonymous = crate::authz::ANONYMOUS.into();
        return serve_halves(broker, rd, wr, peer, &entry, anonymous, shutdown, pool, true).await;
    };
    let acceptor = runnel_security::TlsAcceptor::from(tls.current());
    let handshake =
        tokio::time::timeout(std::time::Duration::from_millis(TLS_HANDSHAKE_MS_MAX), acceptor.accept(stream));
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(s)) => s,
            // A plaintext client, a client that does not trust our certificate, or one
            // whose certificate we do not trust: one line, and the connection closes.
            Ok(Err(e)) => { info!(%peer, listener = %entry.name, error = %e, "TLS handshake failed"); return; }
            Err(_) => { info!(%peer, listener = %entry.name, "TLS handshake did not finish in time"); return; }
        },
        _ = shutdown.changed() => return,
    };
    let principal = match certificate_principal(&stream, entry.principal_rules.as_deref()) {
        Ok(p) => p,
        Err(why) => {
            info!(%peer, listener = %entry.name, %why, "closing connection: no principal for the client certificate");
            return;
        }
    };
    let (rd, wr) = tokio::io::split(stream);
    serve_halves(broker, rd, wr, peer, &entry, principal, shutdown, pool, false).await
}

/// As Kafka: a TLS client with a certificate is `User:` and its subject's distinguished name
/// as ssl.principal.mapping.rules rewrite it; one without is `User:ANONYMOUS`. A SASL login
/// on the connection replaces it.
fn certificate_principal(
    stream: &runnel_security::TlsStream<TcpStream>,
    rules: Option<&runnel_security::principal::PrincipalRules>,
) -> Result<Arc<str>, String> {
    let Some(cert) = stream.get_ref().1.peer_certificates().and_then(|c| c.first()) else {
        return Ok(crate::authz::ANONYMOUS.into());
    };
    let dn = runnel_security::principal::subject_name(cert)?;
    let name = match rules {
        Some(rules) => {
            rules.apply(&dn).ok_or_else(|| format!("no ssl.principal.mapping.rules rule applies to {dn}"))?
        }
        None => dn,
    };
    Ok(format!("User:{name}").into())
}

#[allow(clippy::too_many_arguments)]
async fn serve_halves<R, W>(
    broker: Arc<Broker>,
    rd: R,
    wr: W,
    peer: SocketAddr,
    entry: &Entry,
    principal: Arc<str>,
    mut shutdown: watch::Receiver<bool>,
    pool: Arc<Semaphore>,
    sendfile: bool,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + FileSink + Unpin + Send + 'static,
{
    let inflight_max = broker.config.settings.usize("queued.max.requests.per.connection").max(1);
    let (tx, rx) = mpsc::channel::<Queued>(inflight_max);
    let registered = broker.requests.register(peer);
    let _counted = runnel_metrics::get().connection(&entry.name);
    let writer =
        tokio::spawn(runnel_sync::restartable("client connection", write_loop(wr, rx, registered.connection.clone())));
    let request_bytes_max = broker.config.settings.i64("socket.request.max.bytes");
    let pool_bytes = broker.config.settings.i64("queued.max.request.bytes");
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let idle = std::time::Duration::from_millis(broker.config.settings.i64("connections.max.idle.ms").max(1) as u64);
    let sasl_receive_max = broker.config.settings.usize("sasl.server.max.receive.size");
    let reauth_ms = broker.config.settings.for_listener(&entry.name, "connections.max.reauth.ms").parse().unwrap_or(0);
    let mut gate = entry.sasl.clone().map(|s| crate::sasl_gate::Gate::new(s, sasl_receive_max, reauth_ms));
    let listener = &entry.name;
    let mut session = Session {
        peer,
        listener: listener.clone(),
        principal,
        mute: Arc::default(),
        deferred: Arc::default(),
        sendfile,
    };
    loop {
        let size = tokio::select! {
            r = rd.read_i32() => match r {
                Ok(size) => size,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => { debug!(%peer, error = %e, "read failed"); break; }
            },
            _ = shutdown.changed() => break,
            _ = tokio::time::sleep(idle) => {
                debug!(%peer, "closing connection: idle for connections.max.idle.ms");
                break;
            }
        };
        if size < 8 || size as i64 > request_bytes_max {
            warn!(%peer, size, request_bytes_max, "closing connection: frame size outside [8, socket.request.max.bytes]");
            break;
        }
        if gate.as_ref().is_some_and(|g| !g.admits(size as usize)) {
            warn!(%peer, size, sasl_receive_max, "closing connection: frame before authentication larger than sasl.server.max.receive.size");
            break;
        }
        if pool_bytes > 0 && size as i64 > pool_bytes {
            warn!(%peer, size, pool_bytes, "closing connection: frame larger than queued.max.request.bytes");
            break;
        }
        // Room for the frame before it is read: under a flood, readers wait here and TCP
        // pushes back on the clients.
        let permit = tokio::select! {
            p = pool.clone().acquire_many_owned(size as u32) => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.changed() => break,
        };
        let mut frame = BytesMut::with_capacity(size as usize);
        // A frame that does not arrive whole within the idle limit gives its room back.
        match tokio::time::timeout(idle, read_frame(&mut rd, &mut frame, size as usize)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                debug!(%peer, error = %e, "connection closed mid-frame");
                break;
            }
            Err(_) => {
                warn!(%peer, size, "closing connection: a frame did not arrive within connections.max.idle.ms");
                break;
            }
        }
        let (key, version) = (i16::from_be_bytes([frame[0], frame[1]]), i16::from_be_bytes([frame[2], frame[3]]));
        let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let frame = frame.freeze();
        if let Some(g) = gate.as_mut() {
            use crate::sasl_gate::Step;
            let (resp, version, close) = match g.on_frame(&frame) {
                Step::Pass => (None, 0, false),
                Step::Reply(resp, v) => (Some(resp), v, false),
                Step::LoggedIn(resp, v, who) => {
                    info!(%peer, listener = %listener, principal = %who, "authenticated");
                    session.principal = who.into();
                    (Some(resp), v, false)
                }
                Step::ReplyAndClose(resp, v) => (Some(resp), v, true),
                // The gate turns these into LoggedIn.
                Step::LoggedInUntil(resp, v, ..) => (Some(resp), v, true),
                Step::Close(why) => {
                    info!(%peer, listener = %listener, %why, "closing connection: SASL");
                    break;
                }
            };
            if let Some(resp) = resp {
                let Ok(api) = ApiKey::try_from(key) else { break };
                let bytes = encode_response(api, version, correlation_id, &resp, Vec::new());
                if close {
                    info!(%peer, listener = %listener, api = ?api, "closing connection: SASL login refused");
                }
                registered.connection.started(key, version, correlation_id);
                if tx.send((Box::pin(std::future::ready(bytes)), permit)).await.is_err() || close {
                    break;
                }
                continue;
            }
        }
        // A client over its quota is muted (KIP-219): its next request waits out the mute.
        if let Some(until) = session.mute.until() {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = shutdown.changed() => break,
            }
        }
        match decode(&broker, frame, &session) {
            Ok(reply) => {
                registered.connection.started(key, version, correlation_id);
                if tx.send((reply, permit)).await.is_err() {
                    break;
                }
            }
            Err(why) => {
                warn!(%peer, %why, "closing connection: bad request");
                break;
            }
        }
    }
    drop(tx);
    // The writer drains the replies already queued, then the socket closes.
    let _ = writer.await;
    drop(registered);
    debug!(%peer, "connection closed");
}

async fn write_loop<W: AsyncWrite + FileSink + Unpin>(
    wr: W,
    mut rx: mpsc::Receiver<Queued>,
    inflight: Arc<crate::inflight::Connection>,
) {
    let mut wr = BufWriter::with_capacity(64 * 1024, wr);
    while let Some((reply, permit)) = rx.recv().await {
        let out = reply.await;
        inflight.answered();
        drop(permit);
        if let Some(frame) = out {
            for piece in frame.pieces() {
                let sent = match piece {
                    // A piece at least as large as the buffer goes to the socket directly.
                    Piece::Bytes(b) => wr.write_all(b).await,
                    Piece::File(f) => match wr.flush().await {
                        Ok(()) => wr.get_mut().send_file(f).await,
                        Err(e) => Err(e),
                    },
                };
                if let Err(e) = sent {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        warn!(error = %e, "closing connection: a fetch response could not be finished");
                    }
                    return;
                }
            }
        }
        if rx.is_empty() && wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.flush().await;
    let _ = wr.shutdown().await;
}

/// Handles one request frame (without its size prefix) to the end: the response frame
/// (with its size prefix), none (acks=0), or why the connection would be closed. The
/// fuzz tests drive the broker through this.
pub async fn handle_frame(broker: &Arc<Broker>, frame: Bytes, peer: SocketAddr) -> Result<Option<Bytes>, String> {
    let session = Session {
        peer,
        listener: broker.config.listeners[0].name.as_str().into(),
        principal: crate::authz::ANONYMOUS.into(),
        mute: Arc::default(),
        deferred: Arc::default(),
        sendfile: false,
    };
    match decode(broker, frame, &session)?.await {
        Some(frame) => frame.into_bytes().map(Some).map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

/// Parses one frame and starts its handler. An error means: close the connection.
fn decode(broker: &Arc<Broker>, mut frame: Bytes, session: &Session) -> Result<Framed, String> {
    if frame.len() < 8 {
        return Err(format!("frame of {} bytes is shorter than a request header", frame.len()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let key = ApiKey::try_from(raw_key).map_err(|_| format!("unknown API key {raw_key}"))?;
    if !dispatch::supported(key, version) {
        if key == ApiKey::ApiVersions {
            // KIP-511: answer an ApiVersions we cannot parse with a v0 response listing
            // what we support, so the client can pick a version and retry.
            let resp = dispatch::unsupported_version_response();
            let frame = encode_response(key, 0, correlation_id, &resp.into(), Vec::new());
            return Ok(Box::pin(std::future::ready(frame)));
        }
        return Err(format!("unsupported version {version} of {key:?}"));
    }
    let header = RequestHeader::decode(&mut frame, key.request_header_version(version))
        .map_err(|e| format!("bad {key:?} v{version} header: {e}"))?;
    let request =
        RequestKind::decode(key, &mut frame, version).map_err(|e| format!("bad {key:?} v{version} body: {e}"))?;
    if frame.has_remaining() {
        debug!(?key, version, trailing = frame.remaining(), "request has trailing bytes");
    }
    let api = runnel_metrics::get().api(raw_key, || format!("{key:?}"));
    api.requests.inc();
    let started = std::time::Instant::now();
    // Records a Fetch answer may send from files (plaintext connections): set by the handler.
    let files = session.sendfile.then(|| Arc::new(FileRecords::default()));
    let reply: Reply = dispatch::dispatch(broker, &header, request, session, files.clone());
    Ok(Box::pin(async move {
        let resp = reply.await;
        api.time.observe(started.elapsed().as_secs_f64());
        let resp = resp?;
        crate::metrics::count_errors(api, &resp);
        let files = files.map(|f| f.take()).unwrap_or_default();
        encode_response(key, version, correlation_id, &resp, files)
    }))
}

/// Reads the `len` bytes of a frame into `frame` (empty, with room for them) straight into
/// its spare room: zeroing a produce request's buffer first was a pass over every byte
/// produced (memset took 5-8% of a single broker's CPU in `runnel bench --profile-pid`).
async fn read_frame<R: AsyncRead + Unpin>(rd: &mut R, frame: &mut BytesMut, len: usize) -> std::io::Result<()> {
    let mut limited = rd.take(len as u64);
    while frame.len() < len {
        if limited.read_buf(frame).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}
