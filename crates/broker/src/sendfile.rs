//! Records that go from the page cache to the socket without passing through the broker's
//! memory: on a plaintext connection, a Fetch response's records are sent with `sendfile`
//! from the segment file they lie in, as Kafka does (`FileRecords.writeTo`). Reading them
//! into a buffer first (`pread`) and writing the buffer to the socket cost two copies of
//! every byte served; `sendfile` hands the page-cache pages to the socket. A TLS connection
//! encrypts in user space, so its records are read into memory as before.
//!
//! The records of a partition travel through the response's encoding as a stand-in
//! ([`placeholder`]): `Bytes` as long as the records, pointing into a read-only mapping
//! that has no memory behind it. The handler lists the file slices in the order their
//! partitions appear in the response ([`FileRecords`]), and the encoder
//! (`out_frame.rs`) puts each slice where its stand-in is.

use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use runnel_storage::FileSlice;
use runnel_sync::LockExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The longest stand-in: a partition's records longer than this are read into memory.
const HOLE_BYTES: usize = 256 << 20;

/// The stand-ins' mapping: its address, or `None` when it could not be made (then every
/// response is built in memory).
fn holes() -> Option<usize> {
    static HOLES: OnceLock<Option<usize>> = OnceLock::new();
    *HOLES.get_or_init(|| {
        // SAFETY: a new private anonymous mapping, read-only and never written or unmapped;
        // MAP_NORESERVE and PROT_READ: no memory is committed for it, and a read (which the
        // encoder never does) would see zeros.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                HOLE_BYTES,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (at != libc::MAP_FAILED).then_some(at as usize)
    })
}

/// A stand-in for `len` bytes of records sent from a file, or `None` (too long, or no
/// mapping): then the records are read into memory.
pub fn placeholder(len: usize) -> Option<Bytes> {
    let base = holes()?;
    if len > HOLE_BYTES {
        return None;
    }
    // SAFETY: the mapping is HOLE_BYTES long, readable and lives as long as the process.
    let hole: &'static [u8] = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
    Some(Bytes::from_static(hole))
}

/// Whether `b` is a stand-in made by [`placeholder`].
pub fn is_placeholder(b: &[u8]) -> bool {
    !b.is_empty() && holes().is_some_and(|base| b.as_ptr() as usize == base)
}

/// The file slices of one response, in the order of their stand-ins: set by the handler,
/// taken by the encoder. Present only on connections that can send from files.
#[derive(Debug, Default)]
pub struct FileRecords(Mutex<Vec<FileSlice>>);

impl FileRecords {
    pub fn set(&self, slices: Vec<FileSlice>) {
        *self.0.lock_or_stop() = slices;
    }

    pub fn take(&self) -> Vec<FileSlice> {
        std::mem::take(&mut *self.0.lock_or_stop())
    }
}

/// A connection's write half that can send a file slice.
pub trait FileSink {
    fn send_file(&mut self, slice: &FileSlice) -> impl Future<Output = io::Result<()>> + Send;
}

/// A plaintext TCP connection: `sendfile`, from the page cache to the socket.
impl FileSink for tokio::net::tcp::OwnedWriteHalf {
    async fn send_file(&mut self, slice: &FileSlice) -> io::Result<()> {
        let stream: &tokio::net::TcpStream = self.as_ref();
        let mut off = libc::off_t::try_from(slice.pos).map_err(io::Error::other)?;
        let end = off.saturating_add(libc::off_t::try_from(slice.len).map_err(io::Error::other)?);
        while off < end {
            stream.writable().await?;
            let want = (end - off) as usize;
            let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
                // SAFETY: both descriptors are open (the slice holds the file, `self` the
                // socket); sendfile reads from the file at `off` and advances it.
                let n = unsafe { libc::sendfile(stream.as_raw_fd(), slice.file.as_raw_fd(), &mut off, want) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match sent {
                Ok(0) => return Err(shorter(slice)),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                // A filesystem that cannot (EINVAL, ENOSYS) sends what is left from memory.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => {
                    let done = (off as u64).saturating_sub(slice.pos) as usize;
                    let rest = FileSlice { pos: off as u64, len: slice.len - done, ..slice.clone() };
                    return copy(self, &rest).await;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A TLS connection: the slice is read into memory and written (encrypted) from there.
impl<T: tokio::io::AsyncRead + AsyncWrite + Send> FileSink for tokio::io::WriteHalf<T> {
    async fn send_file(&mut self, slice: &FileSlice) -> io::Result<()> {
        copy(self, slice).await
    }
}

async fn copy<W: AsyncWrite + Unpin + Send>(w: &mut W, slice: &FileSlice) -> io::Result<()> {
    let bytes = slice.read().map_err(|e| if e.kind() == io::ErrorKind::UnexpectedEof { shorter(slice) } else { e })?;
    w.write_all(&bytes).await
}

/// The file ended before the slice did: it was truncated after the fetch located the
/// records. The response cannot be finished; the caller closes the connection.
fn shorter(slice: &FileSlice) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the log file ended inside the {} bytes at {} planned for a fetch", slice.len, slice.pos),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;

    fn slice_of(data: &[u8], pos: u64, len: usize) -> (tempfile::TempDir, FileSlice) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000000.log");
        std::fs::write(&path, data).expect("write");
        let file = Arc::new(std::fs::File::open(&path).expect("open"));
        (dir, FileSlice { file, pos, len, next_offset: 0 })
    }

    async fn pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        (client.expect("connect"), accepted.expect("accept").0)
    }

    #[tokio::test]
    async fn a_slice_larger_than_the_socket_buffer_arrives_whole() {
        let data: Vec<u8> = (0..12_000_000u32).map(|i| (i % 253) as u8).collect();
        let (_dir, slice) = slice_of(&data, 1_000_003, 9_000_000);
        let (client, server) = pair().await;
        let (_rd, mut wr) = server.into_split();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut client = client;
            client.read_to_end(&mut got).await.expect("read");
            got
        });
        wr.send_file(&slice).await.expect("sent");
        drop(wr);
        assert_eq!(reader.await.expect("reader"), &data[1_000_003..10_000_003]);
    }

    #[tokio::test]
    async fn a_file_shorter_than_its_slice_is_an_error_not_a_short_response() {
        let data = vec![5u8; 10_000];
        let (_dir, slice) = slice_of(&data, 4_000, 8_000);
        let (_client, server) = pair().await;
        let (_rd, mut wr) = server.into_split();
        let e = wr.send_file(&slice).await.expect_err("the file ends first");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        // The same through the copying sink (TLS connections).
        let (_client, server) = pair().await;
        let (_rd, mut wr) = tokio::io::split(server);
        let e = wr.send_file(&slice).await.expect_err("the file ends first");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn the_copying_sink_sends_the_same_bytes() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (_dir, slice) = slice_of(&data, 17, 250_000);
        let (mut client, server) = pair().await;
        let (_rd, mut wr) = tokio::io::split(server);
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 250_000];
            client.read_exact(&mut got).await.expect("read");
            got
        });
        wr.send_file(&slice).await.expect("sent");
        assert_eq!(reader.await.expect("reader"), &data[17..250_017]);
    }

    #[test]
    fn stand_ins_are_recognised_and_ordinary_bytes_are_not() {
        let hole = placeholder(100_000).expect("a stand-in");
        assert_eq!(hole.len(), 100_000);
        assert!(is_placeholder(&hole));
        assert!(!is_placeholder(&vec![0u8; 100_000]));
        assert!(placeholder(HOLE_BYTES + 1).is_none());
    }
}
