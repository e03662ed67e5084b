//! Latency between regions without netem: a delayer in userspace on NFQUEUE.
//!
//! In every namespace that has latency to other regions, iptables-legacy rules (`mangle`
//! table, [`CHAIN`]) send the packets that arrive from another region's block to NFQUEUE
//! queue [`QUEUE`]. The kernel keeps each such packet and tells a listener its id: this
//! module's thread for that namespace (one per namespace: a netlink socket belongs to the
//! namespace of the thread that created it) records when it arrived and accepts it (an
//! `NF_ACCEPT` verdict) once the one-way delay has passed, in arrival order: with jitter, a
//! packet is never released before the one queued before it, so TCP sees no reordering.
//! Only metadata crosses to userspace (`NFQNL_COPY_META`); the due packets are accepted
//! with one batch verdict. A packet is never let through undelayed: the queue does not fail
//! open, and without a listener the kernel drops it (TCP sends it again).
//!
//! The netlink messages (nlmsghdr, nfgenmsg, nlattr TLVs) are built and parsed here with
//! no library: a short or malformed message from the kernel is skipped.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The queue number, in every namespace (each has queues of its own).
pub const QUEUE: u16 = 1;
/// The chain of the `mangle` table the rules go to: packets are delayed on arrival, at their
/// receiver's ingress. Not at the sender's egress (OUTPUT): there a queued packet still
/// counts against its TCP socket, whose small-queue limit (about 1 ms of its pacing rate)
/// then caps a connection at a few hundred KB/s over a 30 ms round trip (measured: 0.4
/// MB/s, against 70 MB/s on arrival).
pub const CHAIN: &str = "PREROUTING";
/// The kernel's queue of delayed packets, per namespace: its default of 1024 drops packets
/// at a WAN bandwidth-delay product.
const QUEUE_MAXLEN: u32 = 100_000;
/// The netlink socket's receive buffer: a full buffer drops the packet the kernel meant to
/// report.
const RECEIVE_BUFFER: libc::c_int = 8 << 20;
/// How often an idle thread looks whether it should stop.
const IDLE: Duration = Duration::from_millis(50);

const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_MSG_VERDICT_BATCH: u16 = 3;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_META: u8 = 1;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
/// GSO packets are queued whole rather than cut into segments first: one verdict per
/// 64 KiB instead of per 1.5 KiB.
const NFQA_CFG_F_GSO: u32 = 4;
const NF_ACCEPT: u32 = 1;
/// nla_type's flag bits (NLA_F_NESTED, NLA_F_NET_BYTEORDER).
const NLA_TYPE_MASK: u16 = 0x3fff;

/// A netlink message to the queue subsystem: header, nfgenmsg (queue number, big-endian)
/// and attributes, each padded to 4 bytes.
fn message(kind: u16, flags: u16, seq: u32, queue: u16, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | kind).to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    b.extend_from_slice(&queue.to_be_bytes());
    for (kind, value) in attrs {
        b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        b.resize(b.len().next_multiple_of(4), 0);
    }
    let len = b.len() as u32;
    b[..4].copy_from_slice(&len.to_ne_bytes());
    b
}

/// Binds `queue` to this socket.
fn bind_message(seq: u32, queue: u16) -> Vec<u8> {
    // struct nfqnl_msg_config_cmd { u8 command; u8 pad; __be16 pf; }
    let cmd = [NFQNL_CFG_CMD_BIND, 0, 0, libc::AF_INET as u8];
    message(NFQNL_MSG_CONFIG, NLM_F_ACK, seq, queue, &[(NFQA_CFG_CMD, &cmd)])
}

/// Metadata only, a long queue, GSO packets whole, and never failing open.
fn params_message(seq: u32, queue: u16) -> Vec<u8> {
    // struct nfqnl_msg_config_params { __be32 copy_range; u8 copy_mode; } (packed)
    let mut params = [0u8; 5];
    params[4] = NFQNL_COPY_META;
    let maxlen = QUEUE_MAXLEN.to_be_bytes();
    let mask = (NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO).to_be_bytes();
    let flags = NFQA_CFG_F_GSO.to_be_bytes();
    let attrs: [(u16, &[u8]); 4] = [
        (NFQA_CFG_PARAMS, &params),
        (NFQA_CFG_QUEUE_MAXLEN, &maxlen),
        (NFQA_CFG_MASK, &mask),
        (NFQA_CFG_FLAGS, &flags),
    ];
    message(NFQNL_MSG_CONFIG, NLM_F_ACK, seq, queue, &attrs)
}

