//! The pool of idle keep-alive connections: most recently used first, each dropped once it has
//! been idle for the pool's timeout, and checked for a close from the server before reuse.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::conn::Conn;

/// Idle keep-alive connections, most recently used first; each is dropped once it has been
/// idle for `idle_timeout`.
#[derive(Debug)]
pub struct Pool {
    idle: Mutex<VecDeque<(Conn, Instant)>>,
    idle_timeout: Duration,
    max_idle: usize,
}

impl Pool {
    pub fn new(idle_timeout: Duration, max_idle: usize) -> Pool {
        Pool {
            idle: Mutex::new(VecDeque::new()),
            idle_timeout,
            max_idle,
        }
    }

    fn expire(&self, idle: &mut VecDeque<(Conn, Instant)>, now: Instant) {
        while idle
            .front()
            .is_some_and(|(_, since)| now.duration_since(*since) >= self.idle_timeout)
        {
            idle.pop_front();
        }
    }

    /// The most recently used idle connection that is still alive, if any. Connections found
    /// closed by the server on the way are pushed onto `dead` rather than closed here: closing a
    /// socket costs tens of µs (deregistering it, the FIN), which the dispatcher hands to an I/O
    /// worker instead.
    pub fn take(&self, dead: &mut Vec<Conn>) -> Option<Conn> {
        let idle = self.idle.lock().expect("pool lock");
        self.take_from(idle, dead)
    }

    /// `take` for the dispatcher: None at once, as if the pool were empty, when another thread
    /// holds the pool. The dispatcher runs real-time and the I/O workers do not: a worker
    /// preempted while it holds the lock (putting back a connection, beside a busy local server)
    /// would hold up every due send behind it, and the request's task gets a connection instead.
    pub fn try_take(&self, dead: &mut Vec<Conn>) -> Option<Conn> {
        let idle = self.idle.try_lock().ok()?;
        self.take_from(idle, dead)
    }

    fn take_from(
        &self,
        mut idle: std::sync::MutexGuard<'_, VecDeque<(Conn, Instant)>>,
        dead: &mut Vec<Conn>,
    ) -> Option<Conn> {
        let now = Instant::now();
        self.expire(&mut idle, now);
        while let Some((mut conn, _)) = idle.pop_back() {
            if conn.looks_alive() {
                return Some(conn);
            }
            dead.push(conn);
        }
        None
    }

    /// Take out the idle connections that have been idle for `age` or more, or that the server
    /// closed: the warm-keeper (`warmup::keep_warm`) replaces them before the pool's idle timeout
    /// would drop them on a request's path.
    pub fn take_stale(&self, age: Duration) -> Vec<Conn> {
        let now = Instant::now();
        let mut idle = self.idle.lock().expect("pool lock");
        let mut stale = Vec::new();
        let mut kept = VecDeque::with_capacity(idle.len());
        for (mut conn, since) in idle.drain(..) {
            if now.duration_since(since) >= age || !conn.looks_alive() {
                stale.push(conn);
            } else {
                kept.push_back((conn, since));
            }
        }
        *idle = kept;
        stale
    }

    /// Idle connections held now.
    pub fn idle_len(&self) -> usize {
        self.idle.lock().expect("pool lock").len()
    }

    /// Keep `conn` for reuse (dropped when the pool is full).
    pub fn put(&self, conn: Conn) {
        let now = Instant::now();
        let mut idle = self.idle.lock().expect("pool lock");
        self.expire(&mut idle, now);
        if idle.len() < self.max_idle {
            idle.push_back((conn, now));
        }
    }
}
