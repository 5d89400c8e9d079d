//! Client-side routing over a fleet of replicas: which replica each request goes to.
//!
//! The one definition of the routing policies, used by the runner (each request gets its
//! replica when it is sent, so `in_flight` is what is open at that instant) and by the embedded
//! engine's own router. The rules:
//!
//! * `round-robin`: replicas in turn, 0, 1, ..., N-1, 0, ...
//! * `session`: a session sticks to the replica its first request got; that first request goes
//!   to the least loaded replica (fewest in flight), ties to the one holding the fewest
//!   sessions, then the lowest index. Subagents go with their root session (the caller passes
//!   the root's hash). A request without a session is routed least-loaded.
//! * `prefix`: the replica whose recently routed requests share the longest block-hash prefix
//!   with this request (each replica remembers a bounded number of blocks, least recently used
//!   forgotten first); ties, and no replica sharing even the first block, go least-loaded among
//!   them. The request's blocks are then remembered for the replica it got.
//! * `least-loaded`: the replica with the fewest requests in flight, ties by round robin (the
//!   first tied replica at or after the one after the last pick).
//!
//! A fleet of one replica always gets 0, at no cost.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::prefix_cache::Lru;

/// How many blocks each replica's memory holds under `prefix` unless told otherwise
/// (`Router::with_memory`): 65,536 blocks (16 tokens each: a million tokens of KV cache).
pub const DEFAULT_BLOCKS_PER_REPLICA: usize = 1 << 16;

/// A routing policy (see the module's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    RoundRobin,
    Session,
    Prefix,
    LeastLoaded,
}

impl Policy {
    /// Every policy, in the order the docs list them.
    pub const ALL: [Policy; 4] = [
        Policy::RoundRobin,
        Policy::Session,
        Policy::Prefix,
        Policy::LeastLoaded,
    ];

    /// Its name, as `FromStr` reads it.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::Session => "session",
            Policy::Prefix => "prefix",
            Policy::LeastLoaded => "least-loaded",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown routing policy {s:?} (round-robin, session, prefix, least-loaded)")
            })
    }
}

/// Picks a replica for each request under one policy; keeps the policy's memory (the round
/// robin's turn, the sessions' replicas, each replica's recent blocks).
pub struct Router {
    policy: Policy,
    replicas: usize,
    /// The next replica in turn (round robin, and least-loaded's ties).
    turn: usize,
    /// session -> its replica (`session`).
    sessions: HashMap<u64, u32>,
    /// Sessions held per replica (`session`'s ties).
    held: Vec<u32>,
    /// Each replica's recently routed blocks (`prefix`).
    memory: Vec<Lru>,
    /// A counter standing for time in the memories (only the order matters).
    routed: u64,
    /// Scratch: how many leading blocks each replica shares with the request (`prefix`).
    shares: Vec<usize>,
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("policy", &self.policy)
            .field("replicas", &self.replicas)
            .field("sessions", &self.sessions.len())
            .finish()
    }
}

impl Router {
    /// A router over `replicas` replicas (at least 1), with `DEFAULT_BLOCKS_PER_REPLICA`.
    pub fn new(policy: Policy, replicas: usize) -> Router {
        Router::with_memory(policy, replicas, DEFAULT_BLOCKS_PER_REPLICA)
    }

