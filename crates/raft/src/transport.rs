//! Raft traffic between brokers. [`Transport`] is what the driver sends through;
//! [`TcpTransport`] is a broker's: one TCP connection per peer, carrying the messages of
//! every group batched into frames. (The simulator's in-memory one is in
//! `tests/sim_driver.rs`.)
//!
//! Frame: `u32` length, then messages, each `u64` group id, `u32` length, protobuf bytes.
//! Sending never blocks the driver: each peer has a bounded queue, and a message that
//! does not fit is dropped (Raft resends what matters). A broken connection is redialled.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use protobuf::Message as _;
use raft::eraftpb::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Queued messages per peer before new ones are dropped.
pub const PEER_QUEUE_MAX: usize = 16_384;
/// Largest frame accepted from a peer.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// A writer gathers queued messages into one frame up to this size.
const FRAME_TARGET_BYTES: usize = 1 << 20;

/// A message for one group.
pub type Envelope = (u64, Message);

/// Carries a driver's messages to its peers.
///
/// Contract: `send` neither blocks nor fails. The message goes to the driver whose Raft id
/// is `msg.to`, arriving there as `(group, msg)` on its inbound queue, or it is lost: one
/// for an unknown peer, or one that does not fit a queue, is dropped. Messages may also be
/// delayed, duplicated or reordered; Raft tolerates all of it and resends what matters.
/// Whoever builds a transport also feeds the driver's inbound queue with what arrives.
pub trait Transport: Send + Sync {
    fn send(&self, group: u64, msg: Message);
}

pub struct TcpTransport {
    peers: HashMap<u64, mpsc::Sender<Envelope>>,
    /// Keeps the driver's inbound queue open when nothing listens (a cluster of one).
    _inbound: mpsc::Sender<Envelope>,
}

impl TcpTransport {
    /// Listens on `listen` (if given) and dials each of `peers` (Raft id -> address).
    /// Inbound messages go to `inbound`; when it is full they are dropped.
    pub async fn start(
        listen: Option<&str>,
        peers: HashMap<u64, String>,
        inbound: mpsc::Sender<Envelope>,
    ) -> io::Result<TcpTransport> {
        if let Some(listen) = listen {
            let listener = TcpListener::bind(listen).await?;
            tokio::spawn(accept_loop(listener, inbound.clone()));
        }
        let mut senders = HashMap::new();
        for (id, addr) in peers {
            let (tx, rx) = mpsc::channel(PEER_QUEUE_MAX);
            tokio::spawn(peer_writer(addr, rx));
            senders.insert(id, tx);
        }
        Ok(TcpTransport { peers: senders, _inbound: inbound })
    }
}

impl Transport for TcpTransport {
    fn send(&self, group: u64, msg: Message) {
        if let Some(tx) = self.peers.get(&msg.to) {
            let _ = tx.try_send((group, msg));
        }
    }
}

async fn peer_writer(addr: String, mut rx: mpsc::Receiver<Envelope>) {
    let mut frame = BytesMut::new();
    loop {
        let mut stream = match TcpStream::connect(&addr).await {
            Ok(s) => s,
            Err(e) => {
                debug!(%addr, error = %e, "peer not reachable");
                // Messages queued meanwhile are stale by the time the peer is back.
                tokio::time::sleep(Duration::from_millis(200)).await;
                while rx.try_recv().is_ok() {}
                if rx.is_closed() {
                    return;
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        loop {
            let Some(first) = rx.recv().await else { return };
            frame.clear();
            frame.put_u32(0);
            encode(&mut frame, &first);
            while frame.len() < FRAME_TARGET_BYTES {
                match rx.try_recv() {
                    Ok(m) => encode(&mut frame, &m),
                    Err(_) => break,
                }
            }
            let len = (frame.len() - 4) as u32;
            frame[..4].copy_from_slice(&len.to_be_bytes());
            if let Err(e) = stream.write_all(&frame).await {
                debug!(%addr, error = %e, "peer connection lost");
                break;
            }
        }
    }
}

fn encode(frame: &mut BytesMut, (group, msg): &Envelope) {
    let bytes = msg.write_to_bytes().unwrap_or_default();
    frame.put_u64(*group);
    frame.put_u32(bytes.len() as u32);
    frame.put_slice(&bytes);
}

async fn accept_loop(listener: TcpListener, inbound: mpsc::Sender<Envelope>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(peer_reader(stream, inbound.clone()));
            }
            Err(e) => {
                warn!(error = %e, "accepting a peer connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn peer_reader(mut stream: TcpStream, inbound: mpsc::Sender<Envelope>) {
    let mut buf = Vec::new();
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
        buf.resize(len, 0);
        if stream.read_exact(&mut buf).await.is_err() {
            return;
        }
        let decoded = decode_frame(&buf, |envelope| {
            let _ = inbound.try_send(envelope);
        });
        if let Err(e) = decoded {
            warn!(error = %e, "malformed peer frame; closing the connection");
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
/// Fewer than 12 bytes left at the end are ignored.
pub fn decode_frame(mut b: &[u8], mut deliver: impl FnMut(Envelope)) -> Result<(), MalformedFrame> {
    while b.remaining() >= 12 {
        let group = b.get_u64();
        let n = b.get_u32() as usize;
        if n > b.remaining() {
            return Err(MalformedFrame);
        }
        match Message::parse_from_bytes(&b[..n]) {
            Ok(m) => deliver((group, m)),
            Err(e) => warn!(error = %e, "undecodable Raft message"),
        }
        b.advance(n);
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
        let sent = vec![(7, m(2, 5)), (u64::MAX, m(3, 0))];
        let mut got = Vec::new();
        decode_frame(&frame(&sent), |e| got.push(e)).expect("well-formed");
        assert_eq!(got, sent);
        // Fewer than 12 trailing bytes are ignored, as they always were.
        let mut short = frame(&sent);
        short.extend_from_slice(&[0; 11]);
        assert_eq!(decode_frame(&short, |_| {}), Ok(()));
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
        assert_eq!(decode_frame(&b, |_| got += 1), Err(MalformedFrame));
        assert_eq!(got, 1);
        let mut garbage = 5u64.to_be_bytes().to_vec();
        garbage.extend_from_slice(&3u32.to_be_bytes());
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert_eq!(decode_frame(&garbage, |_| got += 1), Ok(()));
        assert_eq!(got, 1);
    }
}
