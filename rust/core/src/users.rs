//! A closed-loop stage's users (`dispatch::Ends::cap`): how many are busy, and when a user is freed.
//!
//! Without causal sessions every request is a session of its own: a user is busy from its send to
//! its end. With them (closed loop and `--sessions causal`), a user is busy from its session's
//! first request to the end of the session's last one (`Scheduled::closes`); the session's later
//! requests follow their gates and take no user of their own, and the think time between them
//! holds the user as a real one would be held.
//!
//! The dispatcher pulls requests from the schedule in order. A session's first request that finds
//! every user busy waits in line (`dispatch`); while it waits, the schedule must still be read past
//! it whenever a started session's next request lies beyond it, else that session could never go
//! on and free its user. `look_ahead` says when: some session started and the request that closes
//! it has not been pulled yet. Memory stays bounded by how far apart a session's requests are in
//! the schedule.

use std::collections::{HashMap, HashSet};

/// The users of a closed-loop stage.
#[derive(Debug)]
pub(crate) struct Users {
    cap: usize,
    sessions: bool,
    busy: usize,
    /// The end that last freed a user while all were busy: a request that waited for a user is
    /// released at it.
    pub room_ns: i64,
    /// Sessions only: each unfinished session's last request pulled so far -> the session (the
    /// index of its first request).
    tail: HashMap<usize, usize>,
    /// Sessions only: sessions whose closing request was pulled before they started.
    pulled_whole: HashSet<usize>,
    /// Sessions only: sessions started whose closing request is not pulled yet.
    open: HashSet<usize>,
    /// Sessions only: requests sent that close their session (their end frees the user).
    closers: HashSet<usize>,
}

impl Users {
    pub(crate) fn new(cap: usize, sessions: bool) -> Users {
        Users {
            cap,
            sessions,
            busy: 0,
            room_ns: i64::MIN,
            tail: HashMap::new(),
            pulled_whole: HashSet::new(),
            open: HashSet::new(),
            closers: HashSet::new(),
        }
    }

    /// Every user is busy.
    pub(crate) fn full(&self) -> bool {
        self.busy >= self.cap
    }

    /// A started session's next request is still ahead in the schedule.
    pub(crate) fn look_ahead(&self) -> bool {
        !self.open.is_empty()
    }

    /// Request `index` was pulled from the schedule; `parent` is the request it follows (None: it
    /// starts a session), `closes` says it is its session's last.
    pub(crate) fn pulled(&mut self, index: usize, parent: Option<usize>, closes: bool) {
        if !self.sessions {
            return;
        }
        let session = parent.and_then(|p| self.tail.remove(&p)).unwrap_or(index);
        if !closes {
            self.tail.insert(index, session);
        } else if !self.open.remove(&session) {
            self.pulled_whole.insert(session);
        }
    }

    /// Request `index` was sent: a session's first request takes a user.
    pub(crate) fn started(&mut self, index: usize, first: bool, closes: bool) {
        if first {
            self.busy += 1;
            if self.sessions && !self.pulled_whole.remove(&index) {
                self.open.insert(index);
            }
        }
        if self.sessions && closes {
            self.closers.insert(index);
        }
    }

    /// Request `index` ended at `end_ns`: the last request of a session frees its user.
    pub(crate) fn ended(&mut self, index: usize, end_ns: i64) {
        let frees = !self.sessions || self.closers.remove(&index);
        if frees {
            if self.full() {
                self.room_ns = self.room_ns.max(end_ns);
            }
            self.busy = self.busy.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_sessions_each_end_frees_a_user() {
        let mut u = Users::new(2, false);
        u.started(0, true, true);
        u.started(1, true, true);
        assert!(u.full() && !u.look_ahead());
        u.ended(1, 7);
        assert!(!u.full());
        assert_eq!(u.room_ns, 7);
        u.ended(0, 9);
        assert_eq!(u.room_ns, 7, "room to spare: not a release time");
    }

    #[test]
    fn a_session_holds_its_user_until_its_last_request_ends() {
        // session 0: requests 0 -> 2 -> 3; session 1: request 1 alone
        let mut u = Users::new(2, true);
        u.pulled(0, None, false);
        u.started(0, true, false);
        assert!(u.look_ahead(), "request 2 is ahead");
        u.pulled(1, None, true);
        u.started(1, true, true);
        assert!(u.full());
        u.pulled(2, Some(0), false);
        assert!(u.look_ahead(), "request 3 is still ahead");
        u.ended(0, 10);
        assert!(u.full(), "a turn's end does not free the session's user");
        u.started(2, false, false);
        u.pulled(3, Some(2), true);
        assert!(!u.look_ahead());
        u.ended(1, 20);
        assert!(!u.full());
        assert_eq!(u.room_ns, 20);
        u.ended(2, 30);
        u.started(3, false, true);
        u.ended(3, 40);
        assert_eq!(u.busy, 0);
    }

    #[test]
    fn a_session_pulled_whole_before_it_started_needs_no_look_ahead() {
        let mut u = Users::new(1, true);
        u.pulled(5, None, false);
        u.pulled(6, Some(5), true);
        u.started(5, true, false);
        assert!(!u.look_ahead());
        u.ended(5, 1);
        assert!(u.full());
        u.started(6, false, true);
        u.ended(6, 2);
        assert!(!u.full());
    }
}
