//! Connections made from inside a network namespace: a region's client namespace of
//! `runnel dev --regions` or `runnel chaos`, so that one process runs clients in several
//! regions, each seeing the latency and faults of its own. A socket belongs to the
//! namespace it was created in, and joining one (`setns`) changes only the calling thread,
//! so each connection is made on a short-lived thread of its own that joins the namespace,
//! connects, and hands the socket to the runtime. Joining needs root (CAP_SYS_ADMIN).

use std::io;
use std::net::ToSocketAddrs;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A named network namespace (`ip netns add NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn named(name: &str) -> Netns {
        Netns { name: name.to_string() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connects to `addr` (host:port) from inside the namespace within `timeout`.
    pub async fn connect(&self, addr: &str, timeout: Duration) -> io::Result<TcpStream> {
        let path = PathBuf::from("/var/run/netns").join(&self.name);
        let addr = addr.to_string();
        let (tx, rx) = oneshot::channel();
        std::thread::Builder::new().name("netns-connect".into()).spawn(move || {
            let _ = tx.send(connect_in(&path, &addr, timeout));
        })?;
        let stream = rx.await.map_err(|_| io::Error::other("the connecting thread ended without an answer"))??;
        stream.set_nonblocking(true)?;
        TcpStream::from_std(stream)
    }
}

/// On a thread of its own (it stays in the namespace until it ends).
fn connect_in(ns: &std::path::Path, addr: &str, timeout: Duration) -> io::Result<std::net::TcpStream> {
    let file = std::fs::File::open(ns).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", ns.display())))?;
    // SAFETY: setns on a valid descriptor of a namespace file; it changes only this thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("joining network namespace {}: {e}", ns.display())));
    }
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{addr}: no address"));
    for a in addr.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}
