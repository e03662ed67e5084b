//! Raft traffic between brokers. [`Transport`] is what the driver sends through;
//! [`TcpTransport`] is a broker's: one TCP connection per peer, carrying the messages of
//! every group batched into frames. (The simulator's in-memory one is in
//! `tests/sim_driver.rs`.)
//!
//! Frame: `u32` length, then messages, each `u64` group id, `u32` length, protobuf bytes.
//! Sending never blocks the driver: each peer has a queue bounded in messages and bytes
//! ([`crate::queue`]), and a message that does not fit is dropped (Raft resends what
//! matters). A broken connection is redialled.
//!
//! With [`PeerTls`], connections both ways are mutual TLS: a peer must present a
//! certificate the cluster's trust store signed, or it cannot connect. Whatever the
//! transport, every message on one connection must come from one sender: a connection
//! whose messages name a second sender is closed.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protobuf::Message as _;
use raft::eraftpb::Message;
use runnel_security::{ClientTls, ServerTls, TlsAcceptor, TlsConnector};
use runnel_sync::RwLockExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tracing::{debug, warn};

pub use crate::queue::Envelope;
use crate::queue::{self, Receiver, Sender};

/// Queued messages per peer before new ones are dropped.
pub const PEER_QUEUE_MAX: usize = 16_384;
/// Queued bytes per peer before new messages are dropped.
pub const PEER_QUEUE_BYTES_MAX: usize = 32 << 20;
/// Largest frame accepted from a peer.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// A writer gathers queued messages into one frame up to this size.
const FRAME_TARGET_BYTES: usize = 1 << 20;

/// A frame buffer that a burst (a catch-up, a snapshot) grew past this is given back once
/// that frame is done, rather than kept for the connection's life: kept, each would hold
/// the largest frame seen so far, and a broker's memory would creep up with every new
/// record burst (heap profiles under chaos showed it). Steady traffic under this size
/// reuses its buffer.
const FRAME_BUFFER_KEEP_BYTES: usize = 64 << 10;

/// How long a connection to a peer may take to open. A peer cut off (its link down, its
/// packets dropped) never answers, and the kernel would retry its SYN for minutes with
/// growing gaps: the connection after the peer returns would wait for the next retry.
const DIAL_MAX: Duration = Duration::from_secs(1);

/// How long data written to a peer may stay unacknowledged before the connection is given
/// up (TCP_USER_TIMEOUT). Without it, writes to a peer that was cut off fill the socket
/// buffer and wait on TCP's retransmissions, whose gaps double to minutes: once the peer
/// is back, nothing would reach it until the next one. Heartbeats keep data in flight, so
/// a dead connection is noticed within this time and dialled again.
const UNACKNOWLEDGED_MAX: Duration = Duration::from_secs(4);

/// Sets TCP_USER_TIMEOUT on `stream` (Linux; elsewhere nothing).
fn give_up_unacknowledged_after(stream: &TcpStream, after: Duration) {
    #[cfg(target_os = "linux")]
    set_int_option(stream, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, after.as_millis().min(i32::MAX as u128) as i32);
    #[cfg(not(target_os = "linux"))]
    let _ = (stream, after);
}

/// An inbound connection only reads, and two brokers that share no Raft group send each
/// other nothing: a connection whose peer was cut off would wait for good. TCP keepalive
/// probes (after 10 s of silence, every 5 s, 3 of them) close it once the peer is gone.
fn probe_when_silent(stream: &TcpStream) {
    #[cfg(target_os = "linux")]
    for (level, name, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
    ] {
        set_int_option(stream, level, name, value);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = stream;
}

#[cfg(target_os = "linux")]
fn set_int_option(stream: &TcpStream, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket descriptor and a c_int option value of the right size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        debug!(level, name, error = %io::Error::last_os_error(), "socket option not set");
    }
}

/// How long a peer gets to finish a TLS handshake.
const TLS_HANDSHAKE_MAX: Duration = Duration::from_secs(10);

/// Mutual TLS between brokers: what the Raft listener presents and requires (its client
/// authentication must be `required`), and what this broker presents when it dials.
#[derive(Clone)]
pub struct PeerTls {
    pub server: Arc<ServerTls>,
    pub client: Arc<ClientTls>,
}

type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// Kernel buffer sizes for sockets (`socket.send.buffer.bytes`,
/// `socket.receive.buffer.bytes`). A size of 0 or less leaves the kernel's, which Linux
/// grows with each connection's bandwidth-delay product (up to `net.ipv4.tcp_wmem` and
/// `tcp_rmem`'s maximum): what a link across regions needs. A fixed size turns that
/// autotuning off for the socket; the receive size is set before listen or connect, so the
/// TCP window scale covers it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketBuffers {
    pub send: i32,
    pub receive: i32,
}

