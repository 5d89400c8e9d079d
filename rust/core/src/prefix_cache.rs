//! An offline prefix-cache simulation over the Trace's chained block hashes.
//!
//! Requests arrive in order; each is a list of chained block hashes (so a block's hash stands for
//! the whole prefix up to it). A request hits the leading blocks the cache holds when it arrives,
//! up to its first miss (a prefix cache serves a prefix, not scattered blocks); then every one of
//! its blocks is touched: refreshed if held, inserted if not, evicting the least recently used
//! block when the cache is full. Capacity 0 means unbounded. Blocks are never pinned by requests
//! in flight: this is the cache's reuse as the workload offers it, not an engine's admission.
//! With arrival times, each request that hits also gets its reuse time: the time since its
//! deepest cached block (its longest cached prefix) was last touched.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Block hashes are already well mixed (blake2b), but synthetic ones may not be: one multiply
/// spreads them, far cheaper than SipHash over tens of millions of look-ups.
#[derive(Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        let x = (v ^ (v >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

type Map = HashMap<u64, u32, BuildHasherDefault<MixHasher>>;

const NIL: u32 = u32::MAX;

struct Node {
    hash: u64,
    prev: u32,
    next: u32,
    touched: f64,
}

/// A fixed-capacity LRU set of block hashes: a doubly linked list in a Vec (head = most recent).
/// Also the router's memory of what each replica was sent (`route`).
pub(crate) struct Lru {
    nodes: Vec<Node>,
    index: Map,
    head: u32,
    tail: u32,
    capacity: usize,
}

impl Lru {
    pub(crate) fn new(capacity: usize) -> Self {
        Lru {
            nodes: Vec::new(),
            index: Map::default(),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    /// When the block was last touched, if held.
    pub(crate) fn touched(&self, hash: u64) -> Option<f64> {
        self.index
            .get(&hash)
            .map(|&i| self.nodes[i as usize].touched)
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// Make `hash` the most recent block (touched at `now`), inserting it (and evicting the least
    /// recent when full) if it is not held.
    pub(crate) fn touch(&mut self, hash: u64, now: f64) {
        if let Some(&i) = self.index.get(&hash) {
            self.nodes[i as usize].touched = now;
            if self.head != i {
                self.unlink(i);
                self.push_front(i);
            }
            return;
        }
        let i = if self.capacity > 0 && self.index.len() >= self.capacity {
            let victim = self.tail;
            self.unlink(victim);
            let old = std::mem::replace(&mut self.nodes[victim as usize].hash, hash);
            self.nodes[victim as usize].touched = now;
            self.index.remove(&old);
            victim
        } else {
            self.nodes.push(Node {
                hash,
                prev: NIL,
                next: NIL,
                touched: now,
            });
            (self.nodes.len() - 1) as u32
        };
        self.index.insert(hash, i);
        self.push_front(i);
    }
}

/// For each request `i` (its hashes are `hashes[offsets[i]..offsets[i+1]]`, so `offsets` has one
/// entry more than there are requests), how many of its leading blocks a prefix cache of
/// `capacity` blocks (0 = unbounded) held when it arrived. Panics if `offsets` is not
/// nondecreasing within `hashes`.
pub fn prefix_cache_hits(hashes: &[u64], offsets: &[u64], capacity: usize) -> Vec<u32> {
    simulate(hashes, offsets, capacity, None).0
}

/// `prefix_cache_hits`, and with `times` (one per request, nondecreasing) each request's reuse
/// time: `times[i]` minus when its deepest cached block was last touched (NaN without a hit).
pub fn simulate(
    hashes: &[u64],
    offsets: &[u64],
    capacity: usize,
    times: Option<&[f64]>,
) -> (Vec<u32>, Vec<f64>) {
    let n = offsets.len().saturating_sub(1);
    let mut cache = Lru::new(capacity);
    let mut hits = Vec::with_capacity(n);
    let mut reuse = Vec::with_capacity(if times.is_some() { n } else { 0 });
    for (i, w) in offsets.windows(2).enumerate() {
        let blocks = &hashes[w[0] as usize..w[1] as usize];
        let mut last = None;
        let mut hit = 0;
        for &h in blocks {
            match cache.touched(h) {
                Some(t) => {
                    last = Some(t);
                    hit += 1;
                }
                None => break,
            }
        }
        hits.push(hit as u32);
        let now = times.map_or(0.0, |t| t[i]);
        if times.is_some() {
            reuse.push(last.map_or(f64::NAN, |t| now - t));
        }
        for &h in blocks {
            cache.touch(h, now);
        }
    }
    (hits, reuse)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(requests: &[&[u64]], capacity: usize) -> Vec<u32> {
        let mut hashes = Vec::new();
        let mut offsets = vec![0u64];
        for r in requests {
            hashes.extend_from_slice(r);
            offsets.push(hashes.len() as u64);
        }
        prefix_cache_hits(&hashes, &offsets, capacity)
    }

    #[test]
    fn unbounded_hits_the_leading_run_seen_before() {
        let reqs: [&[u64]; 4] = [&[1, 2, 3], &[1, 2, 4], &[5, 2, 3], &[1, 2, 4, 6]];
        // the third shares blocks 2 and 3 but not its first: no prefix hit
        assert_eq!(run(&reqs, 0), vec![0, 2, 0, 3]);
    }

    #[test]
    fn lru_evicts_the_least_recently_used_block() {
        // capacity 3: after [1,2,3] then [4], block 1 (least recent) is gone
        let reqs: [&[u64]; 3] = [&[1, 2, 3], &[4], &[1, 2]];
        assert_eq!(run(&reqs, 3), vec![0, 0, 0]);
        assert_eq!(run(&reqs, 4), vec![0, 0, 2]);
        // a touch refreshes: [1] again before [4] makes block 2 the victim instead
        let reqs: [&[u64]; 4] = [&[1, 2, 3], &[1], &[4], &[1, 2]];
        assert_eq!(run(&reqs, 3), vec![0, 1, 0, 1]);
    }

    #[test]
    fn reuse_time_is_since_the_deepest_cached_block_was_last_touched() {
        let hashes = [1, 2, 1, 9, 1, 2, 3];
        let offsets = [0, 2, 4, 7];
        let (hits, reuse) = simulate(&hashes, &offsets, 0, Some(&[0.0, 1.5, 4.0]));
        assert_eq!(hits, vec![0, 1, 2]);
        assert!(reuse[0].is_nan());
        assert_eq!(reuse[1], 1.5); // block 1, touched at 0
        assert_eq!(reuse[2], 4.0); // block 2 (deepest hit), touched at 0 only
    }

    #[test]
    fn hits_never_exceed_blocks_and_grow_with_capacity() {
        let mut hashes = Vec::new();
        let mut offsets = vec![0u64];
        let mut x: u64 = 7;
        for _ in 0..500 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let prefix = (x >> 60) % 5; // one of 5 shared prefixes
            let len = 1 + (x >> 33) % 6;
            for b in 0..len {
                hashes.push(if b < 2 { prefix * 100 + b } else { x ^ b });
            }
            offsets.push(hashes.len() as u64);
        }
        let mut last = vec![0u32; 500];
        for cap in [1, 4, 16, 64, 0] {
            let hits = prefix_cache_hits(&hashes, &offsets, cap);
            for (i, (&h, w)) in hits.iter().zip(offsets.windows(2)).enumerate() {
                assert!(h as u64 <= w[1] - w[0]);
                assert!(
                    h >= last[i],
                    "capacity {cap}: request {i} hit less than with less room"
                );
            }
            last = hits;
        }
    }
}
