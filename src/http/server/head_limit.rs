//! A connection whose request heads are measured on their way to hyper, so that one over a
//! limit is answered with a problem (414, 431) instead of hyper's own empty-bodied answer.
//!
//! Why here: hyper answers an over-long head itself, before any service runs, and offers no
//! hook to shape that answer. So the bytes hyper reads pass through [`HeadLimit`] first, which
//! refuses a head (see [`super::head_scan`]) before hyper could: hyper is then given the end of
//! the stream, and says nothing, while the refusal is written here.
//!
//! Invariants kept here:
//! - Every byte hyper reads as part of a request head has been measured: a head is handed on
//!   up to its last byte only; the bytes after it wait until the request's handler has said how
//!   long its body is ([`BodyFraming`]), are passed on unmeasured for exactly that length, and
//!   the next head is measured from the byte after. A body of unknown length (chunked) is passed
//!   on whole, and its answer closes the connection, so no head follows it unmeasured.
//! - A refused head gets one answer, written whole, then the connection's write side is shut and
//!   what the client still sends is read and dropped (at most [`DRAIN_LIMIT`], within hyper's
//!   header timeout) so that closing does not reset the connection under the answer.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::head_scan::{HeadScan, Scanned, TooLong};

/// The most a refused client's remaining bytes are read (and dropped) before closing.
const DRAIN_LIMIT: usize = 1024 * 1024;

/// How many bytes are read from the socket at once.
const READ_CHUNK: usize = 8 * 1024;

/// The handler's word on how long the body after the last head is, for [`HeadLimit`].
#[derive(Default)]
pub(super) struct BodyFraming {
    state: Mutex<Framing>,
}

#[derive(Default)]
struct Framing {
    /// `Some(Some(n))`: `n` body bytes; `Some(None)`: a body of unknown length.
    length: Option<Option<u64>>,
    /// The reader waiting for it.
    waiting: Option<Waker>,
}

impl BodyFraming {
    /// The request just handed over has a body of `length` bytes (`None`: not known ahead,
    /// chunked; its answer must close the connection).
    pub(super) fn body_follows(&self, length: Option<u64>) {
        let waiting = {
            let mut state = self.lock();
            state.length = Some(length);
            state.waiting.take()
        };
        if let Some(waker) = waiting {
            waker.wake();
        }
    }

    /// The length said, taken; `None` (and `cx` woken when it is said) until then.
    fn take(&self, cx: &Context<'_>) -> Option<Option<u64>> {
        let mut state = self.lock();
        let length = state.length.take();
        if length.is_none() {
            state.waiting = Some(cx.waker().clone());
        }
        length
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Framing> {
        // Two plain fields, consistent at every point a panic could interrupt.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where the connection's incoming bytes are.
enum Phase {
    /// In a request head.
    Head(HeadScan),
    /// A head was handed on; its handler has not yet said how long its body is.
    AwaitingBody,
    /// In a body with this many bytes left.
    Body(u64),
    /// In a body of unknown length: its answer closes the connection.
    Unframed,
    /// A head was refused: its answer is being written.
    Refusing(Refusal),
}

/// The answer to a refused head, and how far it has gone.
struct Refusal {
    answer: Vec<u8>,
    written: usize,
    shut: bool,
    drained: usize,
}

/// `inner`, whose request heads are measured before the reader (hyper) gets them.
pub(super) struct HeadLimit<S> {
    inner: S,
    framing: Arc<BodyFraming>,
    /// The answer to a head over a limit, as bytes on the wire.
    answer_for: fn(TooLong) -> Vec<u8>,
    phase: Phase,
    /// Bytes read from `inner` and not yet handed on: `buffer[start..end]`.
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
}

impl<S> HeadLimit<S> {
    /// `inner`, told body lengths by `framing`, answering a refused head with `answer_for`.
    pub(super) fn new(
        inner: S,
        framing: Arc<BodyFraming>,
        answer_for: fn(TooLong) -> Vec<u8>,
    ) -> Self {
        Self {
            inner,
            framing,
            answer_for,
            phase: Phase::Head(HeadScan::default()),
            buffer: vec![0; READ_CHUNK].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> HeadLimit<S> {
    /// Fill the buffer from `inner` when it is empty; `false` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        if self.start < self.end {
            return Poll::Ready(Ok(true));
        }
        let mut read = ReadBuf::new(&mut self.buffer);
        ready!(Pin::new(&mut self.inner).poll_read(cx, &mut read))?;
        let filled = read.filled().len();
        (self.start, self.end) = (0, filled);
        Poll::Ready(Ok(filled > 0))
    }

    /// How many of the buffered bytes `available` the current phase lets through, moving on
    /// to the next phase where they end it.
    fn admit(&mut self, available: usize) -> usize {
        let (taken, next) = match &mut self.phase {
            Phase::Head(scan) => {
                match scan.scan(&self.buffer[self.start..self.start + available]) {
                    Scanned::Partial(n) => (n, None),
                    Scanned::Ended(n) => (n, Some(Phase::AwaitingBody)),
                    Scanned::Over(n, why) => (
                        n,
                        Some(Phase::Refusing(Refusal::of((self.answer_for)(why)))),
                    ),
                }
            }
            Phase::Body(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(available);
                *left -= n as u64;
                let next = (*left == 0).then(|| Phase::Head(HeadScan::default()));
                (n, next)
            }
            Phase::Unframed => (available, None),
            Phase::AwaitingBody | Phase::Refusing(_) => (0, None),
        };
        if let Some(next) = next {
            self.phase = next;
        }
        taken
    }

    /// Write the refusal, shut the write side, drain what the client still sends; then the
    /// reader is given the end of the stream.
    fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Phase::Refusing(refusal) = &mut self.phase else {
            return Poll::Ready(Ok(()));
        };
        while refusal.written < refusal.answer.len() {
            let n = ready!(
                Pin::new(&mut self.inner).poll_write(cx, &refusal.answer[refusal.written..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            refusal.written += n;
        }
        if !refusal.shut {
            ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
            ready!(Pin::new(&mut self.inner).poll_shutdown(cx))?;
            refusal.shut = true;
        }
        while refusal.drained < DRAIN_LIMIT {
            let mut read = ReadBuf::new(&mut self.buffer);
            ready!(Pin::new(&mut self.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                break;
            }
            refusal.drained += read.filled().len();
        }
        (self.start, self.end) = (0, 0);
        Poll::Ready(Ok(()))
    }
}

impl Refusal {
    fn of(answer: Vec<u8>) -> Self {
        Self {
            answer,
            written: 0,
            shut: false,
            drained: 0,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeadLimit<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.phase {
                Phase::Refusing(_) => return this.poll_refuse(cx),
                Phase::AwaitingBody => {
                    let Some(length) = this.framing.take(cx) else {
                        return Poll::Pending;
                    };
                    this.phase = match length {
                        Some(0) => Phase::Head(HeadScan::default()),
                        Some(n) => Phase::Body(n),
                        None => Phase::Unframed,
                    };
                    continue;
                }
                Phase::Head(_) | Phase::Body(_) | Phase::Unframed => {}
            }
            if buf.remaining() == 0 || !ready!(this.poll_fill(cx))? {
                return Poll::Ready(Ok(()));
            }
            let available = (this.end - this.start).min(buf.remaining());
            let taken = this.admit(available);
            buf.put_slice(&this.buffer[this.start..this.start + taken]);
            this.start += taken;
            if taken > 0 {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadLimit<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, bytes)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
