//! A tiny byte-level BPE tokenizer built in code, for tests and examples that must not depend on
//! a downloaded vocabulary.
//!
//! Owns `tiny_tokenizer_json`: GPT-2's 256-symbol byte alphabet, plus merges that make a few
//! common words (with their leading space) single tokens, plus `<|endoftext|>` as a special
//! token. It round-trips any text, so prompts of any content work.

use serde_json::{json, Map, Value};

const TINY_WORDS: [&str; 24] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "was", "on", "with", "as", "be",
    "at", "by", "this", "are", "have", "from", "or", "an", "but", "not",
];

fn byte_char(b: u8) -> char {
    let b = b as u32;
    let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    if printable {
        return char::from_u32(b).expect("char");
    }
    let rank = (0..b)
        .filter(|x| !((33..=126).contains(x) || (161..=172).contains(x) || (174..=255).contains(x)))
        .count() as u32;
    char::from_u32(256 + rank).expect("char")
}

/// The tokenizer.json text of the tiny tokenizer.
pub fn tiny_tokenizer_json() -> String {
    let mut vocab = Map::new();
    for b in 0..=255u8 {
        let id = vocab.len();
        vocab.insert(byte_char(b).to_string(), json!(id));
    }
    let space = byte_char(b' ');
    let mut merges: Vec<String> = Vec::new();
    for w in TINY_WORDS {
        let mut piece = space.to_string();
        for c in w.chars() {
            let next = format!("{piece}{c}");
            if !vocab.contains_key(&next) {
                merges.push(format!("{piece} {c}"));
                let id = vocab.len();
                vocab.insert(next.clone(), json!(id));
            }
            piece = next;
        }
    }
    let eos_id = vocab.len();
    let v: Value = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{"id": eos_id, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges},
    });
    v.to_string()
}

/// The tiny tokenizer, loaded.
pub fn tiny_vocab() -> crate::vocab::Vocab {
    let tok: tokenizers::Tokenizer = tiny_tokenizer_json()
        .parse()
        .expect("the tiny tokenizer parses");
    crate::vocab::Vocab::new(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_vocab_round_trips_and_has_single_token_words() {
        let v = tiny_vocab();
        let text = "the cat sat on the mat, naïve café 日本 \"quoted\"\n";
        let ids = v.encode(text);
        assert_eq!(v.decode(&ids), text);
        assert_eq!(v.encode(" the").len(), 1);
        assert!(v.lexicon.words().len() >= 20, "{}", v.lexicon.words().len());
        assert_eq!(v.encode("<|endoftext|>"), vec![v.eos]);
        assert!(v.piece(v.eos).is_empty());
        // multi-byte characters split over tokens decode once complete
        let ids = v.encode("日");
        assert!(ids.len() > 1);
        let (mut pending, mut out) = (Vec::new(), String::new());
        v.decode_into(&ids[..1], &mut pending, &mut out);
        assert!(out.is_empty() && !pending.is_empty());
        v.decode_into(&ids[1..], &mut pending, &mut out);
        assert_eq!(out, "日");
    }
}
