//! Per-request timing records: the per-task `RequestRecord`, the columnar `Records` a run
//! returns, the `ErrorKind` taxonomy, and the `Recorder` that assembles columns.
//!
//! Each request task fills its own `RequestRecord` (with its own chunk-time Vec) and hands it
//! over whole; the `Recorder` slots it by request index, and `finish` lays the slots out as
//! columns (one entry per request, index = request index) plus the chunk times of every request
//! end to end (`chunk_offsets` says where each request's run starts).
//! Times are ns since the run start; -1 means "never happened". Chunk times are kept compactly:
//! u32 microseconds after the request's first token (4 bytes a chunk; 71 minutes at most).

/// How a request ended. Stored in `Records::error_kind` as its `u8` value.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    None = 0,
    ConnectRefused = 1,
    Connect = 2,
    Timeout = 3,
    Stall = 4,
    Http4xx = 5,
    Http5xx = 6,
    /// Connection closed or reset mid-response (or a stream that ended before `[DONE]`).
    Reset = 7,
    MalformedSse = 8,
    Cancelled = 9,
    Other = 10,
    /// Still open (or not yet sent) when the stage's drain ended.
    CutOff = 11,
}

impl ErrorKind {
    /// Every kind, in `u8` order (`ALL[k as usize] == k`).
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::None,
        ErrorKind::ConnectRefused,
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Stall,
        ErrorKind::Http4xx,
        ErrorKind::Http5xx,
        ErrorKind::Reset,
        ErrorKind::MalformedSse,
        ErrorKind::Cancelled,
        ErrorKind::Other,
        ErrorKind::CutOff,
    ];

    /// Stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::None => "none",
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Stall => "stall",
            ErrorKind::Http4xx => "http_4xx",
            ErrorKind::Http5xx => "http_5xx",
            ErrorKind::Reset => "reset",
            ErrorKind::MalformedSse => "malformed_sse",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Other => "other",
            ErrorKind::CutOff => "cut_off",
        }
    }

    /// The kind stored as `v`, if any.
    pub fn from_u8(v: u8) -> Option<ErrorKind> {
        Self::ALL.get(v as usize).copied()
    }
}

/// Longest `error_detail` kept, in characters.
pub const MAX_DETAIL_CHARS: usize = 200;

/// First non-empty line of `text`, trimmed and cut to `MAX_DETAIL_CHARS` characters.
pub fn one_line_detail(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(MAX_DETAIL_CHARS).collect()
}

/// What one request task observed. Built by the task, handed to the `Recorder` when done.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub index: usize,
    /// When the request became due: its intended time, or later for a causal turn whose
    /// previous turn had not ended (+ think time).
    pub release_ns: i64,
    /// Time spent getting or opening a connection (slot wait and connect included), ns.
    pub conn_ns: i64,
    /// When the request's write to its connection started (slot and connection in hand).
    pub sent_ns: i64,
    pub first_byte_ns: i64,
    pub first_token_ns: i64,
    pub end_ns: i64,
    pub status: u16,
    pub error_kind: ErrorKind,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub output_chunks: i64,
    pub error_detail: String,
    /// Arrival of each token-bearing chunk, µs after the first token (so the first is 0).
    pub chunk_us: Vec<u32>,
    /// Keep `chunk_us` (false: only count chunks).
    pub keep_chunks: bool,
}

impl RequestRecord {
    /// A record with nothing observed yet.
    pub fn new(index: usize) -> Self {
        RequestRecord {
            index,
            release_ns: -1,
            conn_ns: -1,
            sent_ns: -1,
            first_byte_ns: -1,
            first_token_ns: -1,
            end_ns: -1,
            status: 0,
            error_kind: ErrorKind::None,
            prompt_tokens: -1,
            completion_tokens: -1,
            cached_tokens: -1,
            output_chunks: 0,
            error_detail: String::new(),
            chunk_us: Vec::new(),
            keep_chunks: true,
        }
    }

    /// Mark the request failed (the first failure wins; later ones are ignored).
    pub fn fail(&mut self, kind: ErrorKind, detail: &str) {
        if self.error_kind == ErrorKind::None {
            self.error_kind = kind;
            self.error_detail = one_line_detail(detail);
        }
    }

    /// Note a token-bearing chunk read at `t_ns`.
    pub fn token_chunk(&mut self, t_ns: i64) {
        if self.first_token_ns < 0 {
            self.first_token_ns = t_ns;
        }
        self.output_chunks += 1;
        if self.keep_chunks {
            let us = (t_ns - self.first_token_ns).max(0) / 1000;
            self.chunk_us.push(us.min(u32::MAX as i64) as u32);
        }
    }
}

