//! What the client receives: a whole answer made by the proxy (its metrics, a 502 / 504), or the
//! upstream's body passed on read by read while each read is recorded.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::backlog::Recording;
use crate::exchange::Outcome;
use crate::upstream::{Sender, Upstream};
use crate::usage::UsageFilter;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client that stops reading once it has this event (the openai SDK does) had the whole answer.
const DONE_EVENT: &[u8] = b"data: [DONE]";
const TAIL: usize = DONE_EVENT.len() + 8;

/// The body of an answer to the client.
pub(crate) enum ProxyBody {
    Whole(Option<Bytes>),
    Passed(Box<Passing>),
}

impl ProxyBody {
    pub(crate) fn whole(data: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::Whole(Some(data.into()))
    }
}

/// The upstream's body on its way to the client.
pub(crate) struct Passing {
    upstream: Incoming,
    /// The request's record (the exchange, or just the outcome count for an unrecorded one).
    pub(crate) rec: Recording,
    /// Takes the usage-only event out (the proxy asked for it, the client did not).
    filter: Option<UsageFilter>,
    /// Sent last, once the upstream's body has ended: an event the filter held back.
    rest: Option<Bytes>,
    read_timeout: Option<Duration>,
    silence: Option<Pin<Box<Sleep>>>,
    /// The connection, put back for reuse once the body has been read to its end.
    conn: Option<(Sender, Arc<Upstream>)>,
    tail: Vec<u8>,
    ended: bool,
}

impl Passing {
    pub(crate) fn new(
        upstream: Incoming,
        rec: Recording,
        strip_usage: bool,
        read_timeout: Option<Duration>,
        conn: (Sender, Arc<Upstream>),
    ) -> Passing {
        Passing {
            upstream,
            rec,
            filter: strip_usage.then(UsageFilter::default),
            rest: None,
            read_timeout,
            silence: read_timeout.map(|d| Box::pin(tokio::time::sleep(d))),
            conn: Some(conn),
            tail: Vec::with_capacity(2 * TAIL),
            ended: false,
        }
    }

    fn note_sent(&mut self, data: &[u8]) {
        self.tail.extend_from_slice(data);
        if self.tail.len() > TAIL {
            let cut = self.tail.len() - TAIL;
            self.tail.drain(..cut);
        }
        if self.tail.trim_ascii_end().ends_with(DONE_EVENT) {
            self.rec.delivered = true;
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Whole(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ProxyBody::Passed(p) => p.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Whole(data) => data.is_none(),
            ProxyBody::Passed(p) => p.ended && p.rest.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Whole(Some(d)) => SizeHint::with_exact(d.len() as u64),
            ProxyBody::Whole(None) => SizeHint::with_exact(0),
            ProxyBody::Passed(_) => SizeHint::default(),
        }
    }
}

impl Passing {
    /// The upstream's body has ended: its connection goes back for reuse, and the answer counts
    /// as delivered (what is left goes out next).
    fn end(&mut self) {
        self.ended = true;
        self.rest = self
            .filter
            .as_mut()
            .map(UsageFilter::finish)
            .filter(|r| !r.is_empty());
        if let Some((sender, upstream)) = self.conn.take() {
            upstream.put_back(sender);
        }
        self.rec.delivered = true;
        self.rec.finish_as_is();
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if self.ended {
                return Poll::Ready(self.rest.take().map(|d| Ok(Frame::data(d))));
            }
            match Pin::new(&mut self.upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let (Some(d), Some(s)) = (self.read_timeout, self.silence.as_mut()) {
                        s.as_mut().reset(Instant::now() + d);
                    }
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers: not passed on
                    };
                    self.rec.chunk(data.clone());
                    let out = match self.filter.as_mut() {
                        Some(f) => f.push(&data),
                        None => data,
                    };
                    // the last read of a body of known length: the end is now (the client's side
                    // stops polling once it has written that many bytes)
                    if self.upstream.is_end_stream() {
                        self.end();
                    }
                    if out.is_empty() {
                        continue;
                    }
                    self.note_sent(&out);
                    return Poll::Ready(Some(Ok(Frame::data(out))));
                }
                Poll::Ready(Some(Err(e))) => {
                    // reset or cut mid-body: the client's connection is cut too
                    self.ended = true;
                    self.conn = None;
                    self.rec.finish(Outcome::UpstreamError);
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(None) => {
                    self.end();
                    continue;
                }
                Poll::Pending => {
                    if let Some(s) = self.silence.as_mut() {
                        if s.as_mut().poll(cx).is_ready() {
                            self.ended = true;
                            self.conn = None;
                            self.rec.finish(Outcome::Timeout);
                            return Poll::Ready(Some(Err(
                                "the upstream went silent mid-body".into()
                            )));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
