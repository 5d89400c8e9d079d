//! Synthesized prompt text, bit for bit what `replay.prompts` draws with numpy, fast enough to
//! build the prompts of a token-only trace as the replay sends them.
//!
//! A prompt is a sequence of units (one-token words, and a period index) drawn by numpy's
//! `default_rng(SeedSequence(entropy))`: `integers(0, n_words, n, dtype=int32)`, then `random(n)`,
//! a unit becoming the period where its draw is under 1/12, except at the start of a text and
//! right after a period (judged on the draws, not on periods already removed). This module
//! reproduces numpy's `SeedSequence` (its entropy pool and `generate_state`), `PCG64` (128-bit LCG,
//! XSL-RR output, 32-bit draws taken low half first), Lemire's bounded integers as numpy draws them
//! and `random`'s 53-bit doubles, so the texts equal those `replay.prompts` makes (the Python tests
//! compare them on many seeds) and a trace's stored block hashes stay true.

/// The chance that a unit (not a text's first, not after a period) is a period.
pub const PERIOD_P: f64 = 1.0 / 12.0;

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL: usize = 4;

/// numpy's `SeedSequence(entropy)` for a list of non-negative integers below 2^64: its pool.
fn seed_pool(entropy: &[u64]) -> [u32; POOL] {
    // each integer as its little-endian 32-bit words (0 as one word), laid end to end
    let mut words: Vec<u32> = Vec::with_capacity(entropy.len() * 2);
    for &e in entropy {
        words.push(e as u32);
        if e >> 32 != 0 {
            words.push((e >> 32) as u32);
        }
    }
    let mut hash_const = INIT_A;
    let mut hashmix = |value: u32| -> u32 {
        let mut v = value ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_A);
        v = v.wrapping_mul(hash_const);
        v ^ (v >> XSHIFT)
    };
    let mix = |x: u32, y: u32| -> u32 {
        let r = MIX_MULT_L
            .wrapping_mul(x)
            .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
        r ^ (r >> XSHIFT)
    };
    let mut pool = [0u32; POOL];
    for (i, slot) in pool.iter_mut().enumerate() {
        *slot = hashmix(words.get(i).copied().unwrap_or(0));
    }
    for src in 0..POOL {
        for dst in 0..POOL {
            if src != dst {
                let h = hashmix(pool[src]);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    for &w in words.iter().skip(POOL) {
        for slot in pool.iter_mut() {
            let h = hashmix(w);
            *slot = mix(*slot, h);
        }
    }
    pool
}

/// `SeedSequence(entropy).generate_state(4, uint64)`.
fn seed_state(entropy: &[u64]) -> [u64; 4] {
    let pool = seed_pool(entropy);
    let mut hash_const = INIT_B;
    let mut words = [0u32; 8];
    for (i, w) in words.iter_mut().enumerate() {
        let mut v = pool[i % POOL] ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_B);
        v = v.wrapping_mul(hash_const);
        *w = v ^ (v >> XSHIFT);
    }
    let mut out = [0u64; 4];
    for (i, o) in out.iter_mut().enumerate() {
        *o = words[2 * i] as u64 | (words[2 * i + 1] as u64) << 32;
    }
    out
}

const PCG_MULT: u128 = (2_549_297_995_355_413_924u128 << 64) + 4_865_540_595_714_422_341u128;

/// numpy's `PCG64` bit generator.
#[derive(Debug, Clone)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    /// the high half of the last 64-bit draw, not yet handed out as a 32-bit one
    spare: Option<u32>,
}

impl Pcg64 {
    /// `PCG64(SeedSequence(entropy))`.
    pub fn from_entropy(entropy: &[u64]) -> Pcg64 {
        let s = seed_state(entropy);
        let initstate = (s[0] as u128) << 64 | s[1] as u128;
        let initseq = (s[2] as u128) << 64 | s[3] as u128;
        let mut rng = Pcg64 {
            state: 0,
            inc: (initseq << 1) | 1,
            spare: None,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let rot = (self.state >> 122) as u32;
        (((self.state >> 64) as u64) ^ (self.state as u64)).rotate_right(rot)
    }

    pub fn next_u32(&mut self) -> u32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let next = self.next_u64();
        self.spare = Some((next >> 32) as u32);
        next as u32
    }

    /// `random()`: a double in [0, 1) from the top 53 bits of a 64-bit draw.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `integers(0, n)` for 0 < n < 2^32, as numpy draws it (Lemire's method on 32-bit draws).
    pub fn below(&mut self, n: u32) -> u32 {
        let rng = n - 1;
        if rng == 0 {
            return 0;
        }
        let mut m = self.next_u32() as u64 * n as u64;
        let mut leftover = m as u32;
        if leftover < n {
            let threshold = (u32::MAX - rng) % n;
            while leftover < threshold {
                m = self.next_u32() as u64 * n as u64;
                leftover = m as u32;
            }
        }
        (m >> 32) as u32
    }
}

/// The units of texts of `lengths` laid end to end, drawn from `PCG64(SeedSequence(entropy))`
/// over `n_words` words (unit `n_words` is the period): `replay.prompts.PromptVocab.sample_many`.
pub fn sample_units(entropy: &[u64], lengths: &[usize], n_words: u32) -> Vec<u32> {
    let total: usize = lengths.iter().sum();
    let mut rng = Pcg64::from_entropy(entropy);
    let mut units: Vec<u32> = Vec::with_capacity(total);
    for _ in 0..total {
        units.push(rng.below(n_words));
    }
    // where each (non-empty) text starts: its first unit is never a period
    let mut starts = Vec::with_capacity(lengths.len());
    let mut at = 0;
    for &len in lengths {
        if len > 0 {
            starts.push(at);
        }
        at += len;
    }
    // then one double a unit: a period where it is under PERIOD_P, but never right after a
    // period drawn just before it (the draws, not the result, decide)
    let mut previous = false;
    let mut next_start = starts.iter().peekable();
    for (i, unit) in units.iter_mut().enumerate() {
        let mut this = rng.next_f64() < PERIOD_P;
        if next_start.peek() == Some(&&i) {
            this = false;
            next_start.next();
        }
        if this && !previous {
            *unit = n_words;
        }
        previous = this;
    }
    units
}

