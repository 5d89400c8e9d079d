//! What a run is asked to send: `PlannedRequest` (one request with its body), `Schedule` (every
//! request but the bodies, known before t0) and the checks a schedule must pass.

use bytes::Bytes;

use crate::config::RunConfig;
use crate::dispatch::Gate;
use crate::error::CoreError;

/// One request of the schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlannedRequest {
    /// e.g. "/v1/chat/completions".
    pub path: String,
    /// The JSON body, sent as is.
    pub body: Bytes,
    /// When it is due, ns after t0 (nondecreasing across the schedule).
    pub offset_ns: i64,
    /// Causal sessions and DAGs: send no earlier than the end of an earlier request (and of
    /// `joins`, with a gate) plus a think time.
    pub after: Option<Gate>,
    /// A join's other dependencies (earlier request indexes); `Schedule::of` points the gate's
    /// `joins` range at them.
    pub joins: Vec<usize>,
    /// This request's own headers (name, value), sent after the run's.
    pub headers: Vec<(String, String)>,
}

/// Everything about a run's requests but their bodies, known before t0 (a few bytes a request):
/// request i goes to `paths[path_index[i]]`, is due `offsets_ns[i]` after t0, and (causal
/// sessions, DAGs) follows `after[i]` when that is set, and the requests
/// `joins[g.joins.0..g.joins.1]` of its gate `g`. `after` may be empty (no request is gated).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    pub paths: Vec<String>,
    pub path_index: Vec<u8>,
    pub offsets_ns: Vec<i64>,
    pub after: Vec<Option<Gate>>,
    pub joins: Vec<usize>,
    /// Requests' own header lines (may be empty: none has any).
    pub head_lines: HeadLines,
    /// What a fleet's router reads of each request (may be empty: nothing).
    pub route: RouteKeys,
}

/// What a fleet's router (`route.rs`) reads of each request: request i's root session hash is
/// `sessions[i]` (0: none; empty: no request has one) and its prompt block hashes are
/// `blocks[block_offsets[i]..block_offsets[i + 1]]` (`block_offsets` empty: none has any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteKeys {
    pub sessions: Vec<u64>,
    pub blocks: Vec<u64>,
    pub block_offsets: Vec<u64>,
}

impl RouteKeys {
    /// Request `i`'s root session (None: none).
    pub fn session(&self, i: usize) -> Option<u64> {
        self.sessions.get(i).copied().filter(|&s| s != 0)
    }

    /// Request `i`'s block hashes (empty: none).
    pub fn blocks(&self, i: usize) -> &[u64] {
        match self.block_offsets.get(i..i + 2) {
            Some(&[a, b]) => &self.blocks[a as usize..b as usize],
            _ => &[],
        }
    }