impl SocketBuffers {
    fn socket_for(&self, addr: SocketAddr) -> io::Result<TcpSocket> {
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        if self.send > 0 {
            socket.set_send_buffer_size(self.send as u32)?;
        }
        if self.receive > 0 {
            socket.set_recv_buffer_size(self.receive as u32)?;
        }
        Ok(socket)
    }

    /// A listener on `addr` whose accepted connections get these buffers.
    pub fn listen(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        let socket = self.socket_for(addr)?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(1024)
    }

    /// A connection to `addr` (host:port, resolved) with these buffers.
    pub async fn connect(&self, addr: &str) -> io::Result<TcpStream> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{addr}: no address"));
        for a in tokio::net::lookup_host(addr).await? {
            match self.socket_for(a)?.connect(a).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// How a broker's connections to its peers are made: mutual TLS or plaintext, and their
/// socket buffers.
#[derive(Clone, Default)]
pub struct PeerLinks {
    pub tls: Option<PeerTls>,
    pub buffers: SocketBuffers,
}

/// Carries a driver's messages to its peers.
///
/// Contract: `send` neither blocks nor fails. The message goes to the driver whose Raft id
/// is `msg.to`, arriving there as `(group, msg)` on its inbound queue, or it is lost: one
/// for an unknown peer, or one that does not fit a queue, is dropped. Messages may also be
/// delayed, duplicated or reordered; Raft tolerates all of it and resends what matters.
/// Whoever builds a transport also feeds the driver's inbound queue with what arrives.
pub trait Transport: Send + Sync {
    fn send(&self, group: u64, msg: Message);

    /// From now on, messages to Raft id `id` go to `addr` (a broker that registered after
    /// this one started, or moved). Transports whose peers are fixed ignore it.
    fn add_peer(&self, _id: u64, _addr: &str) {}
}

/// One peer's queue and the address its writer dials.
struct Peer {
    addr: String,
    tx: Sender,
}

pub struct TcpTransport {
    /// Read on every send, written when a peer is added: no other lock is taken under it.
    peers: std::sync::RwLock<HashMap<u64, Peer>>,
    links: PeerLinks,
    /// Keeps the driver's inbound queue open when nothing listens (a cluster of one).
    _inbound: Sender,
}

impl TcpTransport {
    /// Listens on `listen` (if given) and dials each of `peers` (Raft id -> address).
    /// Inbound messages go to `inbound`; when it is full they are dropped.
    pub async fn start(
        listen: Option<&str>,
        peers: HashMap<u64, String>,
        inbound: Sender,
        links: PeerLinks,
    ) -> io::Result<TcpTransport> {
        if let Some(listen) = listen {
            let mut addrs = tokio::net::lookup_host(listen).await?;
            let addr = addrs.next().ok_or_else(|| io::Error::other(format!("{listen}: no address")))?;
            let listener = links.buffers.listen(addr)?;
            tokio::spawn(accept_loop(listener, inbound.clone(), links.tls.as_ref().map(|t| t.server.clone())));
        }
        let transport = TcpTransport { peers: std::sync::RwLock::new(HashMap::new()), links, _inbound: inbound };
        for (id, addr) in peers {
            transport.add_peer(id, &addr);
        }
        Ok(transport)
    }

    /// A queue to `addr` and the writer task that drains it.
    fn peer(&self, addr: &str) -> Peer {
        let (tx, rx) = queue::channel(PEER_QUEUE_MAX, PEER_QUEUE_BYTES_MAX);
        let tls = self.links.tls.as_ref().map(|t| t.client.clone());
        tokio::spawn(peer_writer(addr.to_string(), rx, tls, self.links.buffers));
        Peer { addr: addr.to_string(), tx }
    }
}

impl Transport for TcpTransport {
    fn send(&self, group: u64, msg: Message) {
        if let Some(p) = self.peers.read_or_stop().get(&msg.to) {
            p.tx.try_send((group, msg));
        }
    }

    /// A new peer gets a writer; a peer at a new address gets a new one, and the old
    /// writer ends once its queue's sender is dropped.
    fn add_peer(&self, id: u64, addr: &str) {
        if self.peers.read_or_stop().get(&id).is_some_and(|p| p.addr == addr) {
            return;
        }
        let peer = self.peer(addr);
        let old = self.peers.write_or_stop().insert(id, peer);
        drop(old);
    }
}

/// Connects to a peer, with TLS when configured.
async fn dial(addr: &str, tls: Option<&ClientTls>, buffers: SocketBuffers) -> io::Result<Writer> {
    let stream = tokio::time::timeout(DIAL_MAX, buffers.connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connecting took too long"))??;
    let _ = stream.set_nodelay(true);
    give_up_unacknowledged_after(&stream, UNACKNOWLEDGED_MAX);
    let Some(tls) = tls else { return Ok(Box::new(stream)) };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']);
    let name = rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("peer address {addr}: {e}")))?;
    let connect = TlsConnector::from(tls.current()).connect(name, stream);
    match tokio::time::timeout(TLS_HANDSHAKE_MAX, connect).await {
        Ok(Ok(s)) => Ok(Box::new(s)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake did not finish in time")),
    }
}

async fn peer_writer(addr: String, mut rx: Receiver, tls: Option<Arc<ClientTls>>, buffers: SocketBuffers) {
    let mut frame = BytesMut::new();
    loop {
        let mut stream = match dial(&addr, tls.as_deref(), buffers).await {
            Ok(s) => s,
            Err(e) => {
                debug!(%addr, error = %e, "peer not reachable");
                // Messages queued meanwhile are stale by the time the peer is back.
                tokio::time::sleep(Duration::from_millis(200)).await;
                rx.clear();
                if rx.is_closed() {
                    return;
                }
                continue;
            }
        };
        loop {
            let Some(first) = rx.recv().await else { return };
            frame.clear();
            frame.put_u32(0);
            encode(&mut frame, &first);
            while frame.len() < FRAME_TARGET_BYTES {
                match rx.try_recv() {
                    Some(m) => encode(&mut frame, &m),
                    None => break,
                }
            }
            let len = (frame.len() - 4) as u32;
            frame[..4].copy_from_slice(&len.to_be_bytes());
            if let Err(e) = async {
                stream.write_all(&frame).await?;
                stream.flush().await
            }
            .await
            {
                debug!(%addr, error = %e, "peer connection lost");
                break;
            }
            if frame.capacity() > FRAME_BUFFER_KEEP_BYTES {
                frame = BytesMut::new();
            }
        }
    }
}

/// Appends one message to `frame`, encoded in place.
fn encode(frame: &mut BytesMut, (group, msg): &Envelope) {
    let len = msg.compute_size();
    let at = frame.len();
    frame.put_u64(*group);
    frame.put_u32(len);
    let body = frame.len();
    frame.resize(body + len as usize, 0);
    let mut out = protobuf::CodedOutputStream::bytes(&mut frame[body..]);
    if msg.write_to_with_cached_sizes(&mut out).and_then(|()| out.flush()).is_err() {
        // Cannot happen for a size just computed; the message is left out if it does.
        frame.truncate(at);
    }
}

async fn accept_loop(listener: TcpListener, inbound: Sender, tls: Option<Arc<ServerTls>>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                probe_when_silent(&stream);
                let (inbound, tls) = (inbound.clone(), tls.clone());
                tokio::spawn(async move {
                    let Some(tls) = tls else { return peer_reader(Box::new(stream), inbound).await };
                    let accept = TlsAcceptor::from(tls.current()).accept(stream);
                    match tokio::time::timeout(TLS_HANDSHAKE_MAX, accept).await {
                        Ok(Ok(s)) => peer_reader(Box::new(s), inbound).await,
                        Ok(Err(e)) => tracing::info!(%peer, error = %e, "peer TLS handshake failed"),
                        Err(_) => tracing::info!(%peer, "peer TLS handshake did not finish in time"),
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "accepting a peer connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn peer_reader(mut stream: Reader, inbound: Sender) {
    let mut sender = None;
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).await.is_err() {
            return;
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > FRAME_BYTES_MAX {
            warn!(len, "peer frame too large; closing the connection");
            return;
        }
        // A buffer of its own per frame: the messages decoded from it keep slices of it
        // (an entry's batch is not copied on its way to this replica's log), and it is
        // freed when the last of them is dropped.
        let mut frame = BytesMut::with_capacity(len);
        while frame.len() < len {
            let left = len - frame.len();
            match stream.read_buf(&mut (&mut frame).limit(left)).await {
                Ok(n) if n > 0 => {}
                _ => return,
            }
        }
        let mut impostor = None;
        let mut messages = Vec::new();
        let decoded = decode_frame(&frame.freeze(), |envelope| {
            if impostor.is_some() || *sender.get_or_insert(envelope.1.from) != envelope.1.from {
                impostor.get_or_insert(envelope.1.from);
                return;
            }
            messages.push(envelope);
        });
        // The messages keep slices of the frame, which lives as long as any of them: each
        // counts against the queue's byte bound for its share of the whole frame, whatever
        // else it held (messages that did not decode), so the bound still covers memory.
        let sizes: Vec<usize> = messages.iter().map(|(_, m)| queue::size_of(m)).collect();
        let total = sizes.iter().sum::<usize>().max(1);
        for (envelope, size) in messages.into_iter().zip(sizes) {
            let share = (size as u128 * len as u128 / total as u128) as usize;
            inbound.try_send_counted(envelope, share.max(size));
        }
        if let Err(e) = decoded {
            warn!(error = %e, "malformed peer frame; closing the connection");
            return;
        }
        if let Some(other) = impostor {
            warn!(sender = ?sender, other, "a peer connection carried messages from two senders; closing it");
            return;
        }
    }
}

/// A frame whose message lengths run past its end: the connection is closed.
#[derive(Debug, PartialEq, Eq)]
pub struct MalformedFrame;

impl std::fmt::Display for MalformedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a message length runs past the end of the frame")
    }
}

/// Splits one frame from a peer (the bytes after its length) into its messages and hands
/// each one that decodes to `deliver`, in order; one that does not decode is skipped.
/// Fewer than 12 bytes left at the end are ignored. The messages' byte fields (entries'
/// data) are slices of `frame`, not copies.
pub fn decode_frame(frame: &Bytes, mut deliver: impl FnMut(Envelope)) -> Result<(), MalformedFrame> {
    let mut b = frame.clone();
    while b.remaining() >= 12 {
        let group = b.get_u64();
        let n = b.get_u32() as usize;
        if n > b.remaining() {
            return Err(MalformedFrame);
        }
        match Message::parse_from_carllerche_bytes(&b.split_to(n)) {
            Ok(m) => deliver((group, m)),
            Err(e) => warn!(error = %e, "undecodable Raft message"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(envelopes: &[Envelope]) -> Vec<u8> {
        let mut b = BytesMut::new();
        for e in envelopes {
            encode(&mut b, e);
        }
        b.to_vec()
    }

    #[test]
    fn frames_split_into_their_messages() {
        let m = |to, commit| Message { to, commit, ..Default::default() };
        let entry = raft::eraftpb::Entry { index: 9, term: 2, data: vec![7u8; 3000].into(), ..Default::default() };
        let append = Message { entries: vec![entry].into(), ..m(2, 8) };
        let sent = vec![(7, m(2, 5)), (8, append), (u64::MAX, m(3, 0))];
        let mut got = Vec::new();
        decode_frame(&frame(&sent).into(), |e| got.push(e)).expect("well-formed");
        assert_eq!(got, sent);
        // Fewer than 12 trailing bytes are ignored, as they always were.
        let mut short = frame(&sent);
        short.extend_from_slice(&[0; 11]);
        assert_eq!(decode_frame(&short.into(), |_| {}), Ok(()));
    }

    /// The `raft_transport` fuzz target drives this (docs/fuzzing.md): a message length
    /// past the frame closes the connection; a message that does not decode is skipped.
    #[test]
    fn a_length_past_the_frame_is_malformed_and_garbage_is_skipped() {
        let mut b = frame(&[(1, Message::default())]);
        b.extend_from_slice(&9u64.to_be_bytes());
        b.extend_from_slice(&1000u32.to_be_bytes());
        b.extend_from_slice(&[0; 20]);
        let mut got = 0;
        assert_eq!(decode_frame(&b.into(), |_| got += 1), Err(MalformedFrame));
        assert_eq!(got, 1);
        let mut garbage = 5u64.to_be_bytes().to_vec();
        garbage.extend_from_slice(&3u32.to_be_bytes());
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert_eq!(decode_frame(&garbage.into(), |_| got += 1), Ok(()));
        assert_eq!(got, 1);
    }

    /// One connection speaks for one sender: a message naming another one closes it, and
    /// neither it nor anything after it is delivered.
    #[tokio::test]
    async fn a_connection_that_names_a_second_sender_is_closed() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let addr = format!("127.0.0.1:{port}");
        let (tx, mut rx) = queue::channel(16, 1 << 20);
        let _t = TcpTransport::start(Some(&addr), HashMap::new(), tx, PeerLinks::default()).await.expect("listen");
        let mut conn = TcpStream::connect(&addr).await.expect("connect");
        let m = |from| Message { to: 1, from, ..Default::default() };
        let send = |envelopes: Vec<Envelope>| {
            let body = frame(&envelopes);
            let mut out = (body.len() as u32).to_be_bytes().to_vec();
            out.extend_from_slice(&body);
            out
        };
        conn.write_all(&send(vec![(1, m(2)), (1, m(2))])).await.expect("write");
        conn.write_all(&send(vec![(1, m(2)), (1, m(3)), (1, m(2))])).await.expect("write");
        let mut got = Vec::new();
        while let Ok(Some((_, msg))) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
            got.push(msg.from);
        }
        assert_eq!(got, vec![2, 2, 2]);
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut byte)).await.expect("closed in time");
        assert!(matches!(closed, Ok(0) | Err(_)), "the connection stays open: {closed:?}");
    }
}
