//! Request bodies in progress. Each request whose body has not all arrived is counted against
//! its source address — at most [`Limits::bodies_per_address`] at once, one more is refused
//! before any of its body is read — and gets a deadline, [`Limits::body_deadline`] of the
//! length it declares, counted from its head: a body not all there by then fails with
//! [`BodyTimedOut`], which the routes answer 408 `request_timeout` (and the connection, its
//! body unread, is closed).
//!
//! It never reads a body itself and knows nothing of routes; the listener wraps every
//! request's body here before the router sees it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::Limits;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body that did not arrive by its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub(crate) struct BodyTimedOut;

impl BodyTimedOut {
    /// Whether `error`, or an error it wraps, is a body that did not arrive in time.
    pub(crate) fn caused(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut cause = Some(error);
        while let Some(e) = cause {
            if e.is::<Self>() {
                return true;
            }
            cause = e.source();
        }
        false
    }
}

/// The bodies in progress, by source address.
pub(crate) struct Inflight {
    limits: Limits,
    by_address: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
}

impl Inflight {
    /// Nothing in progress yet.
    pub(crate) fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            by_address: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
        })
    }

    /// Bodies in progress now, every address together.
    pub(crate) fn in_progress(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// `body`, counted against `addr` until it ends or is dropped and bounded in time by
    /// what it `declared`; `None` when `addr` already has its most bodies in progress.
    pub(crate) fn track<B>(
        self: &Arc<Self>,
        addr: IpAddr,
        declared: Option<u64>,
        body: B,
    ) -> Option<Tracked<B>> {
        {
            let mut by_address = self
                .by_address
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = by_address.entry(addr).or_default();
            if *count >= self.limits.bodies_per_address {
                return None;
            }
            *count += 1;
        }
        self.total.fetch_add(1, Ordering::Relaxed);
        let deadline = self.limits.body_deadline(declared.unwrap_or(0));
        Some(Tracked {
            inner: body,
            slot: Some(Slot {
                inflight: self.clone(),
                addr,
            }),
            deadline: Box::pin(tokio::time::sleep(deadline)),
        })
    }
}

/// One body's place in the count, given back when dropped.
struct Slot {
    inflight: Arc<Inflight>,
    addr: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.inflight.total.fetch_sub(1, Ordering::Relaxed);
        let mut by_address = self
            .inflight
            .by_address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = by_address.get_mut(&self.addr) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                by_address.remove(&self.addr);
            }
        }
    }
}

/// A request body counted while it arrives, failing with [`BodyTimedOut`] past its deadline.
pub(crate) struct Tracked<B> {
    inner: B,
    /// `None` once the body ended, failed or timed out.
    slot: Option<Slot>,
    deadline: Pin<Box<Sleep>>,
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.slot.is_none() {
            // Ended or given up: nothing more is read.
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if this.inner.is_end_stream() {
                    this.slot = None;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.slot = None;
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.slot = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    this.slot = None;
                    return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.slot.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
