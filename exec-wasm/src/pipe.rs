//! Capped output for wasm runs: the guest's writes always succeed; what passes the cap is
//! dropped and the run is marked truncated, exactly as for every other executor. A write that
//! kept something calls the pipe's waker, if it has one, so whoever streams the output sleeps
//! until there is some.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use outpost_core::executor::{CappedBuffer, WaitWaker};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

struct Captured {
    kept: CappedBuffer,
    fresh: Vec<u8>,
    /// Called after a push that kept something (see [`CappedPipe::notify_with`]).
    notify: Option<WaitWaker>,
}

/// A clonable stdout/stderr sink keeping at most `cap` bytes.
#[derive(Clone)]
pub(crate) struct CappedPipe {
    inner: Arc<Mutex<Captured>>,
}

impl CappedPipe {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Captured {
                kept: CappedBuffer::new(cap),
                fresh: Vec::new(),
                notify: None,
            })),
        }
    }

    /// From now on, `waker` is called after every write that kept something; false if the
    /// pipe's lock was poisoned (then nobody is called).
    pub(crate) fn notify_with(&self, waker: WaitWaker) -> bool {
        self.inner
            .lock()
            .map(|mut c| c.notify = Some(waker))
            .is_ok()
    }

    fn push(&self, bytes: &[u8]) {
        let wake = match self.inner.lock() {
            Ok(mut c) => {
                let kept = c.kept.push(bytes).to_vec();
                c.fresh.extend_from_slice(&kept);
                c.notify.clone().filter(|_| !kept.is_empty())
            }
            Err(_) => None,
        };
        // Called with the lock released: the woken reader takes it at once.
        if let Some(wake) = wake {
            wake();
        }
    }

    /// Bytes kept since the last call.
    pub(crate) fn fresh(&self) -> Vec<u8> {
        self.inner
            .lock()
            .map(|mut c| std::mem::take(&mut c.fresh))
            .unwrap_or_default()
    }

    /// The captured bytes (with the truncation marker) and whether anything was cut.
    pub(crate) fn take(&self) -> (Vec<u8>, bool) {
        match self.inner.lock() {
            Ok(mut c) => {
                let buf = std::mem::replace(&mut c.kept, CappedBuffer::new(0));
                let truncated = buf.truncated();
                (buf.finish(), truncated)
            }
            Err(_) => (Vec::new(), false),
        }
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
