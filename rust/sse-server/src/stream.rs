//! The response body: pre-built SSE events (`tok` deltas, a usage event, `[DONE]`) yielded as
//! separate chunked-encoding frames, optionally with a pause before each token event.
//!
//! Events are built once at startup and shared (`Bytes` clones are reference counts), so a
//! response costs no formatting or copying.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

/// The events every response is made of.
#[derive(Debug)]
pub struct Script {
    token: Bytes,
    usage: Bytes,
    done: Bytes,
    pub chunks: usize,
    pub delay: Duration,
}

impl Script {
    pub fn new(chunks: usize, delay: Duration, prompt_tokens: u64) -> Script {
        let token = Bytes::from_static(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n",
        );
        let usage = format!(
            "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\"completion_tokens\":{chunks},\
\"total_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":0}}}}}}\n\n",
            prompt_tokens + chunks as u64
        );
        Script {
            token,
            usage: Bytes::from(usage),
            done: Bytes::from_static(b"data: [DONE]\n\n"),
            chunks,
            delay,
        }
    }
}

/// A streaming body that walks through a `Script`.
pub struct SseBody {
    script: Arc<Script>,
    /// Index of the next event: 0..chunks are tokens, then usage, then done.
    next: usize,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl SseBody {
    pub fn new(script: Arc<Script>) -> SseBody {
        SseBody {
            script,
            next: 0,
            sleep: None,
        }
    }
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let chunks = this.script.chunks;
        if this.next < chunks && !this.script.delay.is_zero() {
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(this.script.delay)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        let data = match this.next {
            i if i < chunks => this.script.token.clone(),
            i if i == chunks => this.script.usage.clone(),
            i if i == chunks + 1 => this.script.done.clone(),
            _ => return Poll::Ready(None),
        };
        this.next += 1;
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.next > self.script.chunks + 1
    }

    fn size_hint(&self) -> SizeHint {
        // Unknown to hyper on purpose: the response goes out chunked, like a real server's.
        SizeHint::default()
    }
}
