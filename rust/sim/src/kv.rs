//! The KV cache: a fixed pool of blocks, chained block hashes and the prefix cache.
//!
//! Owns `BlockPool`, `hash_block` and `block_hashes`. Like vLLM's prefix cache, each FULL block
//! of `block_size` token ids is hashed together with its parent block's hash, so two sequences
//! share a hash exactly while they share every token up to that block's end; partial blocks are
//! never cached. A block that is referenced by no sequence but still holds a cached hash stays
//! in the free list and can be hit again until it is reused; the free list is an LRU: blocks are
//! taken from its head, freed cached blocks go to its tail (a sequence's blocks in reverse order,
//! so its first blocks, the ones most likely shared, are evicted last) and uncached ones to its
//! head. Taking a cached block from the free list for a new allocation evicts its hash.

use std::collections::HashMap;

const NIL: u32 = u32::MAX;

/// Hash of one full block given its parent's hash (the first block's parent is 0).
pub fn hash_block(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = parent ^ 0x9E37_79B9_7F4A_7C15;
    for &t in tokens {
        h = mix(h ^ t as u64);
    }
    mix(h ^ tokens.len() as u64)
}

/// splitmix64's finalizer: a cheap, well-mixed 64-bit permutation.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Chained hashes of the full blocks of `tokens` (one per full block).
pub fn block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let mut out = Vec::with_capacity(tokens.len() / block_size as usize);
    let mut parent = 0;
    for block in tokens.chunks_exact(block_size as usize) {
        parent = hash_block(parent, block);
        out.push(parent);
    }
    out
}

/// A fixed pool of KV blocks with reference counts and an LRU prefix cache.
#[derive(Debug)]
pub struct BlockPool {
    block_size: u32,
    caching: bool,
    refs: Vec<u32>,
    hash: Vec<Option<u64>>,
    cached: HashMap<u64, u32>,
    // the free list (blocks with refs == 0), doubly linked; head is reused first
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    num_free: usize,
}

impl BlockPool {
    /// `num_blocks` blocks of `block_size` tokens; `caching` turns the prefix cache on.
    pub fn new(num_blocks: u32, block_size: u32, caching: bool) -> BlockPool {
        let n = num_blocks as usize;
        let mut pool = BlockPool {
            block_size,
            caching,
            refs: vec![0; n],
            hash: vec![None; n],
            cached: HashMap::new(),
            prev: vec![NIL; n],
            next: vec![NIL; n],
            head: NIL,
            tail: NIL,
            num_free: 0,
        };
        for b in 0..num_blocks {
            pool.push_tail(b);
        }
        pool
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn caching(&self) -> bool {
        self.caching
    }

    pub fn num_blocks(&self) -> usize {
        self.refs.len()
    }

    /// Blocks not referenced by any sequence (cached ones included).
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// Forget the cached hashes of every block no sequence references (vLLM's
    /// `reset_prefix_cache`; blocks in use keep theirs); returns how many were forgotten.
    pub fn reset_cache(&mut self) -> usize {
        let mut n = 0;
        for b in 0..self.refs.len() {
            if self.refs[b] == 0 {
                if let Some(h) = self.hash[b].take() {
                    self.cached.remove(&h);
                    n += 1;
                }
            }
        }
        n
    }

    /// Blocks holding a cached hash (referenced or not).
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }

    /// Share of blocks referenced by some sequence (vLLM's `kv_cache_usage_perc`).
    pub fn usage(&self) -> f64 {
        if self.refs.is_empty() {
            return 0.0;
        }
        1.0 - self.num_free as f64 / self.refs.len() as f64
    }

    /// The cached blocks for the leading `hashes` (stops at the first miss), at most `max_blocks`.
    pub fn lookup(&self, hashes: &[u64], max_blocks: usize) -> Vec<u32> {
        if !self.caching {
            return Vec::new();
        }
        hashes
            .iter()
            .take(max_blocks)
            .map_while(|h| self.cached.get(h).copied())
            .collect()
    }

    /// Whether `hits` can be taken and `n_new` more blocks allocated.
    pub fn can_allocate(&self, hits: &[u32], n_new: usize) -> bool {
        let hits_in_free = hits.iter().filter(|&&b| self.refs[b as usize] == 0).count();
        self.num_free - hits_in_free >= n_new
    }

    /// Take a reference on each block (removing free ones from the free list).
    pub fn touch(&mut self, blocks: &[u32]) {
        for &b in blocks {
            if self.refs[b as usize] == 0 {
                self.unlink(b);
            }
            self.refs[b as usize] += 1;
        }
    }

