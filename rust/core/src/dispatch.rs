//! The open-loop dispatcher: runs on a plain OS thread (never a tokio worker), waits for each
//! request's absolute deadline `t0 + offset_ns` by sleeping until shortly before it and spinning
//! the rest, then launches the request without waiting for earlier ones.
//!
//! Deadlines are always absolute, so a late wake-up never shifts later requests. Requests due
//! at the same instant go out back to back. `cancel` is polled at least every `CANCEL_POLL`.
//!
//! Causal sessions and DAGs: a request may carry a `Gate` (the requests it waits for and a think
//! time: one parent for a chain, more for a join). It then becomes due at the later of its own
//! offset and the last end of those requests plus the think time; until every one has ended it is
//! parked, and requests behind it in the schedule go out on time. Ends arrive on a channel
//! (request index, end offset in ns); the dispatcher sleeps on that channel, so an end wakes it.
//! An end is kept only while requests not yet pulled from the schedule still wait for it
//! (`Ends::followers` counts them), so memory holds the open edges, not every end.
//!
//! Closed-loop stages: with a cap, a request that starts a session (every request, without
//! causal sessions) is launched only while one of the `cap` users is free (`users.rs`). One due
//! while all are busy waits in line and is released by the end that frees a user: its release
//! time is the later of its own and that end's, so its send lag counts only the dispatcher's own
//! wake-up after the end. A session's later requests follow their gates and need no user.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::users::Users;

/// Time before a deadline at which the thread stops sleeping and busy-spins. Linux `nanosleep`
/// usually overshoots by 50–100 µs (timer slack); the margin absorbs that. The spin does not
/// yield: on a contended core a yield can cost a whole scheduler slice (milliseconds).
pub const SPIN_WINDOW: Duration = Duration::from_micros(300);

/// The spin margin of a dispatcher that runs real-time with no timer slack, or on the short
/// slice with none (`threads::raise_priority` gave "fifo" or "slice"): it wakes within a few µs
/// of its timer (a short-slice thread that spins longer spends its slice and lets busy threads
/// back in ahead of it), and a long real-time spin would keep the runner's own I/O thread and a
/// local server off that CPU at high rates (at 4,000 req/s a 300 µs spin is the whole CPU).
pub const FIFO_SPIN_WINDOW: Duration = Duration::from_micros(20);

/// Longest sleep between checks of the cancel flag.
pub const CANCEL_POLL: Duration = Duration::from_millis(10);

/// What ended a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The deadline came.
    Due,
    /// `cancel` was set.
    Cancelled,
    /// A request ended (its end was pushed onto the backlog).
    Ended,
}

