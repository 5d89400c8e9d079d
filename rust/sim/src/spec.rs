//! N-gram speculative decoding (prompt lookup), done for real on the token streams.
//!
//! Owns `NgramConfig` and `NgramIndex`. To propose, take the sequence's last n tokens (n from
//! `prompt_lookup_max` down to `prompt_lookup_min`), find the latest earlier place in prompt +
//! output where that n-gram occurred, and propose the (up to) `num_speculative_tokens` tokens
//! that followed it. The engine then generates the real next tokens one by one and accepts the
//! longest prefix of the proposal that equals them, plus one bonus token (as the target model's
//! verification pass would). The index keeps, per n-gram, the latest position where it ended, and
//! is extended incrementally as tokens are appended, so a proposal costs O(max n) per step.

use std::collections::HashMap;

use serde_json::Value;

use crate::error::SimError;
use crate::kv::mix;

/// `--speculative-config '{"method":"ngram", ...}'`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgramConfig {
    pub num_speculative_tokens: u32,
    pub prompt_lookup_max: u32,
    pub prompt_lookup_min: u32,
}

impl NgramConfig {
    /// Parse `--speculative-config` (an object, or a string holding one), as vLLM reads it:
    /// only `"method": "ngram"`; `num_speculative_tokens` required; the lookups default to 5
    /// or to each other.
    pub fn from_json(v: &Value) -> Result<NgramConfig, SimError> {
        const FLAG: &str = "--speculative-config";
        let owned;
        let v = match v {
            Value::String(s) => {
                owned = serde_json::from_str::<Value>(s)
                    .map_err(|e| SimError::config(FLAG, format!("not JSON: {e}")))?;
                &owned
            }
            other => other,
        };
        let Value::Object(o) = v else {
            return Err(SimError::config(FLAG, "must be a JSON object"));
        };
        for key in o.keys() {
            if ![
                "method",
                "num_speculative_tokens",
                "prompt_lookup_max",
                "prompt_lookup_min",
            ]
            .contains(&key.as_str())
            {
                return Err(SimError::config(FLAG, format!("unknown field '{key}'")));
            }
        }
        match o.get("method").and_then(Value::as_str) {
            Some("ngram") => {}
            other => {
                return Err(SimError::config(
                    FLAG,
                    format!(
                        "method must be \"ngram\", got {}",
                        other.map_or("nothing".to_string(), |m| format!("\"{m}\""))
                    ),
                ))
            }
        }
        let int = |key: &str| -> Result<Option<u32>, SimError> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| {
                        SimError::config(FLAG, format!("{key} must be a non-negative integer"))
                    }),
            }
        };
        let k = int("num_speculative_tokens")?
            .ok_or_else(|| SimError::config(FLAG, "num_speculative_tokens is required"))?;
        let (max, min) = match (int("prompt_lookup_max")?, int("prompt_lookup_min")?) {
            (None, None) => (5, 5),
            (Some(a), None) => (a, a),
            (None, Some(b)) => (b, b),
            (Some(a), Some(b)) => (a, b),
        };
        if !(1..=64).contains(&k) {
            return Err(SimError::config(
                FLAG,
                format!("num_speculative_tokens must be in [1, 64], got {k}"),
            ));
        }
        if min < 1 || min > max {
            return Err(SimError::config(
                FLAG,
                format!("need 1 <= prompt_lookup_min ({min}) <= prompt_lookup_max ({max})"),
            ));
        }
        Ok(NgramConfig {
            num_speculative_tokens: k,
            prompt_lookup_max: max,
            prompt_lookup_min: min,
        })
    }
}

/// Per-sequence n-gram index over its tokens.
#[derive(Debug, Default, Clone)]
pub struct NgramIndex {
    /// (n-gram hash) -> index of the n-gram's last token, latest occurrence.
    last_end: HashMap<u64, u32>,
    /// Tokens [0, indexed) have had the n-grams ending at them inserted.
    indexed: usize,
}

fn gram_key(gram: &[u32]) -> u64 {
    let mut h = mix(gram.len() as u64);
    for &t in gram {
        h = mix(h ^ t as u64);
    }
    h
}

