//! What a connection reads and writes, each bounded in time: a request body that goes quiet
//! fails ([`IdleBody`]), and so does an answer the client takes no byte of ([`WriteDeadline`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A socket whose writes must make progress: a write (or flush) that the client accepts no
/// byte of for `timeout` fails, and hyper closes the connection (nginx's `send_timeout`). A
/// client that sends requests but never reads the answers fills both sides' buffers, and then
/// the server is forever "writing", so no other timer (headers, idle) ever starts.
pub struct WriteDeadline<S> {
    inner: S,
    timeout: Duration,
    /// Running while a write waits for the client; `None` once one makes progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    /// `inner`, whose writes fail after `timeout` without progress.
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// After the socket said "not now": the stall's timer, started if need be; an error once
    /// it has run out.
    fn stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client took no byte of the answer for {timeout:?} (FILE_AGENT_WRITE_TIMEOUT)"
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// What the socket did: progress ends the stall, "not now" starts or goes on with it.
    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => self.stall(cx),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(cx, polled)
    }
}

/// A request body that fails once it has sent nothing for its timeout: a client that stalls
/// mid-body frees its connection instead of holding it.
pub struct IdleBody<B> {
    inner: B,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl<B> IdleBody<B> {
    /// `inner`, failing after `timeout` without a frame.
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

/// The error of a body that went quiet.
#[derive(Debug, thiserror::Error)]
#[error("the request body sent nothing for {0:?} (FILE_AGENT_BODY_TIMEOUT)")]
pub struct BodyTimeout(Duration);

impl<B> http_body::Body for IdleBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let deadline = tokio::time::Instant::now() + this.timeout;
                this.sleep.as_mut().reset(deadline);
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout(this.timeout).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_write_the_peer_takes_nothing_of_fails_after_its_timeout_and_not_before() {
        let (ours, theirs) = tokio::io::duplex(64);
        let mut ours = WriteDeadline::new(ours, Duration::from_millis(300));
        ours.write_all(&[0; 64]).await.unwrap();
        let started = std::time::Instant::now();
        let error = ours.write_all(&[0; 1]).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert!(
            error.to_string().contains("FILE_AGENT_WRITE_TIMEOUT"),
            "{error}"
        );
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        drop(theirs);
    }

    #[tokio::test]
    async fn a_slow_reader_that_takes_a_byte_now_and_then_is_never_cut() {
        // The answer takes 1.6 s in all, longer than the deadline, while no wait between two
        // bytes comes near it (a tenth of it: a busy machine stretching a 100 ms sleep to the
        // whole second is what it would take to cut, where 150 ms against 300 was cut at load
        // 11 on two cores).
        let (ours, mut theirs) = tokio::io::duplex(4);
        let mut ours = WriteDeadline::new(ours, Duration::from_secs(1));
        let reader = tokio::spawn(async move {
            let mut byte = [0; 1];
            for _ in 0..16 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                tokio::io::AsyncReadExt::read_exact(&mut theirs, &mut byte)
                    .await
                    .unwrap();
            }
        });
        ours.write_all(&[0; 16]).await.unwrap();
        reader.await.unwrap();
    }
}