    /// A router whose `prefix` memory holds `blocks_per_replica` blocks per replica (0:
    /// unbounded).
    pub fn with_memory(policy: Policy, replicas: usize, blocks_per_replica: usize) -> Router {
        let replicas = replicas.max(1);
        let prefix = policy == Policy::Prefix && replicas > 1;
        Router {
            policy,
            replicas,
            turn: 0,
            sessions: HashMap::new(),
            held: vec![
                0;
                if policy == Policy::Session {
                    replicas
                } else {
                    0
                }
            ],
            memory: (0..if prefix { replicas } else { 0 })
                .map(|_| Lru::new(blocks_per_replica))
                .collect(),
            routed: 0,
            shares: vec![0; if prefix { replicas } else { 0 }],
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The replica for the next request.
    ///
    /// `session`: a hash of the request's ROOT session (subagents go with their root), None when
    /// the request has none; `blocks`: the request's prompt block hashes in order (`prefix`);
    /// `in_flight`: requests open per replica now (one entry per replica).
    pub fn pick(&mut self, session: Option<u64>, blocks: &[u64], in_flight: &[u32]) -> usize {
        if self.replicas == 1 {
            return 0;
        }
        debug_assert_eq!(in_flight.len(), self.replicas);
        match self.policy {
            Policy::RoundRobin => {
                let r = self.turn;
                self.turn = (r + 1) % self.replicas;
                r
            }
            Policy::LeastLoaded => least_loaded(&mut self.turn, in_flight, |_| true),
            Policy::Session => match session {
                None => least_loaded(&mut self.turn, in_flight, |_| true),
                Some(s) => {
                    if let Some(&r) = self.sessions.get(&s) {
                        return r as usize;
                    }
                    let r = (0..self.replicas)
                        .min_by_key(|&r| (load(in_flight, r), self.held[r], r))
                        .unwrap_or(0);
                    self.sessions.insert(s, r as u32);
                    self.held[r] += 1;
                    r
                }
            },
            Policy::Prefix => {
                let mut best = 0usize;
                for (r, memory) in self.memory.iter().enumerate() {
                    let n = blocks
                        .iter()
                        .take_while(|&&b| memory.touched(b).is_some())
                        .count();
                    self.shares[r] = n;
                    best = best.max(n);
                }
                let shares = &self.shares;
                let r = least_loaded(&mut self.turn, in_flight, |r| shares[r] == best);
                self.routed += 1;
                let now = self.routed as f64;
                let memory = &mut self.memory[r];
                for &b in blocks {
                    memory.touch(b, now);
                }
                r
            }
        }
    }
}

/// The replica with the fewest in flight among those `eligible` (at least one is), ties by
/// round robin: the first tied one at or after `turn`, which then moves past it.
fn least_loaded(turn: &mut usize, in_flight: &[u32], eligible: impl Fn(usize) -> bool) -> usize {
    let n = in_flight.len().max(1);
    let mut pick = *turn % n;
    let mut fewest = u32::MAX;
    for k in 0..n {
        let r = (*turn + k) % n;
        if eligible(r) && load(in_flight, r) < fewest {
            fewest = load(in_flight, r);
            pick = r;
        }
    }
    *turn = (pick + 1) % n;
    pick
}

fn load(in_flight: &[u32], r: usize) -> u32 {
    in_flight.get(r).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        for p in Policy::ALL {
            assert_eq!(p.to_string().parse::<Policy>().unwrap(), p);
        }
        let e = "random".parse::<Policy>().unwrap_err();
        assert!(e.contains("random") && e.contains("least-loaded"), "{e}");
    }

    #[test]
    fn round_robin_cycles() {
        let mut r = Router::new(Policy::RoundRobin, 3);
        let picks: Vec<_> = (0..7).map(|_| r.pick(None, &[], &[9, 0, 0])).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn one_replica_is_always_zero() {
        for p in Policy::ALL {
            let mut r = Router::new(p, 1);
            assert_eq!(r.pick(Some(1), &[1, 2], &[5]), 0);
        }
    }

    #[test]
    fn session_sticks_to_its_first_replica() {
        let mut r = Router::new(Policy::Session, 3);
        // first requests: least loaded; all idle -> fewest sessions held, then lowest index
        assert_eq!(r.pick(Some(10), &[], &[0, 0, 0]), 0);
        assert_eq!(r.pick(Some(11), &[], &[0, 0, 0]), 1);
        assert_eq!(r.pick(Some(12), &[], &[1, 1, 0]), 2);
        // least loaded beats fewer sessions
        assert_eq!(r.pick(Some(13), &[], &[3, 0, 2]), 1);
        // later requests stay, whatever the load
        for _ in 0..5 {
            assert_eq!(r.pick(Some(10), &[], &[50, 0, 0]), 0);
            assert_eq!(r.pick(Some(13), &[], &[0, 50, 0]), 1);
        }
        // no session: least loaded
        assert_eq!(r.pick(None, &[], &[4, 4, 1]), 2);
    }

    #[test]
    fn prefix_follows_the_longest_shared_prefix() {
        let mut r = Router::new(Policy::Prefix, 3);
        let idle = [0, 0, 0];
        // no memory yet: least loaded, ties by round robin
        assert_eq!(r.pick(None, &[1, 2, 3], &idle), 0);
        assert_eq!(r.pick(None, &[7, 8], &idle), 1);
        assert_eq!(r.pick(None, &[20], &idle), 2);
        // shares [1, 2] with replica 0, even though replica 0 is the busiest
        assert_eq!(r.pick(None, &[1, 2, 9], &[5, 0, 0]), 0);
        assert_eq!(r.pick(None, &[7, 8, 9, 10], &[0, 5, 0]), 1);
        // a shared later block without the first is no prefix: least loaded
        assert_eq!(r.pick(None, &[99, 2, 3], &[2, 1, 3]), 1);
        // only replica 1 holds block 7, busy as it is
        assert_eq!(r.pick(None, &[7], &[0, 9, 0]), 1);
    }

    #[test]
    fn prefix_ties_go_least_loaded() {
        let mut r = Router::new(Policy::Prefix, 3);
        assert_eq!(r.pick(None, &[1, 2], &[0, 0, 0]), 0);
        assert_eq!(r.pick(None, &[1, 3], &[1, 0, 0]), 0); // shares [1] with 0 only
                                                          // force [1] onto replica 2 as well: it shares with 0 and 2 equally
        let mut r2 = Router::new(Policy::Prefix, 3);
        r2.pick(None, &[1], &[0, 0, 0]); // -> 0
        r2.pick(None, &[5], &[0, 0, 0]); // -> 1
        r2.pick(None, &[6], &[0, 0, 0]); // -> 2
        assert_eq!(r2.pick(None, &[1], &[0, 0, 0]), 0);
        // replica 2 remembers block 1 too
        r2.memory[2].touch(1, 100.0);
        assert_eq!(r2.pick(None, &[1, 4], &[3, 0, 1]), 2); // 0 and 2 tie on 1 block; 2 less loaded
        assert_eq!(r2.pick(None, &[1, 4], &[0, 0, 9]), 2); // now 2 shares 2 blocks: longest wins
    }

    #[test]
    fn prefix_memory_is_bounded_lru() {
        let mut r = Router::with_memory(Policy::Prefix, 2, 2);
        assert_eq!(r.pick(None, &[1, 2], &[0, 0]), 0);
        assert_eq!(r.pick(None, &[3, 4], &[0, 0]), 1);
        assert_eq!(r.pick(None, &[1, 5], &[9, 0]), 0); // 0 holds [1, 5] now; 2 forgotten
        assert_eq!(r.pick(None, &[1, 2, 6], &[0, 0]), 0); // still shares [1]
        let mut r = Router::with_memory(Policy::Prefix, 2, 2);
        r.pick(None, &[1, 2], &[0, 0]); // -> 0
        r.pick(None, &[8], &[0, 0]); // -> 1
        r.pick(None, &[3, 4], &[0, 1]); // -> 0, forgets 1 and 2
        assert_eq!(r.pick(None, &[1, 2], &[1, 0]), 1); // no memory of [1]: least loaded
    }

    #[test]
    fn least_loaded_takes_the_fewest_ties_in_turn() {
        let mut r = Router::new(Policy::LeastLoaded, 3);
        assert_eq!(r.pick(None, &[], &[2, 1, 3]), 1);
        assert_eq!(r.pick(None, &[], &[0, 0, 0]), 2); // turn is past 1
        assert_eq!(r.pick(None, &[], &[0, 0, 0]), 0);
        assert_eq!(r.pick(None, &[], &[0, 0, 0]), 1);
        assert_eq!(r.pick(None, &[], &[1, 0, 1]), 1);
        // one busy replica gets nothing while the others are idle
        let mut r = Router::new(Policy::LeastLoaded, 3);
        let picks: Vec<_> = (0..6).map(|_| r.pick(None, &[], &[4, 0, 0])).collect();
        assert!(picks.iter().all(|&p| p != 0), "{picks:?}");
    }

    #[test]
    fn many_replicas_prefix_ties() {
        // many replicas: the one sharing the prefix, busy as it is
        let mut r = Router::new(Policy::Prefix, 70);
        let idle = vec![0u32; 70];
        let first = r.pick(None, &[1, 2], &idle);
        let mut load = vec![1u32; 70];
        load[first] = 50;
        assert_eq!(r.pick(None, &[1, 2, 3], &load), first);
    }
}