impl NgramIndex {
    /// Propose continuation tokens for `tokens` (prompt + output so far): the range of `tokens`
    /// that followed the latest earlier occurrence of the longest matching suffix n-gram, at most
    /// `min(k, limit)` long. None when nothing matches.
    pub fn propose(
        &mut self,
        tokens: &[u32],
        cfg: &NgramConfig,
        limit: u32,
    ) -> Option<(usize, usize)> {
        let k = cfg.num_speculative_tokens.min(limit) as usize;
        let len = tokens.len();
        if k == 0 || len < 2 {
            return None;
        }
        let (lo, hi) = (
            cfg.prompt_lookup_min.max(1) as usize,
            cfg.prompt_lookup_max as usize,
        );
        // index n-grams ending at positions before the last token (the suffix must not match itself)
        while self.indexed + 1 < len {
            let end = self.indexed;
            for n in lo..=hi.min(end + 1) {
                self.last_end
                    .insert(gram_key(&tokens[end + 1 - n..=end]), end as u32);
            }
            self.indexed += 1;
        }
        for n in (lo..=hi.min(len - 1)).rev() {
            if let Some(&end) = self.last_end.get(&gram_key(&tokens[len - n..])) {
                let start = end as usize + 1;
                let stop = (start + k).min(len);
                if start < stop && tokens[end as usize + 1 - n..=end as usize] == tokens[len - n..]
                {
                    return Some((start, stop - start));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::textgen::{Lexicon, TextGen};

    const CFG: NgramConfig = NgramConfig {
        num_speculative_tokens: 4,
        prompt_lookup_max: 4,
        prompt_lookup_min: 2,
    };

    #[test]
    fn proposes_what_followed_the_latest_match() {
        let mut idx = NgramIndex::default();
        let tokens = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3];
        // suffix [1,2,3] last occurred ending at 8, followed by 7, 8, 1, 2
        let (s, n) = idx.propose(&tokens, &CFG, 10).unwrap();
        assert_eq!(&tokens[s..s + n], &[7, 8, 1, 2]);
        // capped by the limit
        let mut idx = NgramIndex::default();
        let (_, n) = idx.propose(&tokens, &CFG, 2).unwrap();
        assert_eq!(n, 2);
        let mut idx = NgramIndex::default();
        assert!(idx.propose(&[1, 2, 3, 4, 5, 6], &CFG, 10).is_none());
        // incremental use agrees with a fresh index
        let mut inc = NgramIndex::default();
        for end in 3..tokens.len() {
            let a = inc.propose(&tokens[..=end], &CFG, 10);
            let b = NgramIndex::default().propose(&tokens[..=end], &CFG, 10);
            assert_eq!(a, b, "at {end}");
        }
    }

    /// Accepted tokens per proposal over a generated answer.
    fn acceptance(prompt: &[u32]) -> f64 {
        let lexicon = Lexicon::new((1000..1200).collect(), Vec::new());
        let mut gen = TextGen::new(0, 0, prompt);
        let mut tokens = prompt.to_vec();
        let mut idx = NgramIndex::default();
        let (mut proposed, mut accepted) = (0usize, 0usize);
        while tokens.len() < prompt.len() + 400 {
            let draft = idx.propose(&tokens, &CFG, 10);
            let draft: Vec<u32> = draft
                .map(|(s, n)| tokens[s..s + n].to_vec())
                .unwrap_or_default();
            proposed += draft.len();
            for (i, &d) in draft.iter().chain(std::iter::once(&u32::MAX)).enumerate() {
                let t = gen.next(prompt, &lexicon);
                tokens.push(t);
                if i >= draft.len() || t != d {
                    break;
                }
                accepted += 1;
            }
        }
        accepted as f64 / proposed.max(1) as f64
    }

    #[test]
    fn repetitive_text_accepts_much_more_than_random_text() {
        let pattern: Vec<u32> = (0..25).map(|i| 3000 + i * 11).collect();
        let repetitive: Vec<u32> = pattern.iter().cycle().take(500).copied().collect();
        let random: Vec<u32> = (0..500u64).map(|i| (mix(i + 77) % 40_000) as u32).collect();
        let (rep, rnd) = (acceptance(&repetitive), acceptance(&random));
        assert!(rep > 0.6, "repetitive acceptance {rep}");
        assert!(rnd < 0.2, "random acceptance {rnd}");
    }
}
