//! Incremental Server-Sent-Events parser (the framing layer only).
//!
//! Owns `SseParser` and `SseError`. Bytes arrive in arbitrary pieces (body frames); the parser
//! keeps the unfinished line and the event's accumulated `data` between calls, and hands each
//! complete event's data to a callback as a borrowed slice. Buffers are reused, so a steady
//! stream costs no allocation per event. The OpenAI-style interpretation of the data lives in
//! `openai.rs` (re-exported here for convenience).
//!
//! Rules (WHATWG SSE): lines end with `\n`, `\r\n` or `\r`; `data:` lines (one optional space
//! after the colon) accumulate, joined with `\n`; a blank line dispatches the event; lines
//! starting with `:` are comments; other fields (`event`, `id`, `retry`, unknown) are ignored.

pub use crate::openai::{parse_openai_event, parse_openai_response, OpenAiEvent, Usage};

/// Default upper bound on one event's data (and on one unfinished line).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Why a stream (or an event in it) could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// The event's data is not the JSON expected (or not JSON at all).
    #[error("malformed event: {message}")]
    Malformed { message: String },
    /// An event (or a line) grew past the parser's limit.
    #[error("SSE event larger than {limit_bytes} bytes")]
    TooLarge { limit_bytes: usize },
    /// The server sent an `{"error": ...}` object instead of a completion.
    #[error("server error event: {message}")]
    ServerError { message: String },
}

/// Incremental SSE parser; see the module docs for the rules.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of a line that has started but not yet ended.
    line: Vec<u8>,
    /// Accumulated data of the current event (lines joined with `\n`).
    data: Vec<u8>,
    /// Whether the current event has at least one `data` field (it may be empty).
    has_data: bool,
    /// The previous piece ended with `\r`; a `\n` at the start of the next piece belongs to it.
    after_cr: bool,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the default 16 MiB event limit.
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser that fails with `TooLarge` once an event's data or one line exceeds `max_event_bytes`.
    pub fn with_limit(max_event_bytes: usize) -> Self {
        SseParser {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            after_cr: false,
            max_event_bytes,
        }
    }

    /// Forget any partial line or event (to reuse the parser for another stream).
    pub fn reset(&mut self) {
        self.line.clear();
        self.data.clear();
        self.has_data = false;
        self.after_cr = false;
    }

    /// Consume the next piece of the stream, calling `on_event(data)` for each completed event.
    pub fn feed(&mut self, bytes: &[u8], mut on_event: impl FnMut(&[u8])) -> Result<(), SseError> {
        let mut rest = bytes;
        if self.after_cr {
            self.after_cr = false;
            if let Some(b'\n') = rest.first() {
                rest = &rest[1..];
            }
        }
        while !rest.is_empty() {
            let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                if self.line.len() + rest.len() > self.max_event_bytes {
                    return Err(SseError::TooLarge {
                        limit_bytes: self.max_event_bytes,
                    });
                }
                self.line.extend_from_slice(rest);
                return Ok(());
            };
            let piece = &rest[..end];
            let terminator = rest[end];
            rest = &rest[end + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            if self.line.is_empty() {
                self.process_line(piece, &mut on_event)?;
            } else {
                if self.line.len() + piece.len() > self.max_event_bytes {
                    return Err(SseError::TooLarge {
                        limit_bytes: self.max_event_bytes,
                    });
                }
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(piece);
                let result = self.process_line(&line, &mut on_event);
                line.clear();
                self.line = line;
                result?;
            }
        }
        Ok(())
    }

    /// End of stream. Lenient where the spec is strict: an unterminated last line is taken as a
    /// line, and an event still pending (no closing blank line) is dispatched, so a server that
    /// omits the final blank line after `data: [DONE]` is still understood.
    pub fn finish(&mut self, mut on_event: impl FnMut(&[u8])) -> Result<(), SseError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let result = self.process_line(&line, &mut on_event);
            self.line = line;
            self.line.clear();
            result?;
        }
        if self.has_data {
            on_event(&self.data);
        }
        self.reset();
        Ok(())
    }

    fn process_line(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(&[u8]),
    ) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                on_event(&self.data);
                self.data.clear();
                self.has_data = false;
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        if field == b"data" {
            let extra = value.len() + usize::from(self.has_data);
            if self.data.len() + extra > self.max_event_bytes {
                return Err(SseError::TooLarge {
                    limit_bytes: self.max_event_bytes,
                });
            }
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events_whole(input: &[u8]) -> Vec<String> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.feed(input, |d| out.push(String::from_utf8_lossy(d).into_owned()))
            .unwrap();
        p.finish(|d| out.push(String::from_utf8_lossy(d).into_owned()))
            .unwrap();
        out
    }

    fn events_split(input: &[u8], step: usize) -> Vec<String> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            p.feed(piece, |d| out.push(String::from_utf8_lossy(d).into_owned()))
                .unwrap();
        }
        p.finish(|d| out.push(String::from_utf8_lossy(d).into_owned()))
            .unwrap();
        out
    }

    const MIXED: &[u8] = b": keep-alive comment\r\n\
        event: message\r\nid: 7\r\nretry: 100\r\ndata: {\"a\":1}\r\n\r\n\
        data:no-space\n\n\
        data: line1\rdata: line2\r\r\
        data:  two-spaces\n\n\
        data\n\n\
        data: [DONE]\n\n";

    fn expected_mixed() -> Vec<String> {
        [
            "{\"a\":1}",
            "no-space",
            "line1\nline2",
            " two-spaces",
            "",
            "[DONE]",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn whole_feed_follows_spec() {
        assert_eq!(events_whole(MIXED), expected_mixed());
    }

    #[test]
    fn every_split_equals_whole() {
        for step in 1..MIXED.len() {
            assert_eq!(events_split(MIXED, step), expected_mixed(), "step {step}");
        }
    }

    #[test]
    fn crlf_split_between_cr_and_lf() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in [&b"data: a\r"[..], b"\n", b"\r", b"\ndata: b\r\n\r\n"] {
            p.feed(piece, |d| out.push(d.to_vec())).unwrap();
        }
        assert_eq!(out, vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn comments_and_other_fields_do_not_dispatch() {
        assert!(events_whole(b": ping\n\nevent: x\nid: 3\n\n").is_empty());
    }

    #[test]
    fn finish_dispatches_unterminated_event() {
        assert_eq!(events_whole(b"data: [DONE]"), vec!["[DONE]".to_string()]);
        assert_eq!(events_whole(b"data: x\n"), vec!["x".to_string()]);
        assert!(events_whole(b"").is_empty());
    }

    #[test]
    fn too_large_event_is_an_error() {
        let mut p = SseParser::with_limit(16);
        assert!(p.feed(b"data: 0123456789\n", |_| {}).is_ok());
        let err = p.feed(b"data: 0123456789\n", |_| {}).unwrap_err();
        assert_eq!(err, SseError::TooLarge { limit_bytes: 16 });
        let mut p = SseParser::with_limit(16);
        let err = p.feed(b"data: 0123456789abcdefgh", |_| {}).unwrap_err();
        assert_eq!(err, SseError::TooLarge { limit_bytes: 16 });
    }

    #[test]
    fn buffers_are_reused() {
        let mut p = SseParser::new();
        let mut n = 0;
        p.feed(b"data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n\n", |_| n += 1)
            .unwrap();
        let cap = p.data.capacity();
        for _ in 0..100 {
            p.feed(b"data: short\n\n", |_| n += 1).unwrap();
        }
        assert_eq!(n, 101);
        assert_eq!(p.data.capacity(), cap);
    }
}
