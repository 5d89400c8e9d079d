//! Deterministic output tokens: what the simulated model "says".
//!
//! Owns `TextGen`, `Lexicon`, `output_length` and `repetitiveness`. Everything follows from a hash
//! of (seed, prompt token ids), so the same request gives the same answer on every run:
//!
//! * Length: unless `ignore_eos`, the answer ends with EOS after a lognormal number of tokens
//!   (median `EOS_MEDIAN_TOKENS`, log-sigma `EOS_SIGMA`), at least `min_tokens`; an answer that
//!   reaches `max_tokens` first ends with finish_reason "length".
//! * Content: at each position the generator either continues copying a span of the prompt's
//!   token ids, or draws a common single-token word (Zipf-like, as in natural text). How often
//!   it starts and keeps copying grows with how repetitive the prompt is (the share of its token
//!   trigrams that occurred earlier in it), so the output of a repetitive prompt (code, repeated
//!   lists) repeats what came before and n-gram speculation predicts it well, while random text
//!   gives little to predict.
//! * The `Lexicon` bans some token ids (the vocabulary bans special tokens and pieces of
//!   `<|...|>` markers, see `vocab`): a copy never includes one. It stops before a banned prompt
//!   token, and a copy that would start on one is a drawn word instead.
//! * A lossy knob (fp8 KV cache) passes a different `content_salt`: other tokens, same lengths.
//!
//! Tokens are produced strictly one after another from the generator's own state, so the output
//! does not depend on how steps batch them (speculation, preemption and recompute included).

use std::collections::HashSet;

use crate::kv::mix;

/// Median answer length in tokens when the answer ends by EOS.
pub const EOS_MEDIAN_TOKENS: f64 = 180.0;
/// Log-space sigma of the answer length.
pub const EOS_SIGMA: f64 = 0.8;

const LENGTH_DOMAIN: u64 = 0x1E46_7401;
const CONTENT_DOMAIN: u64 = 0xC047_E470;

/// Hash of the prompt under a seed and a domain.
pub(crate) fn prompt_hash(seed: u64, domain: u64, prompt: &[u32]) -> u64 {
    let mut h = mix(seed ^ domain);
    for &t in prompt {
        h = mix(h ^ t as u64);
    }
    h
}

/// A uniform number in [0, 1) from 53 bits of a hash.
pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A lognormal draw from a hash: `median` × e^(`sigma` · z), z standard normal (Box-Muller).
pub(crate) fn lognormal(h: u64, median: f64, sigma: f64) -> f64 {
    let (u1, u2) = (unit(h).max(1e-12), unit(mix(h)));
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (median.ln() + sigma * z).exp()
}

/// Output length (tokens, EOS included) of the answer to `prompt`: `max_tokens` when
/// `ignore_eos`, else a lognormal draw clipped to [max(min_tokens, 1), max_tokens].
pub fn output_length(
    seed: u64,
    prompt: &[u32],
    max_tokens: u32,
    min_tokens: u32,
    ignore_eos: bool,
) -> u32 {
    if ignore_eos || max_tokens == 0 {
        return max_tokens;
    }
    let h = prompt_hash(seed, LENGTH_DOMAIN, prompt);
    let len = lognormal(h, EOS_MEDIAN_TOKENS, EOS_SIGMA).round();
    let len = if len.is_finite() {
        len.clamp(1.0, u32::MAX as f64) as u32
    } else {
        1
    };
    len.max(min_tokens).max(1).min(max_tokens)
}

/// Share of the prompt's token trigrams that already occurred earlier in it (0 = no repetition).
pub fn repetitiveness(prompt: &[u32]) -> f64 {
    if prompt.len() < 4 {
        return 0.0;
    }
    let mut seen: HashSet<u64> = HashSet::with_capacity(prompt.len());
    let mut repeats = 0usize;
    for w in prompt.windows(3) {
        let key = mix(mix(mix(w[0] as u64) ^ w[1] as u64) ^ w[2] as u64);
        if !seen.insert(key) {
            repeats += 1;
        }
    }
    repeats as f64 / (prompt.len() - 2) as f64
}

/// What the generator may say: the common words it draws from, and the token ids it never emits.
#[derive(Debug, Clone, Default)]
pub struct Lexicon {
    words: Vec<u32>,
    /// `banned[id]`: never emit `id`; ids past the end are allowed.
    banned: Vec<bool>,
}

impl Lexicon {
    /// Draw from `words` (banned ones are dropped), never emitting an id marked in `banned`.
    pub fn new(mut words: Vec<u32>, banned: Vec<bool>) -> Lexicon {
        words.retain(|&w| !banned.get(w as usize).copied().unwrap_or(false));
        Lexicon { words, banned }
    }

    /// The words the generator draws from.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Whether generated text may hold `id`.
    pub fn allows(&self, id: u32) -> bool {
        !self.banned.get(id as usize).copied().unwrap_or(false)
    }
}

/// The per-sequence generator; see the module docs.
#[derive(Debug, Clone)]
pub struct TextGen {
    state: u64,
    /// Next prompt position to copy, while copying.
    copy_pos: Option<usize>,
    p_start_copy: f64,
    p_continue_copy: f64,
}

impl TextGen {
    /// A generator for `prompt` under `seed`; `content_salt` (0 normally) changes the tokens.
    pub fn new(seed: u64, content_salt: u64, prompt: &[u32]) -> TextGen {
        let r = repetitiveness(prompt);
        TextGen {
            state: prompt_hash(seed ^ content_salt, CONTENT_DOMAIN, prompt),
            copy_pos: None,
            p_start_copy: 0.02 + 0.9 * r,
            p_continue_copy: 0.5 + 0.47 * r,
        }
    }