/// The text of `units` under `table` (each unit's string; the last is the period).
pub fn render(units: &[u32], table: &[String], out: &mut String) {
    UnitTable::new(table).render(units, out);
}

/// Unit strings laid out for rendering: each in a fixed slot of [`SLOT`] bytes, so that a unit
/// is one fixed-size copy (a few-byte `push_str` per unit was a `memcpy` call each: a third of
/// the time a token-only body took to build).
pub struct UnitTable {
    slots: Vec<[u8; SLOT]>,
    lens: Vec<usize>,
    /// the strings as they are, when one does not fit a slot
    long: Vec<String>,
}

/// Bytes of a unit's slot.
pub const SLOT: usize = 16;

impl UnitTable {
    pub fn new(table: &[String]) -> UnitTable {
        if table.iter().any(|s| s.len() > SLOT) {
            return UnitTable {
                slots: Vec::new(),
                lens: Vec::new(),
                long: table.to_vec(),
            };
        }
        let slots = table
            .iter()
            .map(|s| {
                let mut slot = [0u8; SLOT];
                slot[..s.len()].copy_from_slice(s.as_bytes());
                slot
            })
            .collect();
        UnitTable {
            slots,
            lens: table.iter().map(String::len).collect(),
            long: Vec::new(),
        }
    }

    /// Append the text of `units`.
    pub fn render(&self, units: &[u32], out: &mut String) {
        if !self.long.is_empty() {
            for &u in units {
                out.push_str(&self.long[u as usize]);
            }
            return;
        }
        let total: usize = units.iter().map(|&u| self.lens[u as usize]).sum();
        let mut buf = std::mem::take(out).into_bytes();
        let mut at = buf.len();
        buf.resize(at + total + SLOT, 0);
        for &u in units {
            buf[at..at + SLOT].copy_from_slice(&self.slots[u as usize]);
            at += self.lens[u as usize];
        }
        buf.truncate(at);
        *out = String::from_utf8(buf).expect("whole UTF-8 strings laid end to end");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // expected values printed by numpy 2.4 (see the comments)
    #[test]
    fn seed_sequence_and_pcg64_match_numpy() {
        // np.random.SeedSequence(0).generate_state(4, np.uint64)
        assert_eq!(
            seed_state(&[0]),
            [
                0xdb2c_d7e7_b0f4_78be,
                0xabf4_641a_2c71_ba49,
                0x20c6_ed6d_9d7b_8d41,
                0x2c40_99de_223c_39d4
            ]
        );
        let entropy = [0, 0x1234_5678_9abc_def0, 0x5E0D];
        // np.random.SeedSequence([0, 0x123456789abcdef0, 0x5E0D]).generate_state(4, np.uint64)
        assert_eq!(
            seed_state(&entropy),
            [
                0x0fab_6011_9e11_6e77,
                0x7f7c_d7de_4879_2ca9,
                0xcd8c_5c66_d7f0_63e6,
                0x173a_26a8_4a63_e9e3
            ]
        );
        // default_rng(that).bit_generator.random_raw(3)
        let mut rng = Pcg64::from_entropy(&entropy);
        let raw: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            raw,
            vec![
                10946061459272559459,
                18011280353879602504,
                12574467505267097089
            ]
        );
        // default_rng(that): integers(0, 300, 7, dtype=np.int32), then random(3)
        let mut rng = Pcg64::from_entropy(&entropy);
        let ints: Vec<u32> = (0..7).map(|_| rng.below(300)).collect();
        assert_eq!(ints, vec![11, 178, 247, 292, 256, 204, 284]);
        let doubles: Vec<f64> = (0..3).map(|_| rng.next_f64()).collect();
        assert_eq!(
            doubles,
            vec![0.9938896768498161, 0.4157335973415909, 0.03305819917873987]
        );
    }

    #[test]
    fn units_render_as_their_strings_laid_end_to_end() {
        let short: Vec<String> = ["a", "bb", "\u{e9}t\u{e9}", "0123456789abcdef", "."]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let units = [3u32, 0, 2, 4, 1, 3, 0];
        let want: String = units.iter().map(|&u| short[u as usize].as_str()).collect();
        let mut out = String::from("x");
        UnitTable::new(&short).render(&units, &mut out);
        assert_eq!(out, format!("x{want}"));
        // a string longer than a slot: laid out as it is
        let mut long = short.clone();
        long[1] = "b".repeat(40);
        let want: String = units.iter().map(|&u| long[u as usize].as_str()).collect();
        let mut out = String::new();
        UnitTable::new(&long).render(&units, &mut out);
        assert_eq!(out, want);
    }

    #[test]
    fn texts_start_with_a_word_and_never_hold_two_periods_in_a_row() {
        let units = sample_units(&[7, 8, 9], &[50, 0, 30, 1], 100);
        assert_eq!(units.len(), 81);
        for start in [0usize, 50, 80] {
            assert_ne!(units[start], 100, "a text starts with a word");
        }
        assert!(units.windows(2).all(|w| !(w[0] == 100 && w[1] == 100)));
        assert!(units.contains(&100), "some periods in 81 units");
    }
}