/// Columnar results of a run: one entry per request (index = request index), plus the chunk
/// times of all requests end to end: request i's are `chunk_us[chunk_offsets[i]..chunk_offsets[i+1]]`,
/// in arrival order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records {
    pub intended_ns: Vec<i64>,
    pub release_ns: Vec<i64>,
    pub conn_ns: Vec<i64>,
    pub sent_ns: Vec<i64>,
    pub first_byte_ns: Vec<i64>,
    pub first_token_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    /// HTTP status, 0 = no response.
    pub status: Vec<u16>,
    /// `ErrorKind as u8`.
    pub error_kind: Vec<u8>,
    pub prompt_tokens: Vec<i64>,
    pub completion_tokens: Vec<i64>,
    /// -1 = not reported.
    pub cached_tokens: Vec<i64>,
    /// Token-bearing SSE events seen.
    pub output_chunks: Vec<i64>,
    /// Short one-line detail, empty when ok.
    pub error_detail: Vec<String>,
    /// n + 1 entries (empty until `finish`).
    pub chunk_offsets: Vec<u64>,
    pub chunk_us: Vec<u32>,
    /// Wall clock (Unix epoch ns) at the run's t0.
    pub start_unix_ns: i64,
    /// The run was cancelled before every request finished.
    pub cancelled: bool,
    /// The drain ended with requests still open (they are `CutOff`).
    pub cut_off: bool,
    /// What the runner itself did: warm-up, its threads' context switches.
    pub stats: RunStats,
}

/// The runner's own account of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Time from the start of the warm-up to t0.
    pub warmup_ns: i64,
    /// Connections the warm-up was asked to open, and how many it opened and checked.
    pub warm_wanted: usize,
    pub warm_opened: usize,
    /// Why the warm-up stopped short ("" when it did not).
    pub warm_detail: String,
    /// Context switches of the dispatcher thread between t0 and its last send.
    pub dispatcher: Switches,
    /// The dispatcher's scheduling while it dispatched: "fifo", "nice" or "normal".
    pub dispatcher_priority: &'static str,
    /// Context switches of the I/O worker threads over the run.
    pub workers: Switches,
}

/// Voluntary (the thread waited) and involuntary (the thread was preempted while runnable)
/// context switches, as Linux counts them per thread; zero elsewhere.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switches {
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Records {
    /// Number of requests.
    pub fn len(&self) -> usize {
        self.intended_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.intended_ns.is_empty()
    }
}

/// Collects `RequestRecord`s by index straight into columns (so a run holds each result once)
/// and assembles `Records`. Chunk times go into one buffer in request order as records come in:
/// a record that arrives ahead of an earlier request's waits (with its own chunk times) until
/// the requests before it are in, so the buffer is never copied to be sorted. Requests finish
/// roughly in the order they were sent, so few wait.
#[derive(Debug)]
pub struct Recorder {
    cols: Records,
    /// Chunk times of each request (index + 1; entry 0 is 0), prefix-summed by `finish`.
    lens: Vec<u64>,
    /// Records in, ahead of `next`: their chunk times, until the requests before them are in.
    waiting: std::collections::BTreeMap<usize, Vec<u32>>,
    /// The first request whose chunk times are not in the buffer yet.
    next: usize,
    filled: Vec<bool>,
    received: usize,
}

impl Recorder {
    /// A recorder for `n` requests.
    pub fn new(n: usize) -> Self {
        let cols = Records {
            intended_ns: Vec::new(),
            release_ns: vec![-1; n],
            conn_ns: vec![-1; n],
            sent_ns: vec![-1; n],
            first_byte_ns: vec![-1; n],
            first_token_ns: vec![-1; n],
            end_ns: vec![-1; n],
            status: vec![0; n],
            error_kind: vec![ErrorKind::None as u8; n],
            prompt_tokens: vec![-1; n],
            completion_tokens: vec![-1; n],
            cached_tokens: vec![-1; n],
            output_chunks: vec![0; n],
            error_detail: vec![String::new(); n],
            chunk_offsets: Vec::new(),
            chunk_us: Vec::new(),
            start_unix_ns: 0,
            cancelled: false,
            cut_off: false,
            stats: RunStats::default(),
        };
        Recorder {
            cols,
            lens: vec![0; n + 1],
            waiting: std::collections::BTreeMap::new(),
            next: 0,
            filled: vec![false; n],
            received: 0,
        }
    }

