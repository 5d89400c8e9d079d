//! Per-request timing records: the per-task `RequestRecord`, the columnar `Records` a run
//! returns, the `ErrorKind` taxonomy, and the `Recorder` that assembles columns.
//!
//! Each request task fills its own `RequestRecord` (with its own chunk-time Vec) and hands it
//! over whole; the `Recorder` lays the records out as columns in request order (plus the chunk
//! times of every request end to end; `chunk_offsets` says where each request's run starts), and
//! hands them over in batches as the requests before them are in.
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
    /// The replica it was sent to (`NO_REPLICA`: never sent to one).
    pub replica: u16,
}

/// The replica of a request never handed to one (not sent).
pub const NO_REPLICA: u16 = u16::MAX;

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
            replica: NO_REPLICA,
        }
    }

    /// Mark the request failed (the first failure wins; later ones are ignored).
    pub fn fail(&mut self, kind: ErrorKind, detail: &str) {
        if self.error_kind == ErrorKind::None {
            self.error_kind = kind;
            self.error_detail = one_line_detail(detail);
        }
    }

    /// Forget a failure and the end it stamped (the request is being sent again).
    pub fn clear_failure(&mut self) {
        self.error_kind = ErrorKind::None;
        self.error_detail.clear();
        self.end_ns = -1;
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

/// Columnar results of consecutive requests, `first` to `first + len() - 1` (a whole run, or
/// one batch of it): one entry per request, plus their chunk times end to end: row r's are
/// `chunk_us[chunk_offsets[r]..chunk_offsets[r+1]]`, in arrival order. The run-level fields
/// (`start_unix_ns` to `stats`) are set on the records a run returns, not on its batches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records {
    /// Request index of the first row.
    pub first: usize,
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
    /// len() + 1 entries.
    pub chunk_offsets: Vec<u64>,
    pub chunk_us: Vec<u32>,
    /// The replica each was sent to (`NO_REPLICA`: none); all 0 with one target.
    pub replica: Vec<u16>,
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
    /// The dispatcher's scheduling while it dispatched: "fifo", "nice", "slice" or "normal".
    pub dispatcher_priority: &'static str,
    /// Context switches of the I/O worker threads over the run.
    pub workers: Switches,
    /// Requests sent a second time, on a new connection, after the server closed the reused
    /// connection the first went out on without answering (`exchange::exchange_or_resend`).
    pub resent: u64,
    /// Times the dispatcher waited 1 ms or more for the next request's body (a source that reads
    /// bodies ahead fell behind), and the longest such wait.
    pub body_waits: u64,
    pub body_wait_max_ns: u64,
    /// Causal runs resending the engine's answers (`answers`): requests sent with their parent's
    /// answer written in, and those sent as recorded because their parent failed.
    pub answers_resent: u64,
    pub answers_recorded: u64,
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

/// Collects `RequestRecord`s into columns in request order, a batch at a time.
///
/// A record whose turn has come (every request before it is in) goes straight into the current
/// batch; one that arrives ahead of an earlier request's waits whole until the requests before
/// it are in. Requests finish roughly in the order they were sent, so few wait. `take_ready`
/// hands the batch over (the run's sink writes it out as the stage goes), so a recorder holds only
/// the rows not yet handed over and the records still waiting; `finish` lays out the rest,
/// filling the requests that never came in.
#[derive(Debug)]
pub struct Recorder {
    /// Each request's intended offset, ns from t0 (one per request: the run's size).
    intended: Vec<i64>,
    /// Rows `ready.first..next`, in request order.
    ready: Records,
    /// Records in, ahead of `next`.
    waiting: std::collections::BTreeMap<usize, RequestRecord>,
    /// The first request not yet in `ready` (nor handed over).
    next: usize,
    received: usize,
}

impl Records {
    /// No rows; the next row will be request `first`.
    fn empty_at(first: usize) -> Self {
        Records {
            first,
            chunk_offsets: vec![0],
            ..Records::default()
        }
    }

    /// Append request `rec.index`'s row (it must be request `first + len()`).
    fn push(&mut self, rec: RequestRecord, intended_ns: i64) {
        debug_assert_eq!(rec.index, self.first + self.len());
        self.intended_ns.push(intended_ns);
        self.release_ns.push(rec.release_ns);
        self.conn_ns.push(rec.conn_ns);
        self.sent_ns.push(rec.sent_ns);
        self.first_byte_ns.push(rec.first_byte_ns);
        self.first_token_ns.push(rec.first_token_ns);
        self.end_ns.push(rec.end_ns);
        self.status.push(rec.status);
        self.error_kind.push(rec.error_kind as u8);
        self.prompt_tokens.push(rec.prompt_tokens);
        self.completion_tokens.push(rec.completion_tokens);
        self.cached_tokens.push(rec.cached_tokens);
        self.output_chunks.push(rec.output_chunks);
        self.error_detail.push(rec.error_detail);
        self.chunk_us.extend_from_slice(&rec.chunk_us);
        self.chunk_offsets.push(self.chunk_us.len() as u64);
        self.replica.push(rec.replica);
    }

    /// Append `other`'s rows (which must start where these end).
    pub fn append(&mut self, other: Records) {
        assert_eq!(other.first, self.first + self.len(), "batches out of order");
        let base = self.chunk_us.len() as u64;
        if self.chunk_offsets.is_empty() {
            self.chunk_offsets.push(0);
        }
        self.intended_ns.extend(other.intended_ns);
        self.release_ns.extend(other.release_ns);
        self.conn_ns.extend(other.conn_ns);
        self.sent_ns.extend(other.sent_ns);
        self.first_byte_ns.extend(other.first_byte_ns);
        self.first_token_ns.extend(other.first_token_ns);
        self.end_ns.extend(other.end_ns);
        self.status.extend(other.status);
        self.error_kind.extend(other.error_kind);
        self.prompt_tokens.extend(other.prompt_tokens);
        self.completion_tokens.extend(other.completion_tokens);
        self.cached_tokens.extend(other.cached_tokens);
        self.output_chunks.extend(other.output_chunks);
        self.error_detail.extend(other.error_detail);
        self.chunk_us.extend(other.chunk_us);
        self.replica.extend(other.replica);
        self.chunk_offsets
            .extend(other.chunk_offsets.iter().skip(1).map(|o| o + base));
    }
}

impl Recorder {
    /// A recorder for one request per entry of `intended_ns` (their intended offsets).
    pub fn new(intended_ns: Vec<i64>) -> Self {
        Recorder {
            intended: intended_ns,
            ready: Records::empty_at(0),
            waiting: std::collections::BTreeMap::new(),
            next: 0,
            received: 0,
        }
    }

    /// Store a finished request. Returns false (and drops it) if its index is out of range or
    /// already stored.
    pub fn insert(&mut self, rec: RequestRecord) -> bool {
        let i = rec.index;
        if i >= self.intended.len() || i < self.next || self.waiting.contains_key(&i) {
            return false;
        }
        self.received += 1;
        if i != self.next {
            self.waiting.insert(i, rec);
            return true;
        }
        self.ready.push(rec, self.intended[i]);
        self.next += 1;
        while let Some(entry) = self.waiting.first_entry() {
            if *entry.key() != self.next {
                break;
            }
            let rec = entry.remove();
            self.ready.push(rec, self.intended[self.next]);
            self.next += 1;
        }
        true
    }

    /// How many requests have been stored.
    pub fn received(&self) -> usize {
        self.received
    }

    /// Hand over the rows ready so far (every request before them is in, so later ones go after
    /// them); None when there are none.
    pub fn take_ready(&mut self) -> Option<Records> {
        if self.ready.is_empty() {
            return None;
        }
        Some(std::mem::replace(
            &mut self.ready,
            Records::empty_at(self.next),
        ))
    }

    /// The rows not handed over yet, to the last request. Requests without a record were never
    /// sent: they get `missing` (with its detail) and -1 times.
    pub fn finish(mut self, start_unix_ns: i64, missing: (ErrorKind, &str)) -> Records {
        for i in self.next..self.intended.len() {
            let rec = self.waiting.remove(&i).unwrap_or_else(|| {
                let mut never = RequestRecord::new(i);
                never.error_kind = missing.0;
                never.error_detail = missing.1.to_string();
                never
            });
            self.ready.push(rec, self.intended[i]);
        }
        self.ready.start_unix_ns = start_unix_ns;
        self.ready
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
        let mut rec = Recorder::new(vec![0, 10, 20]);
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
        let r = rec.finish(123, (ErrorKind::Other, "none missing"));
        assert_eq!(r.intended_ns, vec![0, 10, 20]);
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
        let mut rec = Recorder::new(vec![0, 50, 90]);
        rec.insert(done(0, 0, &[4]));
        let mut inflight = RequestRecord::new(1);
        inflight.sent_ns = 50;
        inflight.token_chunk(60);
        inflight.fail(ErrorKind::Cancelled, "cancelled in flight");
        rec.insert(inflight);
        let r = rec.finish(0, (ErrorKind::Cancelled, "not sent: run cancelled"));
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
        let mut rec = Recorder::new(vec![0, 0]);
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
        let r = rec.finish(0, (ErrorKind::Other, ""));
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
        let mut rec = Recorder::new(vec![0; n]);
        for &i in &order {
            assert!(rec.insert(done(i, 0, &chunks(i))));
        }
        let r = rec.finish(0, (ErrorKind::Cancelled, "never sent"));
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

    /// Batches taken while records come in hold each request once, in request order, and
    /// together equal the records of a recorder never asked for them.
    #[test]
    fn batches_hand_over_rows_in_request_order() {
        let n = 30;
        let order: Vec<usize> = (0..n).map(|k| (k * 11 + 5) % n).collect();
        let intended: Vec<i64> = (0..n as i64).map(|i| i * 1000).collect();
        let mut whole = Recorder::new(intended.clone());
        let mut batched = Recorder::new(intended);
        let mut out = Records::default();
        let mut firsts = Vec::new();
        for (k, &i) in order.iter().enumerate() {
            let chunks: Vec<i64> = (0..(i % 3) as i64).map(|c| 5_000 + c * 1000).collect();
            whole.insert(done(i, i as i64, &chunks));
            batched.insert(done(i, i as i64, &chunks));
            assert!(
                !batched.insert(done(i, 0, &[])),
                "a second record of {i} is refused"
            );
            if k % 4 == 3 {
                if let Some(b) = batched.take_ready() {
                    assert_eq!(b.chunk_offsets.len(), b.len() + 1);
                    firsts.push((b.first, b.len()));
                    out.append(b);
                }
            }
        }
        out.append(batched.finish(7, (ErrorKind::Other, "")));
        assert!(
            firsts.len() >= 2,
            "rows were handed over before the end: {firsts:?}"
        );
        let w = whole.finish(7, (ErrorKind::Other, ""));
        assert_eq!(out.first, 0);
        assert_eq!(
            (
                out.sent_ns,
                out.chunk_offsets,
                out.chunk_us,
                out.intended_ns
            ),
            (w.sent_ns, w.chunk_offsets, w.chunk_us, w.intended_ns)
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