    /// `n` fresh blocks from the head of the free list (evicting their cached hashes), or None
    /// (and nothing taken) if fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<u32>> {
        if n > self.num_free {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.head;
            self.unlink(b);
            if let Some(h) = self.hash[b as usize].take() {
                if self.cached.get(&h) == Some(&b) {
                    self.cached.remove(&h);
                }
            }
            self.refs[b as usize] = 1;
            out.push(b);
        }
        Some(out)
    }

    /// Drop one reference on each block; blocks nobody holds return to the free list (cached
    /// ones to the tail, in reverse order, uncached ones to the head).
    pub fn free(&mut self, blocks: &[u32]) {
        for &b in blocks.iter().rev() {
            let r = &mut self.refs[b as usize];
            debug_assert!(*r > 0, "double free of block {b}");
            *r -= 1;
            if *r == 0 {
                if self.hash[b as usize].is_some() {
                    self.push_tail(b);
                } else {
                    self.push_head(b);
                }
            }
        }
    }

    /// Record that `block` holds the full block with chained hash `hash` (no-op without
    /// caching, or when another block already holds that hash).
    pub fn register(&mut self, block: u32, hash: u64) {
        if !self.caching || self.hash[block as usize].is_some() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(hash) {
            e.insert(block);
            self.hash[block as usize] = Some(hash);
        }
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[b as usize] = NIL;
        self.next[b as usize] = NIL;
        self.num_free -= 1;
    }

    fn push_tail(&mut self, b: u32) {
        self.prev[b as usize] = self.tail;
        self.next[b as usize] = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.next[self.tail as usize] = b;
        }
        self.tail = b;
        self.num_free += 1;
    }

    fn push_head(&mut self, b: u32) {
        self.next[b as usize] = self.head;
        self.prev[b as usize] = NIL;
        if self.head == NIL {
            self.tail = b;
        } else {
            self.prev[self.head as usize] = b;
        }
        self.head = b;
        self.num_free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_forgets_the_free_blocks_hashes_and_keeps_those_in_use() {
        let mut pool = BlockPool::new(4, 16, true);
        let a = pool.allocate(2).expect("two blocks");
        pool.register(a[0], 10);
        pool.register(a[1], 11);
        pool.free(&[a[1]]);
        assert_eq!(pool.reset_cache(), 1);
        assert_eq!(pool.lookup(&[10, 11], 2), vec![a[0]]); // in use: still cached
        assert_eq!(pool.num_cached(), 1);
    }

    #[test]
    fn chained_hashes_share_exactly_the_shared_full_blocks() {
        let a: Vec<u32> = (0..40).collect();
        let mut b = a.clone();
        b[20] = 999; // differs inside block 1 (tokens 16..32)
        let (ha, hb) = (block_hashes(&a, 16), block_hashes(&b, 16));
        assert_eq!((ha.len(), hb.len()), (2, 2)); // the partial third block has no hash
        assert_eq!(ha[0], hb[0]);
        assert_ne!(ha[1], hb[1]);
        // same block content under a different parent: different hash
        assert_ne!(hash_block(1, &a[..16]), hash_block(2, &a[..16]));
    }

    #[test]
    fn lookup_hits_leading_blocks_and_stops_at_first_miss() {
        let mut pool = BlockPool::new(8, 4, true);
        let hashes = block_hashes(&(0..12).collect::<Vec<u32>>(), 4);
        let blocks = pool.allocate(3).unwrap();
        for (b, h) in blocks.iter().zip(&hashes) {
            pool.register(*b, *h);
        }
        assert_eq!(pool.lookup(&hashes, 10), blocks);
        assert_eq!(pool.lookup(&hashes, 2), blocks[..2].to_vec());
        assert_eq!(pool.lookup(&[hashes[0], 7, hashes[2]], 10), vec![blocks[0]]);
        pool.free(&blocks);
        // freed cached blocks can still be hit, and touching them takes them off the free list
        assert_eq!(pool.num_free(), 8);
        let hits = pool.lookup(&hashes, 10);
        assert!(pool.can_allocate(&hits, 5));
        assert!(!pool.can_allocate(&hits, 6));
        pool.touch(&hits);
        assert_eq!(pool.num_free(), 5);
        let disabled = BlockPool::new(8, 4, false);
        assert!(disabled.lookup(&hashes, 10).is_empty());
    }

    #[test]
    fn lru_evicts_least_recently_freed_and_uncached_blocks_first() {
        let mut pool = BlockPool::new(4, 2, true);
        let a = pool.allocate(2).unwrap();
        let b = pool.allocate(2).unwrap();
        pool.register(a[0], 10);
        pool.register(a[1], 11);
        pool.register(b[0], 20);
        pool.free(&a); // freed first: least recently used
        pool.free(&b); // b[1] is uncached: goes to the head, reused first
        assert_eq!(pool.usage(), 0.0);
        let c = pool.allocate(1).unwrap();
        assert_eq!(c, vec![b[1]]);
        assert_eq!(pool.num_cached(), 3);
        // next come a's blocks, in the order that keeps a's first block longest: a[1], then a[0]
        assert_eq!(pool.allocate(1).unwrap(), vec![a[1]]);
        assert!(pool.lookup(&[10, 11], 2) == vec![a[0]]);
        assert_eq!(pool.allocate(1).unwrap(), vec![a[0]]);
        assert!(pool.lookup(&[10], 1).is_empty());
        assert_eq!(pool.lookup(&[20], 1), vec![b[0]]);
        assert!(pool.allocate(2).is_none());
        assert_eq!(pool.usage(), 0.75);
    }

    #[test]
    fn shared_blocks_are_refcounted() {
        let mut pool = BlockPool::new(2, 2, true);
        let a = pool.allocate(1).unwrap();
        pool.register(a[0], 5);
        pool.touch(&a); // a second sequence shares it
        pool.free(&a);
        assert_eq!(pool.num_free(), 1);
        pool.free(&a);
        assert_eq!(pool.num_free(), 2);
        // a duplicate hash on another block is not registered twice
        let b = pool.allocate(2).unwrap();
        pool.register(b[0], 6);
        pool.register(b[1], 6);
        assert_eq!(pool.num_cached(), 1);
    }
}
