//! The Trace's chained block hashes (`block_hashes`, `HASH_ALGO` "blake2b64-chain" in
//! `replay.blocks`, whose functions call these).
//!
//! Owns `chain_hash` and `block_hashes`. Hash `i` is BLAKE2b with an 8-byte digest (the digest
//! length set in its parameter block, as Python's `hashlib.blake2b(digest_size=8)` does, not a
//! longer digest cut short) of hash `i-1`'s 8 digest bytes followed by block `i`'s token ids as
//! little-endian u32; the first block's parent is 8 zero bytes. The digest is read as a
//! little-endian u64. A partial last block gets no hash.

use blake2::digest::{Update, VariableOutput};
use blake2::Blake2bVar;

/// The hash of one block (full or not) given its parent's hash (`None`: the first block).
pub fn chain_hash(parent: Option<u64>, block: &[u32]) -> u64 {
    let mut h = Blake2bVar::new(8).expect("8 is a valid BLAKE2b digest length");
    h.update(&parent.unwrap_or(0).to_le_bytes());
    let mut bytes = [0u8; 4 * 64];
    for group in block.chunks(64) {
        for (slot, id) in bytes.chunks_exact_mut(4).zip(group) {
            slot.copy_from_slice(&id.to_le_bytes());
        }
        h.update(&bytes[..4 * group.len()]);
    }
    let mut out = [0u8; 8];
    h.finalize_variable(&mut out)
        .expect("the buffer is the digest's length");
    u64::from_le_bytes(out)
}

/// One hash per full block of `block_size` ids of `ids`, each chained on the one before.
/// `block_size` must be positive.
pub fn block_hashes(ids: &[u32], block_size: usize) -> Vec<u64> {
    assert!(block_size > 0, "block_size must be positive");
    let mut parent = None;
    ids.chunks_exact(block_size)
        .map(|block| {
            let h = chain_hash(parent, block);
            parent = Some(h);
            h
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // the values Python's hashlib gives (replay.blocks before this module existed):
        // blake2b(bytes(8) + b"\x01\0\0\0\x02\0\0\0", digest_size=8), read little-endian
        assert_eq!(chain_hash(None, &[1, 2]), 0xff35_7d85_2574_b4a8);
        // a block longer than the staging buffer: blake2b(bytes(8) + ids 0..150 as <u4)
        let long: Vec<u32> = (0..150).collect();
        assert_eq!(chain_hash(None, &long), 0x659e_351f_1e2a_f444);
    }

    #[test]
    fn a_partial_block_gets_no_hash_and_hashes_chain() {
        let ids: Vec<u32> = (0..10).collect();
        let h = block_hashes(&ids, 4);
        assert_eq!(h.len(), 2);
        assert_eq!(h[0], chain_hash(None, &ids[..4]));
        assert_eq!(h[1], chain_hash(Some(h[0]), &ids[4..8]));
        // a different first block changes every later hash
        let mut other = ids.clone();
        other[0] = 99;
        let g = block_hashes(&other, 4);
        assert!(g[0] != h[0] && g[1] != h[1]);
    }
}
