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
}

impl Schedule {
    /// The schedule of planned requests, and their bodies in order.
    pub fn of(requests: Vec<PlannedRequest>) -> (Schedule, Vec<Bytes>) {
        let mut s = Schedule::default();
        let mut bodies = Vec::with_capacity(requests.len());
        for r in requests {
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
        (s, bodies)
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
