//! Frames that share their large byte fields instead of copying them.
//!
//! A Fetch response is mostly the records read from the log, and a Produce request mostly
//! the batches its producer built. Encoding either into one buffer copies those records into
//! it before the socket copies them once more. Here a frame is encoded into [`Pieces`]: the
//! fields go into one buffer sized exactly from the message's computed size, and each byte
//! field named as shared (the records) is kept as a piece of its own, which the writer
//! sends in its turn (one `writev`, or `sendfile` for a broker's piece that stands for a
//! slice of a segment file).

use std::io;

use anyhow::{ensure, Result};
use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;

/// A byte field shorter than this is copied into the frame: a piece of its own would cost
/// the writer more than the copy.
pub const SHARE_MIN: usize = 4096;

/// A part of an encoded frame: bytes in memory, or what stands for them until they are
/// sent.
pub trait Piece: Clone + From<Bytes> {
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The piece's bytes in memory, read from where they lie if they are elsewhere.
    fn read(&self) -> io::Result<Bytes>;
}

impl Piece for Bytes {
    fn len(&self) -> usize {
        Bytes::len(self)
    }

    fn read(&self) -> io::Result<Bytes> {
        Ok(self.clone())
    }
}

/// A byte field that becomes a piece of its own: the field's bytes as the message holds
/// them, and the piece that goes out in their place.
pub type Shared<P> = (Bytes, P);

/// Encodes `header` then `body` behind a four-byte size prefix, each of `shared` (the
/// message's byte fields of at least [`SHARE_MIN`] bytes to share, in the order the encoder
/// meets them) as a piece of its own and the rest in one buffer allocated at its final size.
/// The pieces, in the order they go out; an error if a shared field was not met in place.
pub fn encode_frame<H: Encodable, M: Encodable, P: Piece>(
    header: &H,
    header_version: i16,
    body: &M,
    version: i16,
    shared: &[Shared<P>],
) -> Result<Vec<P>> {
    let size = header.compute_size(header_version)? + body.compute_size(version)?;
    let own = size.saturating_sub(shared.iter().map(|(b, _)| b.len()).sum());
    let mut buf = Pieces::new(shared, 4 + own);
    buf.put_i32(i32::try_from(size)?);
    header.encode(&mut buf, header_version)?;
    body.encode(&mut buf, version)?;
    let pieces = buf.finish()?;
    let len: usize = pieces.iter().map(Piece::len).sum();
    ensure!(len == 4 + size, "encoded {len} bytes, computed {}", 4 + size);
    Ok(pieces)
}

/// An encoding buffer that keeps the `shared` byte fields as pieces instead of copying them.
pub struct Pieces<'a, P> {
    shared: &'a [Shared<P>],
    /// The next of `shared` to meet: the encoder writes them in order.
    next: usize,
    done: Vec<P>,
    cur: BytesMut,
    /// A piece could not be read back into memory by [`Pieces::join`].
    failed: Option<io::Error>,
}

impl<'a, P: Piece> Pieces<'a, P> {
    /// A buffer for a frame that shares `shared` and holds `own` bytes of its own.
    pub fn new(shared: &'a [Shared<P>], own: usize) -> Pieces<'a, P> {
        Pieces {
            shared,
            next: 0,
            done: Vec::with_capacity(2 * shared.len() + 1),
            cur: BytesMut::with_capacity(own),
            failed: None,
        }
    }

    /// Bytes in the pieces before the current buffer.
    fn done_len(&self) -> usize {
        self.done.iter().map(Piece::len).sum()
    }

    /// The pieces, in order.
    pub fn finish(mut self) -> Result<Vec<P>> {
        if let Some(e) = self.failed {
            return Err(e.into());
        }
        // A field not met in place (a stand-in copied as bytes) would send the wrong bytes.
        ensure!(self.next == self.shared.len(), "{} of {} shared fields placed", self.next, self.shared.len());
        if !self.cur.is_empty() || self.done.is_empty() {
            self.done.push(P::from(self.cur.freeze()));
        }
        Ok(self.done)
    }

    /// Everything back in one buffer: for the (unused by these messages) encoders that go
    /// back to fill a gap they left, which may lie in an earlier piece.
    fn join(&mut self) {
        if self.done.is_empty() {
            return;
        }
        let mut all = BytesMut::with_capacity(self.done_len() + self.cur.capacity());
        for p in self.done.drain(..) {
            match p.read() {
                Ok(b) => all.extend_from_slice(&b),
                Err(e) => {
                    self.failed.get_or_insert(e);
                    all.resize(all.len() + p.len(), 0);
                }
            }
        }
        all.extend_from_slice(&self.cur);
        self.cur = all;
    }
}

// SAFETY: every method delegates to the current buffer, whose invariants BytesMut keeps.
unsafe impl<P: Piece> BufMut for Pieces<'_, P> {
    fn remaining_mut(&self) -> usize {
        self.cur.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of the chunk `chunk_mut` returned.
        unsafe { self.cur.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.cur.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= SHARE_MIN {
            if let Some((b, piece)) = self.shared.get(self.next) {
                if b.as_ptr() == src.as_ptr() && b.len() == src.len() {
                    if !self.cur.is_empty() {
                        let head = self.cur.split().freeze();
                        self.done.push(P::from(head));
                    }
                    self.done.push(piece.clone());
                    self.next += 1;
                    return;
                }
            }
        }
        self.cur.extend_from_slice(src);
    }
}

impl<P: Piece> ByteBufMut for Pieces<'_, P> {
    fn offset(&self) -> usize {
        self.done_len() + self.cur.len()
    }

    fn seek(&mut self, offset: usize) {
        if offset < self.done_len() {
            self.join();
        }
        self.cur.resize(offset - self.done_len(), 0);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        if r.start < self.done_len() {
            self.join();
        }
        let base = self.done_len();
        &mut self.cur[r.start - base..r.end - base]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_before_a_piece_joins_them() {
        let big = Bytes::from(vec![1u8; SHARE_MIN]);
        let shared = [(big.clone(), big.clone())];
        let mut buf = Pieces::new(&shared, 16);
        buf.put_u8(9);
        buf.put_slice(&big);
        buf.put_u8(8);
        buf.range(0..1)[0] = 5;
        let out = buf.finish().expect("finished");
        assert_eq!(out.len(), 1, "joined into one buffer");
        assert_eq!(out[0].len(), SHARE_MIN + 2);
        assert_eq!((out[0][0], out[0][SHARE_MIN + 1]), (5, 8));
    }

    #[test]
    fn a_shared_field_not_met_in_its_turn_is_an_error() {
        let (a, b) = (Bytes::from(vec![1u8; SHARE_MIN]), Bytes::from(vec![2u8; SHARE_MIN]));
        let shared = [(a.clone(), a.clone()), (b.clone(), b.clone())];
        let mut buf = Pieces::new(&shared, 16);
        buf.put_slice(&b);
        buf.put_slice(&a);
        let e = buf.finish().expect_err("b came before a");
        assert!(e.to_string().contains("1 of 2"), "{e}");
    }
}