/// Accepts every packet of `queue` up to `id`, in queue order.
fn accept_up_to(queue: u16, id: u32) -> Vec<u8> {
    // struct nfqnl_msg_verdict_hdr { __be32 verdict; __be32 id; }
    let mut verdict = [0u8; 8];
    verdict[..4].copy_from_slice(&NF_ACCEPT.to_be_bytes());
    verdict[4..].copy_from_slice(&id.to_be_bytes());
    message(NFQNL_MSG_VERDICT_BATCH, 0, 0, queue, &[(NFQA_VERDICT_HDR, &verdict)])
}

/// One message from the kernel.
#[derive(Debug, PartialEq, Eq)]
enum Incoming {
    /// A packet queued, with its id.
    Packet(u32),
    /// The answer to request `seq`: 0, or a negative errno.
    Ack { seq: u32, error: i32 },
    /// Anything else, or a message too short or malformed to read.
    Other,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The messages of one datagram; a length that does not fit ends it.
fn messages(mut buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let len = u32_at(buf, 0)? as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            buf = &[];
            return None;
        }
        let (msg, rest) = buf.split_at(len);
        buf = rest.get(len.next_multiple_of(4) - len..).unwrap_or(&[]);
        Some(msg)
    })
}

/// What one message (as [`messages`] cut it) is.
fn classify(msg: &[u8]) -> Incoming {
    let (Some(kind), Some(seq)) = (u16_at(msg, 4), u32_at(msg, 8)) else { return Incoming::Other };
    if kind == NLMSG_ERROR {
        return match u32_at(msg, NLMSG_HDRLEN) {
            Some(e) => Incoming::Ack { seq, error: e as i32 },
            None => Incoming::Other,
        };
    }
    if kind != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
        return Incoming::Other;
    }
    let mut attrs = msg.get(NLMSG_HDRLEN + NFGENMSG_LEN..).unwrap_or(&[]);
    while let (Some(len), Some(kind)) = (u16_at(attrs, 0), u16_at(attrs, 2)) {
        let len = len as usize;
        if len < 4 || len > attrs.len() {
            break;
        }
        // struct nfqnl_msg_packet_hdr { __be32 packet_id; __be16 hw_protocol; u8 hook; }
        if kind & NLA_TYPE_MASK == NFQA_PACKET_HDR && len >= 4 + 7 {
            return Incoming::Packet(u32::from_be_bytes([attrs[4], attrs[5], attrs[6], attrs[7]]));
        }
        attrs = attrs.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    Incoming::Other
}

/// A NETLINK_NETFILTER socket, in the namespace of the thread that opened it.
struct Socket(OwnedFd);

