//! The real tokenizer and what the engine needs from it.
//!
//! Owns `Vocab`: encoding with the HF `tokenizers` crate from a tokenizer.json, the bytes of
//! every token (computed once, so decoding a streamed token is a table lookup), the EOS id, and
//! the `lexicon` of the output generator: the common English words that are ONE token each with
//! their leading space, which it draws from, and the ids it must never emit. Byte-level BPE
//! tokens map back to bytes through GPT-2's byte-to-unicode table; other tokenizers decode each
//! id on its own. Special tokens decode to nothing (as vLLM's default `skip_special_tokens`).
//!
//! Generated text holds only ordinary tokens: every added token (special or not) is banned, and
//! so is every token whose text is empty, holds an added token's text, holds `<|` or `|>`, or
//! starts or ends with `|`. Chat markers such as `<|im_end|>` are plain text under vocabularies
//! that lack them (GPT-2), so a prompt carries their pieces; with `|` kept off both ends of a
//! token, no two allowed tokens meet to spell `<|` or `|>` either.

use std::collections::HashMap;

use tokenizers::decoders::DecoderWrapper;
use tokenizers::Tokenizer;

use crate::error::SimError;
use crate::textgen::Lexicon;

/// Common words, most frequent first; those that are not one token under the tokenizer are
/// dropped when the vocab loads.
const WORDS: &str = "the of and to a in is that for it was on with as be at by this are \
have from or an but not they which you one were all we there can been has more if will their \
when would so what about out up into no other some could them than then only its time like \
over also new these two may any first after most very well make way even because many where \
such just those people through back good much should each world how work long year still own \
see made great little state here between both life under last never day same another know while \
might large place small number part during without again home group found thought high public \
system order point water system level power money data model story night light table paper \
music market field voice price river window garden letter energy answer office family report \
result change reason question moment street friend member service policy morning country city \
book hand side face fact word name line form body kind sense open close early young strong clear \
full free short simple local human social common special recent final private single natural \
green black white red blue ready quiet bright heavy quick slow warm cold deep wide real true whole";

/// Extra single-token pieces mixed into the generated text.
const PUNCTUATION: [&str; 3] = [".", ",", "\n"];

/// EOS candidates, tried in order.
const EOS_NAMES: [&str; 6] = [
    "<|endoftext|>",
    "<|im_end|>",
    "</s>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<eos>",
];

/// A loaded tokenizer plus per-token bytes; see the module docs.
pub struct Vocab {
    tokenizer: Tokenizer,
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    utf8: Vec<bool>,
    /// What the generator may say: single-token common words (and punctuation) to draw, and the
    /// banned ids (see the module docs).
    pub lexicon: Lexicon,
    /// The id appended when an answer ends by EOS (not rendered).
    pub eos: u32,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocab")
            .field("size", &self.size())
            .field("eos", &self.eos)
            .finish()
    }
}

/// GPT-2's byte-level alphabet: unicode char -> the byte it stands for.
fn byte_level_table() -> HashMap<char, u8> {
    let mut table = HashMap::with_capacity(256);
    let mut shifted = 0u32;
    for b in 0u32..=255 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            shifted += 1;
            255 + shifted
        };
        table.insert(char::from_u32(c).expect("valid char"), b as u8);
    }
    table
}

/// Whether an ordinary token with these bytes may appear in generated text (see the module docs).
fn sayable(piece: &[u8], added_texts: &[&[u8]]) -> bool {
    let holds = |part: &[u8]| piece.windows(part.len()).any(|w| w == part);
    !piece.is_empty()
        && piece.first() != Some(&b'|')
        && piece.last() != Some(&b'|')
        && !holds(b"<|")
        && !holds(b"|>")
        && !added_texts.iter().any(|t| holds(t))
}

impl Vocab {
    /// Load a tokenizer.json.
    pub fn from_file(path: &str) -> Result<Vocab, SimError> {
        let tokenizer = Tokenizer::from_file(path).map_err(|e| SimError::Tokenizer {
            path: path.to_string(),
            message: e
                .to_string()
                .lines()
                .next()
                .unwrap_or("unreadable")
                .to_string(),
        })?;
        Ok(Vocab::new(tokenizer))
    }