    fn draw(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// The next output token: a continued or new copy from `prompt`, or a word of `lexicon`;
    /// never an id the lexicon bans (unless it has no words and the prompt no allowed token).
    pub fn next(&mut self, prompt: &[u32], lexicon: &Lexicon) -> u32 {
        let r = unit(self.draw());
        if let Some(pos) = self.copy_pos {
            if pos < prompt.len() && lexicon.allows(prompt[pos]) && r < self.p_continue_copy {
                self.copy_pos = Some(pos + 1);
                return prompt[pos];
            }
            self.copy_pos = None;
        } else if !prompt.is_empty() && r < self.p_start_copy {
            let start = (self.draw() % prompt.len() as u64) as usize;
            if lexicon.allows(prompt[start]) {
                self.copy_pos = Some(start + 1);
                return prompt[start];
            }
        }
        let words = lexicon.words();
        if words.is_empty() {
            let allowed = prompt.iter().copied().find(|&t| lexicon.allows(t));
            return allowed.unwrap_or(0);
        }
        // Zipf-like (log-uniform rank): word k is drawn about 1/k as often as the first, as in
        // natural text, so common words repeat and n-gram lookups find matches
        let u = unit(self.draw());
        let rank = (words.len() as f64 + 1.0).powf(u) as usize - 1;
        words[rank.min(words.len() - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexicon() -> Lexicon {
        Lexicon::new((1000..1100).collect(), Vec::new())
    }

    fn run(seed: u64, salt: u64, prompt: &[u32], n: usize) -> Vec<u32> {
        let mut g = TextGen::new(seed, salt, prompt);
        let lex = lexicon();
        (0..n).map(|_| g.next(prompt, &lex)).collect()
    }

    #[test]
    fn deterministic_per_seed_and_prompt() {
        let prompt: Vec<u32> = (0..200).map(|i| (i * 7919) % 5000).collect();
        assert_eq!(run(1, 0, &prompt, 300), run(1, 0, &prompt, 300));
        assert_ne!(run(1, 0, &prompt, 300), run(2, 0, &prompt, 300));
        assert_ne!(run(1, 0, &prompt, 300), run(1, 0xF8, &prompt, 300));
        let mut other = prompt.clone();
        other[5] += 1;
        assert_ne!(run(1, 0, &prompt, 300), run(1, 0, &other, 300));
    }

    #[test]
    fn lengths_are_plausible_and_bounded() {
        let mut lens = Vec::new();
        for i in 0..400u32 {
            let prompt = vec![i, i + 1, i * 3];
            let n = output_length(0, &prompt, 100_000, 0, false);
            assert!(n >= 1);
            lens.push(n);
        }
        lens.sort();
        let median = lens[lens.len() / 2] as f64;
        assert!((120.0..260.0).contains(&median), "median {median}");
        assert_eq!(output_length(0, &[1, 2], 50, 0, true), 50);
        assert!(lens.iter().any(|&n| n > 400) && lens.iter().any(|&n| n < 80));
        for i in 0..100u32 {
            let n = output_length(3, &[i], 64, 10, false);
            assert!((10..=64).contains(&n));
        }
        assert_eq!(output_length(0, &[1], 0, 0, false), 0);
    }

    #[test]
    fn repetitive_prompts_are_copied_random_ones_are_not() {
        let pattern: Vec<u32> = (0..30).map(|i| 2000 + i).collect();
        let repetitive: Vec<u32> = pattern.iter().cycle().take(600).copied().collect();
        let random: Vec<u32> = (0..600u64).map(|i| (mix(i) % 40_000) as u32).collect();
        assert!(repetitiveness(&repetitive) > 0.9);
        assert!(repetitiveness(&random) < 0.01);
        let from_prompt = |p: &[u32]| {
            let set: HashSet<u32> = p.iter().copied().collect();
            run(0, 0, p, 500).iter().filter(|t| set.contains(t)).count()
        };
        assert!(from_prompt(&repetitive) > 400);
        assert!(from_prompt(&random) < 100);
    }

    #[test]
    fn banned_ids_are_never_copied_nor_drawn() {
        let pattern: Vec<u32> = (0..30).map(|i| 2000 + i).collect();
        let repetitive: Vec<u32> = pattern.iter().cycle().take(600).copied().collect();
        // every third pattern token and two of the words are banned
        let mut banned = vec![false; 3000];
        for t in (2000..2030).step_by(3).chain([1000, 1001]) {
            banned[t as usize] = true;
        }
        let lex = Lexicon::new((1000..1100).collect(), banned);
        assert!(!lex.words().contains(&1000) && lex.allows(1002) && lex.allows(50_000));
        let mut g = TextGen::new(0, 0, &repetitive);
        let out: Vec<u32> = (0..2000).map(|_| g.next(&repetitive, &lex)).collect();
        assert!(out.iter().all(|&t| lex.allows(t)));
        // the allowed prompt tokens are still copied often (a random prompt gives under 20%)
        let copied = out.iter().filter(|&&t| t >= 2000).count();
        assert!(copied > 700, "{copied}");
        // without words, the first allowed prompt token
        let no_words = Lexicon::new(Vec::new(), (0..2002).map(|t| t >= 2000).collect());
        let prompt = [2000, 2001, 7, 2000];
        assert_eq!(TextGen::new(0, 0, &prompt).next(&prompt, &no_words), 7);
    }
}
