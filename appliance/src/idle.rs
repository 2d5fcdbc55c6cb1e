//! When a connection last moved a byte, so one whose peers went quiet can be closed without a
//! timer per read: the copying side only stores a timestamp ([`Progress::touch`]), and one
//! watcher per connection sleeps until the idle limit could have passed ([`Progress::stalled`]).
//!
//! Used by the HTTP server (a client that takes a 1 GiB download and then never reads holds its
//! slot until the limit, not forever; hyper's header timeout covers slow request heads) through
//! [`Watched`], and by the load balancer's relay, which touches it after each write.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a [`Watched`] stream last made progress, in milliseconds since it was created.
#[derive(Debug, Clone)]
pub struct Progress {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Starts the clock: a new connection counts as having just moved.
    pub fn new() -> Self {
        Progress {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records that a byte moved now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long since the last byte moved either way.
    pub fn idle(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }

    /// Resolves once the stream has been idle for `limit`.
    pub async fn stalled(&self, limit: Duration) {
        loop {
            let idle = self.idle();
            if idle >= limit {
                return;
            }
            tokio::time::sleep(limit - idle).await;
        }
    }
}

/// `S` with every successful read and write recorded in a [`Progress`].
#[derive(Debug)]
pub struct Watched<S> {
    inner: S,
    progress: Progress,
}

impl<S> Watched<S> {
    pub fn new(inner: S) -> (Self, Progress) {
        let progress = Progress::new();
        let watched = Watched {
            inner,
            progress: progress.clone(),
        };
        (watched, progress)
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// For writes that bypass the wrapper (sendfile on the inner socket).
    pub fn progress(&self) -> &Progress {
        &self.progress
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.progress.touch();
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.touch();
        }
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.touch();
        }
        poll
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test(start_paused = true)]
    async fn progress_resets_the_idle_clock() {
        let (a, mut b) = tokio::io::duplex(64);
        let (mut watched, progress) = Watched::new(a);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(progress.idle(), Duration::from_secs(5));
        b.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        watched.read_exact(&mut byte).await.unwrap();
        assert_eq!(progress.idle(), Duration::ZERO);
        tokio::time::advance(Duration::from_secs(2)).await;
        watched.write_all(b"y").await.unwrap();
        assert_eq!(progress.idle(), Duration::ZERO);
        // Nothing moves: `stalled` resolves after exactly the limit.
        let t0 = Instant::now();
        progress.stalled(Duration::from_secs(30)).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(30));
    }
}