    /// Wrap a tokenizer and precompute every token's bytes.
    pub fn new(tokenizer: Tokenizer) -> Vocab {
        let size = tokenizer.get_vocab_size(true) as u32;
        let byte_level = matches!(tokenizer.get_decoder(), Some(DecoderWrapper::ByteLevel(_)));
        let table = byte_level_table();
        let added = tokenizer.get_added_tokens_decoder();
        let added_texts: Vec<&[u8]> = added
            .values()
            .map(|t| t.content.as_bytes())
            .filter(|t| !t.is_empty())
            .collect();
        let mut banned = Vec::with_capacity(size as usize);
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(size as usize + 1);
        offsets.push(0u32);
        for id in 0..size {
            match added.get(&id) {
                Some(t) if t.special => {}
                Some(t) => bytes.extend_from_slice(t.content.as_bytes()),
                None if byte_level => {
                    if let Some(piece) = tokenizer.id_to_token(id) {
                        bytes.extend(piece.chars().filter_map(|c| table.get(&c).copied()));
                    }
                }
                None => {
                    if let Ok(s) = tokenizer.decode(&[id], false) {
                        bytes.extend_from_slice(s.as_bytes());
                    }
                }
            }
            let start = *offsets.last().expect("offsets start at 0") as usize;
            banned.push(added.contains_key(&id) || !sayable(&bytes[start..], &added_texts));
            offsets.push(bytes.len() as u32);
        }
        let utf8 = (0..size as usize)
            .map(|i| {
                std::str::from_utf8(&bytes[offsets[i] as usize..offsets[i + 1] as usize]).is_ok()
            })
            .collect();
        let eos = EOS_NAMES
            .iter()
            .find_map(|n| tokenizer.token_to_id(n))
            .unwrap_or(u32::MAX);
        let mut vocab = Vocab {
            tokenizer,
            bytes,
            offsets,
            utf8,
            lexicon: Lexicon::default(),
            eos,
        };
        let mut words: Vec<u32> = Vec::new();
        let spaced = WORDS.split_whitespace().map(|w| format!(" {w}"));
        for w in spaced.chain(PUNCTUATION.iter().map(|p| p.to_string())) {
            if let [id] = vocab.encode(&w)[..] {
                if !words.contains(&id) {
                    words.push(id);
                }
            }
        }
        words.retain(|&w| !banned[w as usize]);
        if words.is_empty() {
            // an odd vocabulary: fall back to its first allowed whole-character tokens
            words = (0..size)
                .filter(|&i| vocab.utf8[i as usize] && !banned[i as usize])
                .take(1000)
                .collect();
        }
        vocab.lexicon = Lexicon::new(words, banned);
        vocab
    }

    /// Number of token ids (added tokens included).
    pub fn size(&self) -> usize {
        self.utf8.len()
    }

    /// Token ids of `text` (no BOS/EOS added; special tokens written in the text are matched).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self.tokenizer.encode_fast(text, false) {
            Ok(enc) => enc.get_ids().to_vec(),
            Err(_) => Vec::new(),
        }
    }

    /// The bytes of one token (empty for special tokens and unknown ids).
    pub fn piece(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i >= self.utf8.len() {
            return &[];
        }
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// The token's text when its bytes are valid UTF-8 on their own.
    pub fn text(&self, id: u32) -> Option<&str> {
        let i = id as usize;
        if i < self.utf8.len() && self.utf8[i] {
            // checked valid when the vocab was built
            std::str::from_utf8(self.piece(id)).ok()
        } else {
            None
        }
    }

    /// Append the text of `ids` to `out`, carrying an incomplete UTF-8 tail in `pending` from
    /// one call to the next (invalid bytes become U+FFFD).
    pub fn decode_into(&self, ids: &[u32], pending: &mut Vec<u8>, out: &mut String) {
        for &id in ids {
            if pending.is_empty() {
                if let Some(s) = self.text(id) {
                    out.push_str(s);
                    continue;
                }
            }
            pending.extend_from_slice(self.piece(id));
            loop {
                match std::str::from_utf8(pending) {
                    Ok(s) => {
                        out.push_str(s);
                        pending.clear();
                        break;
                    }
                    Err(e) => {
                        let valid = e.valid_up_to();
                        out.push_str(std::str::from_utf8(&pending[..valid]).expect("valid prefix"));
                        match e.error_len() {
                            Some(bad) => {
                                out.push('\u{FFFD}');
                                pending.drain(..valid + bad);
                            }
                            None => {
                                pending.drain(..valid);
                                break;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The whole text of `ids` (a trailing incomplete character becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        let (mut pending, mut out) = (Vec::new(), String::new());
        self.decode_into(ids, &mut pending, &mut out);
        if !pending.is_empty() {
            out.push('\u{FFFD}');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexicon_bans_added_tokens_and_marker_pieces() {
        let v = crate::fixture::tiny_vocab();
        let one = |text: &str| match v.encode(text)[..] {
            [id] => id,
            ref ids => panic!("{text:?} is {ids:?}"),
        };
        assert!(!v.lexicon.allows(v.eos));
        assert!(!v.lexicon.allows(one("|")));
        assert!(v.lexicon.allows(one("<")) && v.lexicon.allows(one(">")));
        assert!(v.lexicon.allows(one(" the")) && v.lexicon.allows(one("\n")));
        assert!(v.lexicon.words().iter().all(|&w| v.lexicon.allows(w)));
        let added: &[&[u8]] = &[b"<eos>"];
        for (piece, ok) in [
            (&b"a|b"[..], true),
            (b"|a", false),
            (b"a|", false),
            (b"x<|", false),
            (b"|>", false),
            (b"<eos>x", false),
            (b"", false),
        ] {
            assert_eq!(
                sayable(piece, added),
                ok,
                "{:?}",
                String::from_utf8_lossy(piece)
            );
        }
    }
}