    /// Store a finished request. Returns false (and drops it) if its index is out of range or
    /// already filled.
    pub fn insert(&mut self, rec: RequestRecord) -> bool {
        let i = rec.index;
        match self.filled.get_mut(i) {
            Some(f @ false) => *f = true,
            _ => return false,
        }
        self.received += 1;
        let c = &mut self.cols;
        c.release_ns[i] = rec.release_ns;
        c.conn_ns[i] = rec.conn_ns;
        c.sent_ns[i] = rec.sent_ns;
        c.first_byte_ns[i] = rec.first_byte_ns;
        c.first_token_ns[i] = rec.first_token_ns;
        c.end_ns[i] = rec.end_ns;
        c.status[i] = rec.status;
        c.error_kind[i] = rec.error_kind as u8;
        c.prompt_tokens[i] = rec.prompt_tokens;
        c.completion_tokens[i] = rec.completion_tokens;
        c.cached_tokens[i] = rec.cached_tokens;
        c.output_chunks[i] = rec.output_chunks;
        c.error_detail[i] = rec.error_detail;
        self.lens[i + 1] = rec.chunk_us.len() as u64;
        if i == self.next {
            c.chunk_us.extend_from_slice(&rec.chunk_us);
            self.next += 1;
            self.flush_waiting(false);
        } else if !rec.chunk_us.is_empty() {
            self.waiting.insert(i, rec.chunk_us);
        }
        true
    }

    /// Move the waiting chunk times that are next in request order into the buffer (`all`: every
    /// one left, in order, skipping requests that never came in).
    fn flush_waiting(&mut self, all: bool) {
        while let Some(entry) = self.waiting.first_entry() {
            let i = *entry.key();
            if !all {
                while self.next < i && self.filled[self.next] && self.lens[self.next + 1] == 0 {
                    self.next += 1;
                }
                if i != self.next {
                    break;
                }
            }
            self.cols.chunk_us.extend_from_slice(&entry.remove());
            self.next = i + 1;
        }
    }

    /// How many requests have been stored.
    pub fn received(&self) -> usize {
        self.received
    }

    /// Lay out the columns. Requests without a record were never sent: they get `missing`
    /// (with `detail`) and -1 times. Chunk times still waiting go into the buffer in order.
    pub fn finish(
        mut self,
        intended_ns: Vec<i64>,
        start_unix_ns: i64,
        missing: (ErrorKind, &str),
    ) -> Records {
        self.flush_waiting(true);
        let mut out = self.cols;
        let n = self.filled.len();
        assert_eq!(
            intended_ns.len(),
            n,
            "intended_ns must have one entry per request"
        );
        out.intended_ns = intended_ns;
        out.start_unix_ns = start_unix_ns;
        for (i, _) in self.filled.iter().enumerate().filter(|(_, f)| !**f) {
            out.error_kind[i] = missing.0 as u8;
            out.error_detail[i] = missing.1.to_string();
        }
        let mut offsets = self.lens;
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        out.chunk_offsets = offsets;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(index: usize, sent: i64, chunks: &[i64]) -> RequestRecord {
        let mut r = RequestRecord::new(index);
        r.sent_ns = sent;
        r.first_byte_ns = sent + 1;
        for &t in chunks {
            r.token_chunk(t);
        }
        r.end_ns = sent + 100;
        r.status = 200;
        r
    }

    #[test]
    fn names_and_codes() {
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(*k as u8 as usize, i);
            assert_eq!(ErrorKind::from_u8(i as u8), Some(*k));
        }
        assert_eq!(ErrorKind::Http4xx.name(), "http_4xx");
        assert_eq!(ErrorKind::MalformedSse.name(), "malformed_sse");
        assert_eq!(ErrorKind::CutOff.name(), "cut_off");
        assert_eq!(ErrorKind::from_u8(12), None);
    }

    #[test]
    fn assembles_columns_in_index_order() {
        let mut rec = Recorder::new(3);
        // Finished out of order.
        assert!(rec.insert(done(2, 20, &[25_000, 27_000])));
        assert!(rec.insert(done(0, 0, &[5_000, 6_000, 9_000])));
        let mut failed = RequestRecord::new(1);
        failed.sent_ns = 10;
        failed.status = 503;
        failed.fail(ErrorKind::Http5xx, "\n  Service Unavailable  \nmore");
        assert!(rec.insert(failed));
        assert!(!rec.insert(done(1, 0, &[])), "duplicate index refused");
        assert!(!rec.insert(done(7, 0, &[])), "out of range refused");
        assert_eq!(rec.received(), 3);
        let r = rec.finish(vec![0, 10, 20], 123, (ErrorKind::Other, "none missing"));
        assert_eq!(r.len(), 3);
        assert_eq!(r.sent_ns, vec![0, 10, 20]);
        assert_eq!(r.first_token_ns, vec![5_000, -1, 25_000]);
        assert_eq!(r.output_chunks, vec![3, 0, 2]);
        assert_eq!(r.status, vec![200, 503, 200]);
        assert_eq!(r.error_kind, vec![0, ErrorKind::Http5xx as u8, 0]);
        assert_eq!(r.error_detail, vec!["", "Service Unavailable", ""]);
        assert_eq!(r.cached_tokens, vec![-1, -1, -1]);
        assert_eq!(r.chunk_offsets, vec![0, 3, 3, 5]);
        assert_eq!(
            r.chunk_us,
            vec![0, 1, 4, 0, 2],
            "µs after the first token, request order"
        );
        assert_eq!(r.start_unix_ns, 123);
        assert!(!r.cancelled);
    }