/// Block until `deadline` (sleeping until `spin` before it, then spinning), until `cancel` is
/// set, or (with `ends`) until a request ends, whose (index, end) is then pushed onto `backlog`.
pub fn wait_until(
    deadline: Instant,
    spin: Duration,
    cancel: &AtomicBool,
    ends: Option<&Receiver<(usize, i64)>>,
    backlog: &mut Vec<(usize, i64)>,
) -> Wake {
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Wake::Cancelled;
        }
        if let Some(rx) = ends {
            if let Ok(end) = rx.try_recv() {
                backlog.push(end);
                return Wake::Ended;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Wake::Due;
        }
        let left = deadline - now;
        if left > spin {
            let nap = (left - spin).min(CANCEL_POLL);
            match ends {
                Some(rx) => match rx.recv_timeout(nap) {
                    Ok(end) => {
                        backlog.push(end);
                        return Wake::Ended;
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => std::thread::sleep(nap),
                },
                None => std::thread::sleep(nap),
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A gated request follows `parent` (a request index: the one whose answer its history
/// carries) and the requests `Ends::joins[joins.0..joins.1]` (a join's other dependencies), after
/// `think_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    pub parent: usize,
    pub think_ns: i64,
    pub joins: (usize, usize),
}

impl Gate {
    /// A gate on one parent.
    pub fn after(parent: usize, think_ns: i64) -> Gate {
        Gate {
            parent,
            think_ns,
            joins: (0, 0),
        }
    }
}

/// How the dispatcher hears of request ends, and what it does with them.
#[derive(Debug, Clone, Copy)]
pub struct Ends<'a> {
    /// (request index, end offset in ns) of every request that ended.
    pub rx: &'a Receiver<(usize, i64)>,
    /// Some request carries a gate: keep an end whose children are not scheduled yet.
    pub gated: bool,
    /// A closed-loop stage's users: at most this many sessions started and not ended (without
    /// gates, requests launched and not ended).
    pub cap: Option<usize>,
    /// The other dependencies of joins (`Gate::joins` ranges index it).
    pub joins: &'a [usize],
    /// Per request, how many gated requests wait for it (an end is kept until they have all
    /// been pulled from the schedule). Empty: every end is kept.
    pub followers: &'a [u32],
}

/// One request of the schedule as the dispatcher sees it.
#[derive(Debug)]
pub struct Scheduled<T> {
    pub index: usize,
    pub offset_ns: i64,
    pub gate: Option<Gate>,
    /// The last request of its session (no request follows it): in a closed-loop stage its end
    /// frees its user. True for every request without causal sessions.
    pub closes: bool,
    pub payload: T,
}

/// Result of a dispatch pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatched {
    /// How many items were handed to `launch`.
    pub count: usize,
    /// The pass stopped early because `cancel` was set.
    pub cancelled: bool,
    /// The pass stopped at `stop_at_ns` with requests not yet due.
    pub stopped: bool,
}

/// A pulled request waiting for some of its dependencies to end.
struct Pending<T> {
    item: Scheduled<T>,
    think_ns: i64,
    /// Dependencies not ended yet.
    left: usize,
    /// The latest end among those that ended.
    latest_ns: i64,
}

/// A released causal request waiting for its time.
struct Ready<T> {
    due_ns: i64,
    index: usize,
    closes: bool,
    payload: T,
}

impl<T> PartialEq for Ready<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ns, self.index) == (other.due_ns, other.index)
    }
}
impl<T> Eq for Ready<T> {}
impl<T> PartialOrd for Ready<T> {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Ready<T> {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.due_ns, self.index).cmp(&(other.due_ns, other.index))
    }
}

