//! A connection whose writes must keep moving: a peer that stops reading is cut off.
//!
//! Why: a client that never reads its `/events` stream fills the socket's buffers, after which
//! hyper waits to write and never polls the stream, so it is never seen to lag.
//!
//! Invariant kept here: once a write (or flush, or shutdown) has found the socket unable to
//! take a byte for the whole limit, the connection fails with `TimedOut`; any write that goes
//! through restarts the clock. A peer reading slower than a buffer's share per limit is cut
//! too; one whose kernel still takes data (megabytes) is not stalled yet.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner`, failing its writes once they have made no progress for `limit`.
pub(super) struct WriteStallGuard<S> {
    inner: S,
    limit: Duration,
    /// Running since the first write that could not proceed; `None` while writes proceed.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteStallGuard<S> {
    pub(super) fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    /// What a write that could not proceed answers: still pending, or cut off once the stall
    /// has lasted the limit. Polling the timer registers the task to be woken when it runs out.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the peer took nothing written to it for {}",
                    humantime::format_duration(limit)
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Pass a write's outcome on, restarting the clock when it proceeded.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        outcome: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match outcome {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => self.stalled(cx),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStallGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStallGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, outcome)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, outcome)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, outcome)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, outcome)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A connected pair of real loopback sockets: (the server's end, the client's end).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (server, client)
    }

    #[tokio::test]
    async fn a_peer_that_reads_nothing_is_cut_off_once_writes_stall_for_the_limit() {
        let (server, _client_never_reads) = pair().await;
        let limit = Duration::from_millis(200);
        let mut guarded = WriteStallGuard::new(server, limit);
        // Far more than loopback's buffers hold: the writes must stall at some point.
        let chunk = vec![b'x'; 1 << 20];
        let began = Instant::now();
        let cut_off = async {
            loop {
                if let Err(error) = guarded.write_all(&chunk).await {
                    break error;
                }
            }
        };
        let error = tokio::time::timeout(Duration::from_secs(60), cut_off)
            .await
            .expect("the writes were cut off, not left waiting");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(began.elapsed() >= limit);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_keeps_reading_is_not_cut_off_however_long_the_transfer_takes() {
        let (server, mut client) = pair().await;
        let total = 64 << 20;
        let reader = tokio::spawn(async move {
            let mut sink = vec![0u8; 64 << 10];
            let mut read = 0;
            while read < total {
                match client.read(&mut sink).await.expect("read") {
                    0 => break,
                    n => read += n,
                }
                // A slow reader: the whole transfer takes longer than the limit (paced, not
                // synchronised: nothing waits on this pause).
                tokio::time::sleep(Duration::from_millis(4)).await;
            }
            read
        });
        // A limit shorter than the whole transfer takes (1,024 reads paced 4 ms apart): only the
        // absence of progress counts, never the time spent writing. Not shorter still: on a
        // loaded machine a reader can go unscheduled for a second.
        let limit = Duration::from_secs(3);
        let began = Instant::now();
        let mut guarded = WriteStallGuard::new(server, limit);
        let chunk = vec![b'y'; 1 << 20];
        for _ in 0..(total / chunk.len()) {
            guarded
                .write_all(&chunk)
                .await
                .expect("a reading peer keeps taking bytes");
        }
        guarded.flush().await.expect("flush");
        assert_eq!(reader.await.expect("reader"), total);
        assert!(
            began.elapsed() > limit,
            "the transfer outlasted the limit, so only progress was judged"
        );
    }
}