    #[test]
    fn missing_rows_are_cancelled() {
        let mut rec = Recorder::new(3);
        rec.insert(done(0, 0, &[4]));
        let mut inflight = RequestRecord::new(1);
        inflight.sent_ns = 50;
        inflight.token_chunk(60);
        inflight.fail(ErrorKind::Cancelled, "cancelled in flight");
        rec.insert(inflight);
        let r = rec.finish(
            vec![0, 50, 90],
            0,
            (ErrorKind::Cancelled, "not sent: run cancelled"),
        );
        assert_eq!(
            r.error_kind,
            vec![0, ErrorKind::Cancelled as u8, ErrorKind::Cancelled as u8]
        );
        assert_eq!(r.sent_ns, vec![0, 50, -1]);
        assert_eq!(r.end_ns[2], -1);
        assert_eq!(r.status[2], 0);
        assert_eq!(r.error_detail[2], "not sent: run cancelled");
        assert_eq!(r.chunk_offsets, vec![0, 1, 2, 2]);
    }

    #[test]
    fn chunk_times_are_microseconds_after_the_first_token() {
        let mut rec = Recorder::new(2);
        rec.insert(done(
            1,
            0,
            &[7_000_000, 7_000_999, 7_250_000, 4_300_000_000_000],
        ));
        let mut quiet = RequestRecord::new(0);
        quiet.keep_chunks = false;
        quiet.token_chunk(10);
        quiet.token_chunk(20);
        rec.insert(quiet);
        let r = rec.finish(vec![0, 0], 0, (ErrorKind::Other, ""));
        assert_eq!(r.output_chunks, vec![2, 4]);
        assert_eq!(r.first_token_ns, vec![10, 7_000_000]);
        assert_eq!(
            r.chunk_offsets,
            vec![0, 0, 4],
            "no times kept for request 0"
        );
        assert_eq!(
            r.chunk_us,
            vec![0, 0, 250, u32::MAX],
            "truncated to µs, saturating"
        );
    }

    /// Records coming in any order (some with no chunk, one never) give the chunk times of each
    /// request at its own offsets, in arrival order within it.
    #[test]
    fn chunk_times_land_in_request_order_whatever_the_arrival_order() {
        let n = 40;
        let chunks = |i: usize| -> Vec<i64> {
            (0..(i % 4) as i64)
                .map(|k| 1_000_000 + k * (i as i64 + 1) * 1000)
                .collect()
        };
        // a fixed shuffle: stride 7 over 40, with request 13 never coming in
        let order: Vec<usize> = (0..n)
            .map(|k| (k * 7 + 3) % n)
            .filter(|&i| i != 13)
            .collect();
        let mut rec = Recorder::new(n);
        for &i in &order {
            assert!(rec.insert(done(i, 0, &chunks(i))));
        }
        let r = rec.finish(vec![0; n], 0, (ErrorKind::Cancelled, "never sent"));
        for i in 0..n {
            let got = &r.chunk_us[r.chunk_offsets[i] as usize..r.chunk_offsets[i + 1] as usize];
            let want: Vec<u32> = if i == 13 {
                Vec::new()
            } else {
                chunks(i)
                    .iter()
                    .map(|&t| ((t - 1_000_000) / 1000) as u32)
                    .collect()
            };
            assert_eq!(got, want.as_slice(), "request {i}");
        }
        assert_eq!(r.chunk_offsets[n] as usize, r.chunk_us.len());
        assert_eq!(
            ErrorKind::from_u8(r.error_kind[13]),
            Some(ErrorKind::Cancelled)
        );
    }

    #[test]
    fn detail_is_one_short_line() {
        let long = "é".repeat(500);
        assert_eq!(one_line_detail(&long).chars().count(), MAX_DETAIL_CHARS);
        assert_eq!(one_line_detail(""), "");
        let mut r = RequestRecord::new(0);
        r.fail(ErrorKind::Stall, "first");
        r.fail(ErrorKind::Timeout, "second");
        assert_eq!(
            (r.error_kind, r.error_detail.as_str()),
            (ErrorKind::Stall, "first")
        );
    }
}