/// Hand each item to `launch(index, release_ns, payload)` when due: at `t0 + offset_ns`
/// (offsets nondecreasing, checked by the caller), or for a gated item at the later of that and
/// its parent's end plus the think time, or for a session's first request under a cap at the
/// later of its own and the end that freed a user (`release_ns` says which). Gates and the cap
/// are honoured only when `ends` is given. Stops early once `cancel` is set, or when nothing is due before `stop_at_ns` (then
/// items not launched stay unsent).
pub fn dispatch<T>(
    t0: Instant,
    spin: Duration,
    items: impl IntoIterator<Item = Scheduled<T>>,
    ends: Option<Ends<'_>>,
    stop_at_ns: Option<i64>,
    cancel: &AtomicBool,
    mut launch: impl FnMut(usize, i64, T),
) -> Dispatched {
    let at = |ns: i64| t0 + Duration::from_nanos(ns.max(0) as u64);
    let rx = ends.map(|e| e.rx);
    let gated = ends.is_some_and(|e| e.gated);
    let mut users = ends.and_then(|e| e.cap).map(|cap| Users::new(cap, gated));
    // first requests pulled from the schedule while every user was busy
    let mut waiting: VecDeque<Scheduled<T>> = VecDeque::new();
    let mut items = items.into_iter();
    let mut next = items.next();
    let mut ready: BinaryHeap<Reverse<Ready<T>>> = BinaryHeap::new();
    let joins = ends.map_or(&[][..], |e| e.joins);
    // requests pulled but waiting for dependencies, and who waits for each dependency
    let mut pending: HashMap<usize, Pending<T>> = HashMap::new();
    let mut parked: HashMap<usize, Vec<usize>> = HashMap::new();
    // ends that requests not yet pulled wait for, and how many of those requests are left
    let mut ended: HashMap<usize, i64> = HashMap::new();
    let mut unserved: Vec<u32> = ends.map_or_else(Vec::new, |e| e.followers.to_vec());
    let mut backlog: Vec<(usize, i64)> = Vec::new();
    let mut out = Dispatched {
        count: 0,
        cancelled: false,
        stopped: false,
    };
    loop {
        if let Some(rx) = rx {
            backlog.extend(rx.try_iter());
        }
        for (i, end_ns) in backlog.drain(..) {
            if let Some(u) = users.as_mut() {
                u.ended(i, end_ns);
            }
            let kids = parked.remove(&i).unwrap_or_default();
            if let Some(left) = unserved.get_mut(i) {
                *left = left.saturating_sub(kids.len() as u32);
            }
            for kid in kids {
                let p = pending.get_mut(&kid).expect("a parked request is pending");
                p.left -= 1;
                p.latest_ns = p.latest_ns.max(end_ns);
                if p.left == 0 {
                    let p = pending.remove(&kid).expect("pending");
                    ready.push(Reverse(Ready {
                        due_ns: p.item.offset_ns.max(p.latest_ns + p.think_ns),
                        index: p.item.index,
                        closes: p.item.closes,
                        payload: p.item.payload,
                    }));
                }
            }
            if gated && unserved.get(i).is_none_or(|&left| left > 0) {
                ended.insert(i, end_ns);
            }
        }
        // a first request that waited in line goes the moment a user is free
        if let Some(u) = users.as_mut().filter(|u| !u.full()) {
            if let Some(s) = waiting.pop_front() {
                u.started(s.index, true, s.closes);
                launch(s.index, s.offset_ns.max(u.room_ns), s.payload);
                out.count += 1;
                continue;
            }
        }
        // the next request of the schedule starts a session while every user is busy: it waits
        // for an end, unless a started session's next request is behind it (then it is pulled
        // into the line, so that one can be reached)
        let blocked = match (&users, &next) {
            (Some(u), Some(s)) => s.gate.is_none() && u.full() && !u.look_ahead(),
            _ => false,
        };
        let sched = next.as_ref().map(|s| s.offset_ns).filter(|_| !blocked);
        let released = ready.peek().map(|r| r.0.due_ns);
        let (due, from_schedule) = match (sched, released) {
            (Some(a), Some(b)) if b < a => (Some(b), false),
            (Some(a), _) => (Some(a), true),
            (None, Some(b)) => (Some(b), false),
            (None, None)
                if next.is_none()
                    && ready.is_empty()
                    && pending.is_empty()
                    && waiting.is_empty() =>
            {
                return out
            }
            // only parked requests, or every user busy: wait for an end
            (None, None) => (None, false),
        };
        let stop = stop_at_ns.filter(|&s| due.is_none_or(|d| d > s));
        let target = match (due, stop) {
            (_, Some(s)) => s,
            (Some(d), None) => d,
            (None, None) => i64::MAX / 2,
        };
        match wait_until(at(target), spin, cancel, rx, &mut backlog) {
            Wake::Cancelled => {
                out.cancelled = true;
                return out;
            }
            Wake::Ended => continue,
            Wake::Due if stop.is_some() => {
                out.stopped = true;
                return out;
            }
            Wake::Due if due.is_none() => continue,
            Wake::Due => {}
        }
        if from_schedule {
            let s = next.take().expect("a scheduled item");
            next = items.next();
            let gate = s.gate.filter(|_| rx.is_some());
            if let Some(u) = users.as_mut() {
                u.pulled(s.index, gate.map(|g| g.parent), s.closes);
            }
            match gate {
                None => match users.as_mut() {
                    Some(u) if u.full() => waiting.push_back(s),
                    Some(u) => {
                        u.started(s.index, true, s.closes);
                        launch(s.index, s.offset_ns.max(u.room_ns), s.payload);
                        out.count += 1;
                    }
                    None => {
                        launch(s.index, s.offset_ns, s.payload);
                        out.count += 1;
                    }
                },
                Some(g) => {
                    let (mut left, mut latest_ns) = (0usize, i64::MIN);
                    let deps = std::iter::once(g.parent)
                        .chain(joins[g.joins.0..g.joins.1].iter().copied());
                    for dep in deps {
                        match ended.get(&dep).copied() {
                            Some(end_ns) => {
                                latest_ns = latest_ns.max(end_ns);
                                if let Some(n) = unserved.get_mut(dep) {
                                    *n = n.saturating_sub(1);
                                    if *n == 0 {
                                        ended.remove(&dep);
                                    }
                                }
                            }
                            None => {
                                left += 1;
                                parked.entry(dep).or_default().push(s.index);
                            }
                        }
                    }
                    if left > 0 {
                        pending.insert(
                            s.index,
                            Pending {
                                item: s,
                                think_ns: g.think_ns,
                                left,
                                latest_ns,
                            },
                        );
                    } else if latest_ns + g.think_ns <= s.offset_ns {
                        if let Some(u) = users.as_mut() {
                            u.started(s.index, false, s.closes);
                        }
                        launch(s.index, s.offset_ns, s.payload);
                        out.count += 1;
                    } else {
                        ready.push(Reverse(Ready {
                            due_ns: latest_ns + g.think_ns,
                            index: s.index,
                            closes: s.closes,
                            payload: s.payload,
                        }));
                    }
                }
            }
        } else {
            let r = ready.pop().expect("a released item").0;
            if let Some(u) = users.as_mut() {
                u.started(r.index, false, r.closes);
            }
            launch(r.index, r.due_ns, r.payload);
            out.count += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;

    fn open(offsets: &[i64]) -> Vec<Scheduled<i64>> {
        offsets
            .iter()
            .enumerate()
            .map(|(index, &o)| Scheduled {
                index,
                offset_ns: o,
                gate: None,
                closes: true,
                payload: o,
            })
            .collect()
    }

    #[test]
    fn launches_on_absolute_deadlines() {
        let cancel = AtomicBool::new(false);
        let t0 = Instant::now();
        let offsets = [0i64, 2_000_000, 2_000_000, 5_000_000, 12_000_000];
        let mut late_ns = Vec::new();
        let d = dispatch(
            t0,
            SPIN_WINDOW,
            open(&offsets),
            None,
            None,
            &cancel,
            |_, release, o| {
                let at = t0.elapsed().as_nanos() as i64;
                assert_eq!(release, o);
                assert!(at >= o, "launched early: {at} < {o}");
                late_ns.push(at - o);
            },
        );
        assert_eq!(
            d,
            Dispatched {
                count: 5,
                cancelled: false,
                stopped: false
            }
        );
        // Generous bound (shared CI machines); typical lateness is a few microseconds.
        assert!(late_ns.iter().all(|&l| l < 20_000_000), "{late_ns:?}");
    }

    #[test]
    fn cancel_stops_a_long_wait_quickly() {
        let cancel = Arc::new(AtomicBool::new(false));
        let c2 = cancel.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            c2.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        let mut launched = 0;
        let d = dispatch(
            t0,
            SPIN_WINDOW,
            open(&[0, 10_000_000_000]),
            None,
            None,
            &cancel,
            |_, _, _| launched += 1,
        );
        setter.join().unwrap();
        assert_eq!(
            d,
            Dispatched {
                count: 1,
                cancelled: true,
                stopped: false
            }
        );
        assert_eq!(launched, 1);
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "cancel took {:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn stop_at_leaves_later_requests_unsent() {
        let cancel = AtomicBool::new(false);
        let t0 = Instant::now();
        let mut sent = Vec::new();
        let d = dispatch(
            t0,
            SPIN_WINDOW,
            open(&[0, 1_000_000, 400_000_000]),
            None,
            Some(20_000_000),
            &cancel,
            |i, _, _| sent.push(i),
        );
        assert_eq!(sent, vec![0, 1]);
        assert!(d.stopped && !d.cancelled && d.count == 2);
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(20) && waited < Duration::from_millis(300),
            "{waited:?}"
        );
    }

    /// Request 1 follows request 0 (think 5 ms); request 2 is open. Request 0 "ends" at 30 ms,
    /// so 1 goes at 35 ms although it was scheduled at 1 ms, and 2 still goes at 10 ms.
    #[test]
    fn a_gated_request_waits_for_its_parent_and_others_do_not() {
        let cancel = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            tx.send((0usize, 30_000_000i64)).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        });
        let mut items = open(&[0, 1_000_000, 10_000_000]);
        items[1].gate = Some(Gate::after(0, 5_000_000));
        let mut log = Vec::new();
        let d = dispatch(
            t0,
            SPIN_WINDOW,
            items,
            Some(Ends {
                rx: &rx,
                gated: true,
                cap: None,
                joins: &[],
                followers: &[],
            }),
            None,
            &cancel,
            |i, release, _| {
                log.push((i, release, t0.elapsed().as_nanos() as i64));
            },
        );
        ender.join().unwrap();
        assert_eq!(d.count, 3);
        let order: Vec<usize> = log.iter().map(|l| l.0).collect();
        assert_eq!(order, vec![0, 2, 1]);
        let (_, release, at) = log[2];
        assert_eq!(release, 35_000_000);
        assert!(
            at >= 35_000_000,
            "sent before its parent ended + think: {at}"
        );
        assert!(
            log[1].2 < 30_000_000,
            "the open request waited: {:?}",
            log[1]
        );
    }

    /// With a cap (a closed-loop stage), a due request waits for an end to make room and is
    /// released at that end; an end that leaves room to spare releases nothing early.
    #[test]
    fn a_cap_holds_requests_until_an_end_makes_room() {
        let cancel = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send((1usize, 20_000_000i64)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            tx.send((0usize, 40_000_000i64)).unwrap();
        });
        let mut log = Vec::new();
        let d = dispatch(
            t0,
            SPIN_WINDOW,
            open(&[0, 0, 0, 0]),
            Some(Ends {
                rx: &rx,
                gated: false,
                cap: Some(2),
                joins: &[],
                followers: &[],
            }),
            None,
            &cancel,
            |i, release, _| log.push((i, release, t0.elapsed().as_nanos() as i64)),
        );
        ender.join().unwrap();
        assert_eq!(d.count, 4);
        let released: Vec<(usize, i64)> = log.iter().map(|l| (l.0, l.1)).collect();
        assert_eq!(
            released,
            vec![(0, 0), (1, 0), (2, 20_000_000), (3, 40_000_000)]
        );
        assert!(log[2].2 >= 20_000_000 && log[3].2 >= 40_000_000, "{log:?}");
        assert!(
            log[1].2 < 20_000_000,
            "the second went out at once: {log:?}"
        );
    }

    /// Closed loop with causal sessions: a user is held from a session's first request to the
    /// end of its last, the think time included. With one user, session A (requests 0 and 2, 5 ms
    /// of think time) runs whole before session B (request 1) starts, although 1 comes before 2
    /// in the schedule: 1 waits in line while 2 is pulled past it (else A could never go on and
    /// free its user), and 1 is released at the end of 2.
    #[test]
    fn a_session_holds_its_user_from_its_first_request_to_the_end_of_its_last() {
        let cancel = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        let mut items = open(&[0, 0, 0]);
        items[0].closes = false;
        items[2].gate = Some(Gate::after(0, 5_000_000));
        let ends = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut log = Vec::new();
        let d = dispatch(
            t0,
            SPIN_WINDOW,
            items,
            Some(Ends {
                rx: &rx,
                gated: true,
                cap: Some(1),
                joins: &[],
                followers: &[],
            }),
            None,
            &cancel,
            |i, release, _| {
                log.push((i, release));
                let (tx, ends) = (tx.clone(), ends.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(10));
                    let end = t0.elapsed().as_nanos() as i64;
                    ends.lock().unwrap().push((i, end));
                    tx.send((i, end)).unwrap();
                });
            },
        );
        assert_eq!(d.count, 3);
        let order: Vec<usize> = log.iter().map(|l| l.0).collect();
        assert_eq!(order, vec![0, 2, 1]);
        let ends = ends.lock().unwrap().clone();
        let end_of = |i: usize| ends.iter().find(|e| e.0 == i).unwrap().1;
        assert_eq!(log[0].1, 0);
        assert_eq!(
            log[1].1,
            end_of(0) + 5_000_000,
            "after its parent and the think time"
        );
        assert_eq!(
            log[2].1,
            end_of(2),
            "released by the end that freed the user"
        );
    }

    /// A DAG: requests 1 and 2 fan out from 0 (they leave together, 2 ms after it ends), and 3
    /// joins them (it waits for the later of their ends, plus 1 ms). 0's end is kept until both
    /// of its followers were pulled; the join is released by its last dependency.
    #[test]
    fn fan_out_leaves_together_and_a_join_waits_for_all() {
        let cancel = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        let mut items = open(&[0, 0, 0, 0]);
        items[1].gate = Some(Gate::after(0, 2_000_000));
        items[2].gate = Some(Gate::after(0, 2_000_000));
        // 3 waits for 2 (its history parent) and for 1 (joins[0..1])
        items[3].gate = Some(Gate {
            parent: 2,
            think_ns: 1_000_000,
            joins: (0, 1),
        });
        let joins = [1usize];
        let followers = [2u32, 1, 1, 0];
        // each request ends 5 ms after its send, but 1 ends 15 ms after its send
        let mut log = Vec::new();
        let d = dispatch(
            t0,
            SPIN_WINDOW,
            items,
            Some(Ends {
                rx: &rx,
                gated: true,
                cap: None,
                joins: &joins,
                followers: &followers,
            }),
            None,
            &cancel,
            |i, release, _| {
                log.push((i, release));
                let tx = tx.clone();
                let took: i64 = if i == 1 { 15_000_000 } else { 5_000_000 };
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_nanos(took as u64));
                    tx.send((i, release + took)).unwrap();
                });
            },
        );
        assert_eq!(d.count, 4);
        let release_of = |i: usize| log.iter().find(|l| l.0 == i).unwrap().1;
        assert_eq!(release_of(1), 5_000_000 + 2_000_000);
        assert_eq!(
            release_of(2),
            5_000_000 + 2_000_000,
            "siblings leave together"
        );
        // 1 ends at 7 + 15 = 22 ms, 2 at 7 + 5 = 12 ms: the join goes at 22 + 1 ms
        assert_eq!(release_of(3), 22_000_000 + 1_000_000);
        assert_eq!(log.last().unwrap().0, 3);
    }

    /// A parent that ended before its child's own time does not delay the child.
    #[test]
    fn an_early_end_keeps_the_childs_schedule() {
        let cancel = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        let mut items = open(&[0, 20_000_000]);
        items[1].gate = Some(Gate::after(0, 1_000_000));
        let mut log = Vec::new();
        dispatch(
            t0,
            SPIN_WINDOW,
            items,
            Some(Ends {
                rx: &rx,
                gated: true,
                cap: None,
                joins: &[],
                followers: &[],
            }),
            None,
            &cancel,
            |i, release, _| {
                if i == 0 {
                    tx.send((0, 2_000_000)).unwrap();
                }
                log.push((i, release));
            },
        );
        assert_eq!(log, vec![(0, 0), (1, 20_000_000)]);
    }
}