impl Socket {
    fn open() -> io::Result<Socket> {
        // SAFETY: socket() returns a new descriptor or -1; we own it from here.
        let fd =
            unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_NETFILTER) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let s = Socket(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: sockaddr_nl is plain data; zero is a valid value (port id chosen by the kernel).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: addr is a valid sockaddr_nl of the length given.
        if unsafe { libc::bind(fd, &addr as *const libc::sockaddr_nl as *const libc::sockaddr, len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // A larger receive buffer (FORCE: above rmem_max, as root), and no ENOBUFS errors.
        if s.set(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RECEIVE_BUFFER).is_err() {
            let _ = s.set(libc::SOL_SOCKET, libc::SO_RCVBUF, RECEIVE_BUFFER);
        }
        let _ = s.set(libc::SOL_NETLINK, libc::NETLINK_NO_ENOBUFS, 1);
        Ok(s)
    }

    fn set(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: value is a c_int of the length given.
        let r = unsafe {
            libc::setsockopt(self.0.as_raw_fd(), level, name, &value as *const libc::c_int as *const libc::c_void, len)
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: msg is a valid buffer of msg.len() bytes; the destination is the kernel
        // (an unconnected netlink socket sends to port 0).
        let n = unsafe { libc::send(self.0.as_raw_fd(), msg.as_ptr() as *const libc::c_void, msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits at most `timeout` for something to read; whether there is.
    fn readable(&self, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) > 0 }
    }

    /// One datagram, without waiting: its length, or `None` when there is none now.
    fn receive(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: buf is valid for buf.len() bytes.
        let n = unsafe {
            libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT)
        };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            io::ErrorKind::Interrupted => Ok(Some(0)),
            _ => Err(e),
        }
    }

    /// Sends a request and waits for its acknowledgement.
    fn request(&self, msg: &[u8], seq: u32, buf: &mut [u8]) -> io::Result<()> {
        self.send(msg)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if !self.readable(left) {
                continue;
            }
            let Some(n) = self.receive(buf)? else { continue };
            for m in messages(&buf[..n]) {
                match classify(m) {
                    Incoming::Ack { seq: s, error: 0 } if s == seq => return Ok(()),
                    Incoming::Ack { seq: s, error } if s == seq => return Err(io::Error::from_raw_os_error(-error)),
                    _ => {}
                }
            }
        }
        Err(io::Error::new(io::ErrorKind::TimedOut, "no answer from nfnetlink_queue"))
    }
}

/// What every thread reads: the delay and whether to stop.
struct Shared {
    /// One-way delay, in microseconds, on top of which `extra` comes.
    base_us: u64,
    extra_us: AtomicU64,
    jitter_us: u64,
    stop: AtomicBool,
}

/// A namespace to delay packets in: its name (`ip netns`) and the blocks (CIDR) whose
/// packets are delayed when they arrive there.
pub struct Target {
    pub namespace: String,
    pub blocks: Vec<String>,
}

/// The delayer: a thread per namespace and the rules sending packets to it. Stopped (rules
/// first, then every packet still queued accepted, then the threads) by [`Delayer::stop`]
/// or when dropped.
pub struct Delayer {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    namespaces: Vec<String>,
}

impl Delayer {
    /// Binds the queue in every target's namespace, then adds the rules. On an error,
    /// everything made so far is undone.
    pub fn start(targets: &[Target], one_way: Duration, jitter: Duration) -> Result<Delayer> {
        let ran = std::process::Command::new("iptables-legacy").arg("-V").stdin(Stdio::null()).output();
        if !ran.is_ok_and(|o| o.status.success()) {
            bail!("no `iptables-legacy` to run (Debian: apt-get install iptables)");
        }
        let shared = Arc::new(Shared {
            base_us: one_way.as_micros() as u64,
            extra_us: AtomicU64::new(0),
            jitter_us: jitter.as_micros() as u64,
            stop: AtomicBool::new(false),
        });
        let mut d = Delayer { shared, threads: Vec::new(), namespaces: Vec::new() };
        let (tx, rx) = mpsc::channel();
        for (k, t) in targets.iter().enumerate() {
            let (shared, tx, ns) = (d.shared.clone(), tx.clone(), t.namespace.clone());
            let thread = std::thread::Builder::new()
                .name(format!("delay-{k}"))
                .spawn(move || {
                    let socket = match join_and_bind(&ns) {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = tx.send(Err(format!("namespace {ns}: {e}")));
                            return;
                        }
                    };
                    let _ = tx.send(Ok(()));
                    drop(tx);
                    serve(&socket, &shared, k as u64);
                })
                .context("starting a delaying thread")?;
            d.threads.push(thread);
        }
        drop(tx);
        for _ in targets {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    bail!("binding NFQUEUE queue {QUEUE}: {e} (needs root and CONFIG_NETFILTER_NETLINK_QUEUE)")
                }
                Err(_) => bail!("binding NFQUEUE queue {QUEUE}: a thread gave no answer"),
            }
        }
        for t in targets {
            d.namespaces.push(t.namespace.clone());
            for block in &t.blocks {
                let rule = ["-A", CHAIN, "-s", block, "-j", "NFQUEUE", "--queue-num", &QUEUE.to_string()];
                iptables(&t.namespace, &rule).context("needs CONFIG_NETFILTER_XT_TARGET_NFQUEUE")?;
            }
        }
        Ok(d)
    }

    /// Adds `extra` to the one-way delay of every packet queued from now on.
    pub fn set_extra(&self, extra: Duration) {
        self.shared.extra_us.store(extra.as_micros() as u64, Ordering::Relaxed);
    }

    /// Removes the rules, accepts every packet still queued, and stops the threads.
    pub fn stop(&mut self) {
        for ns in std::mem::take(&mut self.namespaces) {
            if let Err(e) = iptables(&ns, &["-F", CHAIN]) {
                tracing::warn!("removing the delaying rules: {e:#}");
            }
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Delayer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs iptables-legacy in the `mangle` table of namespace `ns` (never the host's: `ip
/// netns exec` fails when the namespace is gone).
fn iptables(ns: &str, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "iptables-legacy", "-w", "10", "-t", "mangle"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip netns exec iptables-legacy")?;
    if !out.status.success() {
        bail!(
            "ip netns exec {ns} iptables-legacy -t mangle {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// On the calling thread: joins namespace `ns` (for good), opens a socket there and binds
/// the queue.
fn join_and_bind(ns: &str) -> io::Result<Socket> {
    let path = std::path::Path::new("/run/netns").join(ns);
    let file = std::fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    // SAFETY: setns on a valid descriptor of a namespace file; it changes only this thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let socket = Socket::open()?;
    let mut buf = vec![0u8; 8192];
    socket.request(&bind_message(1, QUEUE), 1, &mut buf)?;
    socket.request(&params_message(2, QUEUE), 2, &mut buf)?;
    Ok(socket)
}

/// A standard normal draw (Box-Muller on xorshift64*), for jitter.
fn normal(state: &mut u64) -> f64 {
    let mut uniform = || {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        ((state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let (u1, u2) = (uniform(), uniform());
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The loop of one namespace's thread: records each packet's release time, accepts the
/// due ones, until told to stop; then accepts everything still queued.
fn serve(socket: &Socket, shared: &Shared, seed: u64) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (seed + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ std::process::id() as u64;
    let mut pending: VecDeque<(Instant, u32)> = VecDeque::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_due = Instant::now();
    let mut warned = false;
    loop {
        let stopping = shared.stop.load(Ordering::Relaxed);
        let wait = match pending.front() {
            _ if stopping => Duration::ZERO,
            Some((due, _)) => due.saturating_duration_since(Instant::now()).min(IDLE),
            None => IDLE,
        };
        if socket.readable(wait) {
            loop {
                let n = match socket.receive(&mut buf) {
                    Ok(Some(n)) => n,
                    Ok(None) => break,
                    Err(e) => {
                        if !warned {
                            tracing::warn!("delaying packets between regions: {e}");
                            warned = true;
                        }
                        break;
                    }
                };
                let arrived = Instant::now();
                for m in messages(&buf[..n]) {
                    if let Incoming::Packet(id) = classify(m) {
                        let mut us = (shared.base_us + shared.extra_us.load(Ordering::Relaxed)) as f64;
                        if shared.jitter_us > 0 {
                            us = (us + shared.jitter_us as f64 * normal(&mut rng)).max(0.0);
                        }
                        let due = (arrived + Duration::from_micros(us as u64)).max(last_due);
                        last_due = due;
                        pending.push_back((due, id));
                    }
                }
            }
        }
        let now = Instant::now();
        let mut last = None;
        while let Some(&(due, id)) = pending.front() {
            if due > now && !stopping {
                break;
            }
            last = Some(id);
            pending.pop_front();
        }
        if let Some(id) = last {
            if let Err(e) = socket.send(&accept_up_to(QUEUE, id)) {
                tracing::warn!("delaying packets between regions: a verdict: {e}");
            }
        }
        if stopping {
            return;
        }
    }
}

/// Why the delayer cannot run here, tried in a throwaway namespace: no iptables-legacy, no
/// NFQUEUE target, no nfnetlink_queue (needs root and `ip`).
pub fn probe() -> Option<String> {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let ns = format!("runnel-probe-{}-{}", std::process::id(), PROBES.fetch_add(1, Ordering::Relaxed));
    let made = std::process::Command::new("ip").args(["netns", "add", &ns]).stdin(Stdio::null()).output();
    match made {
        Ok(o) if o.status.success() => {}
        Ok(o) => return Some(format!("ip netns add: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => return Some(format!("ip netns add: {e}")),
    }
    let target = Target { namespace: ns.clone(), blocks: vec!["10.231.0.32/27".to_string()] };
    let why = Delayer::start(&[target], Duration::ZERO, Duration::ZERO).err().map(|e| format!("{e:#}"));
    let _ = std::process::Command::new("ip").args(["netns", "del", &ns]).stdin(Stdio::null()).output();
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet message as the kernel sends it: header, nfgenmsg, then attributes
    /// (NFQA_PACKET_HDR among others).
    fn packet(id: u32, before: &[(u16, &[u8])]) -> Vec<u8> {
        let mut hdr = [0u8; 7];
        hdr[..4].copy_from_slice(&id.to_be_bytes());
        hdr[4..6].copy_from_slice(&0x0800u16.to_be_bytes());
        hdr[6] = 3;
        let mut attrs = before.to_vec();
        attrs.push((NFQA_PACKET_HDR, &hdr));
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, QUEUE, &attrs);
        m[6..8].copy_from_slice(&0u16.to_ne_bytes());
        m
    }

    #[test]
    fn a_packet_message_yields_its_id_and_a_truncated_one_nothing() {
        let mark = 7u32.to_be_bytes();
        let m = packet(0xdead_beef, &[(3, &mark), (9, b"abcde")]);
        assert_eq!(m.len() % 4, 0);
        assert_eq!(u32_at(&m, 0), Some(m.len() as u32));
        assert_eq!(classify(&m), Incoming::Packet(0xdead_beef));
        let ids: Vec<Incoming> = messages(&[packet(1, &[]), packet(2, &[])].concat()).map(classify).collect();
        assert_eq!(ids, [Incoming::Packet(1), Incoming::Packet(2)]);
        // Cut anywhere, the datagram yields no packet: the message's length no longer fits.
        for cut in 0..m.len() {
            assert_eq!(messages(&m[..cut]).map(classify).find(|i| *i != Incoming::Other), None, "cut at {cut}");
        }
        // A message whose attribute is shorter than a packet header, or claims more than
        // the message holds, is skipped.
        let mut short = m.clone();
        let at = short.len() - 12;
        short[at..at + 2].copy_from_slice(&6u16.to_ne_bytes());
        assert_eq!(classify(&short), Incoming::Other);
        let mut long = m.clone();
        long[at..at + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(classify(&long), Incoming::Other);
        let mut zero = m;
        zero[NLMSG_HDRLEN + NFGENMSG_LEN..NLMSG_HDRLEN + NFGENMSG_LEN + 2].copy_from_slice(&0u16.to_ne_bytes());
        assert_eq!(classify(&zero), Incoming::Other);
        assert_eq!(messages(&[0u8; 3]).count(), 0);
    }

    #[test]
    fn acks_verdicts_and_config_are_encoded_as_the_kernel_reads_them() {
        let mut ack = vec![0u8; NLMSG_HDRLEN + 4 + NLMSG_HDRLEN];
        let len = ack.len() as u32;
        ack[..4].copy_from_slice(&len.to_ne_bytes());
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack[8..12].copy_from_slice(&5u32.to_ne_bytes());
        ack[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        assert_eq!(classify(&ack), Incoming::Ack { seq: 5, error: -1 });
        assert_eq!(classify(&ack[..18]), Incoming::Other);

        let v = accept_up_to(QUEUE, 42);
        assert_eq!(v.len(), 16 + 4 + 4 + 8);
        assert_eq!(u16_at(&v, 4), Some(0x0303));
        assert_eq!(&v[18..20], &QUEUE.to_be_bytes());
        assert_eq!(u16_at(&v, 22), Some(NFQA_VERDICT_HDR));
        assert_eq!(&v[24..], &[0, 0, 0, 1, 0, 0, 0, 42]);

        let b = bind_message(1, 3);
        assert_eq!(u16_at(&b, 6), Some(NLM_F_REQUEST | NLM_F_ACK));
        assert_eq!(&b[18..20], &[0, 3]);
        assert_eq!(&b[20..28], &[8, 0, 1, 0, 1, 0, 0, 2]);
        let p = params_message(2, QUEUE);
        // PARAMS (5 bytes, padded to 8), MAXLEN, MASK, FLAGS.
        assert_eq!(p.len(), 16 + 4 + 12 + 8 + 8 + 8);
        assert_eq!(&p[20..32], &[9, 0, 2, 0, 0, 0, 0, 0, NFQNL_COPY_META, 0, 0, 0]);
        assert_eq!(&p[36..40], &QUEUE_MAXLEN.to_be_bytes());
        assert_eq!(&p[44..48], &5u32.to_be_bytes());
        assert_eq!(&p[52..56], &4u32.to_be_bytes());
    }

    /// Root, iptables-legacy and NFQUEUE only (else it says why and passes): in a throwaway
    /// namespace, connections from 127.0.0.2 to 127.0.0.1 have their SYN delayed on arrival
    /// (the SYN-ACK, from 127.0.0.1, is not), by the base delay, then with the extra one.
    #[test]
    fn connects_pay_the_delay_and_the_extra_one_in_a_namespace() {
        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: not root");
            return;
        }
        if let Some(why) = probe() {
            eprintln!("skipped: {why}");
            return;
        }
        let ns = format!("runnel-unit-{}", std::process::id());
        let ip = |args: &[&str]| std::process::Command::new("ip").args(args).output().map(|o| o.status.success());
        assert_eq!(ip(&["netns", "add", &ns]).ok(), Some(true));
        assert_eq!(ip(&["-n", &ns, "link", "set", "lo", "up"]).ok(), Some(true));
        let target = Target { namespace: ns.clone(), blocks: vec!["127.0.0.2/32".to_string()] };
        let measured = Delayer::start(&[target], Duration::from_millis(20), Duration::ZERO).map(|mut d| {
            let connect = || {
                let path = std::path::Path::new("/run/netns").join(&ns);
                std::thread::spawn(move || -> io::Result<Duration> {
                    let file = std::fs::File::open(path)?;
                    // SAFETY: setns on a valid namespace descriptor, for this thread only.
                    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
                    let port = listener.local_addr()?.port();
                    // The fastest of three: a busy machine only adds.
                    let mut best = Duration::MAX;
                    for _ in 0..3 {
                        best = best.min(connect_from([127, 0, 0, 2], port)?);
                    }
                    Ok(best)
                })
                .join()
                .expect("the connecting thread")
            };
            let base = connect();
            d.set_extra(Duration::from_millis(30));
            let extra = connect();
            d.stop();
            (base, extra)
        });
        let _ = ip(&["netns", "del", &ns]);
        let (base, extra) = measured.expect("starting the delayer");
        let (base, extra) = (base.expect("a connect"), extra.expect("a connect"));
        eprintln!("connect: {base:?}, with 30 ms extra: {extra:?}");
        // Once each way at most: under 2 x 20 ms and 2 x 50 ms.
        assert!(base >= Duration::from_millis(19) && base < Duration::from_millis(39), "{base:?}");
        assert!(extra >= Duration::from_millis(49) && extra < Duration::from_millis(99), "{extra:?}");
    }

    /// How long a TCP connect from `from` to 127.0.0.1:`port` takes (libc: std cannot bind
    /// a connecting socket's source address).
    fn connect_from(from: [u8; 4], port: u16) -> io::Result<Duration> {
        let addr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(ip) },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: a new socket, owned from here; bind and connect get valid sockaddr_in.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let _owned = OwnedFd::from_raw_fd(fd);
            let (a, b) = (addr(from, 0), addr([127, 0, 0, 1], port));
            if libc::bind(fd, &a as *const libc::sockaddr_in as *const libc::sockaddr, len) != 0 {
                return Err(io::Error::last_os_error());
            }
            let t = Instant::now();
            if libc::connect(fd, &b as *const libc::sockaddr_in as *const libc::sockaddr, len) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(t.elapsed())
        }
    }

    #[test]
    fn jitter_draws_are_standard_normal() {
        let mut s = 1;
        let draws: Vec<f64> = (0..20_000).map(|_| normal(&mut s)).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        assert!(mean.abs() < 0.05 && (var - 1.0).abs() < 0.05, "mean {mean}, variance {var}");
    }
}