    /// That there are none or one session per request, and none or n + 1 nondecreasing block
    /// offsets ending at the blocks' length.
    pub fn check(&self, n: usize) -> Result<(), CoreError> {
        if !self.sessions.is_empty() && self.sessions.len() != n {
            return Err(CoreError::config(
                "route",
                format!("{} session keys for {n} requests", self.sessions.len()),
            ));
        }
        let o = &self.block_offsets;
        let bad = match o.is_empty() {
            true => !self.blocks.is_empty(),
            false => {
                o.len() != n + 1
                    || o[0] != 0
                    || o.windows(2).any(|w| w[0] > w[1])
                    || o[n] != self.blocks.len() as u64
            }
        };
        if bad {
            return Err(CoreError::config(
                "route",
                format!(
                    "block offsets must be n + 1 ({}) nondecreasing offsets from 0 to the blocks' length ({})",
                    n + 1,
                    self.blocks.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Each request's own header lines, sent after the run's headers: request i's are
/// `bytes[offsets[i]..offsets[i + 1]]`, each `name: value\r\n` (none when `offsets` is empty).
/// One buffer for the run, so a request's lines cost no allocation when it is sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadLines {
    pub bytes: Bytes,
    pub offsets: Vec<u64>,
}

impl HeadLines {
    /// The lines of `headers[i]` for each request i.
    pub fn of(headers: &[Vec<(String, String)>]) -> Result<HeadLines, CoreError> {
        if headers.iter().all(Vec::is_empty) {
            return Ok(HeadLines::default());
        }
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(headers.len() + 1);
        offsets.push(0);
        for (i, own) in headers.iter().enumerate() {
            for (name, value) in own {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                    || http::HeaderValue::from_str(value).is_err()
                {
                    return Err(CoreError::config(
                        "headers",
                        format!("request {i}: {name:?}: {value:?} is not a header"),
                    ));
                }
                bytes.extend_from_slice(name.as_bytes());
                bytes.extend_from_slice(b": ");
                bytes.extend_from_slice(value.as_bytes());
                bytes.extend_from_slice(b"\r\n");
            }
            offsets.push(bytes.len() as u64);
        }
        let lines = HeadLines {
            bytes: Bytes::from(bytes),
            offsets,
        };
        lines.check(headers.len())?;
        Ok(lines)
    }

    /// Request `index`'s lines (empty: none).
    pub fn get(&self, index: usize) -> &[u8] {
        match self.offsets.get(index..index + 2) {
            Some(&[a, b]) => &self.bytes[a as usize..b as usize],
            _ => &[],
        }
    }

    /// That there are none or n + 1 nondecreasing offsets ending at the buffer's end, and that
    /// each request's lines are header lines (a valid name, `: `, a valid value, `\r\n`).
    pub fn check(&self, n: usize) -> Result<(), CoreError> {
        if self.offsets.is_empty() {
            return match self.bytes.is_empty() {
                true => Ok(()),
                false => Err(CoreError::config("headers", "header lines without offsets")),
            };
        }
        if self.offsets.len() != n + 1
            || self.offsets[0] != 0
            || self.offsets.windows(2).any(|w| w[0] > w[1])
            || self.offsets[n] != self.bytes.len() as u64
        {
            return Err(CoreError::config(
                "headers",
                format!(
                    "header line offsets must be n + 1 ({}) nondecreasing offsets from 0 to the lines' length ({})",
                    n + 1,
                    self.bytes.len()
                ),
            ));
        }
        for i in 0..n {
            let own = self.get(i);
            if own.is_empty() {
                continue;
            }
            let text = std::str::from_utf8(own).ok();
            let lines = text.and_then(|t| t.strip_suffix("\r\n")).unwrap_or("\n");
            for line in lines.split("\r\n") {
                let ok = line.split_once(':').is_some_and(|(name, value)| {
                    http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                        && http::HeaderValue::from_str(value.trim()).is_ok()
                });
                if !ok {
                    return Err(CoreError::config(
                        "headers",
                        format!(
                            "request {i}: {:?} is not a header line",
                            String::from_utf8_lossy(own)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Schedule {
    /// The schedule of planned requests, and their bodies in order.
    pub fn of(requests: Vec<PlannedRequest>) -> Result<(Schedule, Vec<Bytes>), CoreError> {
        let mut s = Schedule::default();
        let mut bodies = Vec::with_capacity(requests.len());
        let mut headers = Vec::with_capacity(requests.len());
        for r in requests {
            headers.push(r.headers);
            let k = match s.paths.iter().position(|p| *p == r.path) {
                Some(k) => k,
                None => {
                    s.paths.push(r.path);
                    s.paths.len() - 1
                }
            };
            s.path_index.push(k as u8);
            s.offsets_ns.push(r.offset_ns);
            let from = s.joins.len();
            s.joins.extend_from_slice(&r.joins);
            s.after.push(r.after.map(|g| Gate {
                joins: (from, s.joins.len()),
                ..g
            }));
            bodies.push(r.body);
        }
        s.head_lines = HeadLines::of(&headers)?;
        Ok((s, bodies))
    }

    pub fn len(&self) -> usize {
        self.offsets_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets_ns.is_empty()
    }
}

pub(crate) fn validate(config: &RunConfig, schedule: &Schedule) -> Result<(), CoreError> {
    if config.worker_threads == 0 {
        return Err(CoreError::config("worker_threads", "must be at least 1"));
    }
    if config.max_connections == 0 {
        return Err(CoreError::config("max_connections", "must be at least 1"));
    }
    if config.max_in_flight > config.max_connections {
        return Err(CoreError::config(
            "max_in_flight",
            format!(
                "{} users need as many connections; max_connections is {}",
                config.max_in_flight, config.max_connections
            ),
        ));
    }
    if !config.cpus.is_empty() {
        let usable = crate::threads::current_cpus();
        if let Some(cpu) = config.cpus.iter().find(|c| !usable.contains(c)) {
            return Err(CoreError::config(
                "cpus",
                format!("cpu {cpu} is not one this thread may run on ({usable:?})"),
            ));
        }
    }
    let n = schedule.len();
    schedule.head_lines.check(n)?;
    schedule.route.check(n)?;
    let replicas = 1 + config.more_urls.len();
    if replicas > u16::MAX as usize {
        return Err(CoreError::config(
            "more_urls",
            format!("{replicas} replicas is more than {}", u16::MAX - 1),
        ));
    }
    if n > u32::MAX as usize {
        return Err(CoreError::config(
            "requests",
            format!("{n} requests is more than 2^32-1"),
        ));
    }
    if schedule.path_index.len() != n || !(schedule.after.is_empty() || schedule.after.len() == n) {
        return Err(CoreError::config(
            "schedule",
            format!(
                "{n} offsets, {} path indexes, {} gates (want one each, gates may be empty)",
                schedule.path_index.len(),
                schedule.after.len()
            ),
        ));
    }
    if let Some(i) = schedule
        .path_index
        .iter()
        .position(|&k| k as usize >= schedule.paths.len())
    {
        return Err(CoreError::config(
            "path_index",
            format!(
                "request {i} names path {} of {}",
                schedule.path_index[i],
                schedule.paths.len()
            ),
        ));
    }
    let mut prev = 0i64;
    // closed loop: a request already followed by another (a session is a chain)
    let mut followed = vec![false; if config.max_in_flight > 0 { n } else { 0 }];
    for (i, &offset) in schedule.offsets_ns.iter().enumerate() {
        if offset < 0 {
            return Err(CoreError::config(
                "offset_ns",
                format!("request {i} has negative offset {offset} ns"),
            ));
        }
        if offset < prev {
            return Err(CoreError::config(
                "offset_ns",
                format!("not nondecreasing: request {i} at {offset} ns follows {prev} ns"),
            ));
        }
        if let Some(Some(g)) = schedule.after.get(i) {
            if g.parent >= i || g.think_ns < 0 {
                return Err(CoreError::config(
                    "after",
                    format!(
                        "request {i} follows request {} after {} ns (must be an earlier request, think >= 0)",
                        g.parent, g.think_ns
                    ),
                ));
            }
            let joins = schedule.joins.get(g.joins.0..g.joins.1).ok_or_else(|| {
                CoreError::config(
                    "joins",
                    format!(
                        "request {i} names joins {}..{} of {}",
                        g.joins.0,
                        g.joins.1,
                        schedule.joins.len()
                    ),
                )
            })?;
            if let Some(&j) = joins.iter().find(|&&j| j >= i || j == g.parent) {
                return Err(CoreError::config(
                    "joins",
                    format!("request {i} waits for request {j} (must be an earlier request, named once)"),
                ));
            }
            if config.max_in_flight > 0 && !joins.is_empty() {
                return Err(CoreError::config(
                    "joins",
                    format!("request {i} waits for {} requests; a closed-loop stage's sessions are chains", joins.len() + 1),
                ));
            }
            if config.max_in_flight > 0 && std::mem::replace(&mut followed[g.parent], true) {
                return Err(CoreError::config(
                    "after",
                    format!(
                        "request {} is followed by two requests (the second: {i}); a closed-loop stage's sessions are chains",
                        g.parent
                    ),
                ));
            }
        }
        prev = offset;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_lines_are_each_requests_own_and_checked() {
        let none = HeadLines::of(&[vec![], vec![]]).unwrap();
        assert_eq!((none.get(0), none.offsets.len()), (&b""[..], 0));
        none.check(2).unwrap();
        let h = |n: &str, v: &str| vec![(n.to_string(), v.to_string())];
        let lines = HeadLines::of(&[
            h("x-replay-tool-calls", "40,25"),
            vec![],
            h("x-replay-tool-calls", ""),
        ])
        .unwrap();
        assert_eq!(lines.get(0), b"x-replay-tool-calls: 40,25\r\n");
        assert_eq!(lines.get(1), b"");
        assert_eq!(lines.get(2), b"x-replay-tool-calls: \r\n");
        assert!(lines.check(4).is_err()); // offsets for 3 requests
        let e = HeadLines::of(&[h("x-a", "1\r\nhost: evil")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("request 0") && e.contains("not a header"), "{e}");
        let bytes = Bytes::from_static(b"x-a: 1\r\nno colon\r\n");
        let raw = HeadLines {
            offsets: vec![0, bytes.len() as u64],
            bytes,
        };
        let e = raw.check(1).unwrap_err().to_string();
        assert!(
            e.contains("request 0") && e.contains("not a header line"),
            "{e}"
        );
        assert!(HeadLines::of(&[h("bad name", "1")]).is_err());
        let two =
            HeadLines::of(&[vec![("x-a".into(), "1".into()), ("x-b".into(), "2".into())]]).unwrap();
        assert_eq!(two.get(0), b"x-a: 1\r\nx-b: 2\r\n");
    }
}
