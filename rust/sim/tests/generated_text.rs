//! Generated answers hold no special tokens: no special or added token id, and no text of one or
//! piece of the chat template's `<|...|>` markers, even when the prompt is full of them and the
//! generator copies from it. Checked with the tiny tokenizer (markers are plain bytes, as under
//! GPT-2), the tiny tokenizer with ChatML markers as special tokens (as under Qwen2), and the real
//! gpt2 / qwen2 tokenizer.json files when `replay.tokenizer` has cached them.

use std::path::PathBuf;

use replay_sim::fixture::tiny_tokenizer_json;
use replay_sim::template::render_chat;
use replay_sim::textgen::TextGen;
use replay_sim::Vocab;
use serde_json::json;
use tokenizers::{AddedToken, Tokenizer};

/// The tiny tokenizer plus ChatML markers as special tokens and one non-special added token.
fn tiny_chatml() -> Tokenizer {
    let mut tok: Tokenizer = tiny_tokenizer_json().parse().unwrap();
    tok.add_special_tokens(&[
        AddedToken::from("<|im_start|>", true),
        AddedToken::from("<|im_end|>", true),
    ]);
    tok.add_tokens(&[AddedToken::from("<tool_call>", false)]);
    tok
}

/// Where `replay.tokenizer` caches the named tokenizer.json.
fn cached_tokenizer(name: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("FAITHFUL_REPLAY_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/faithful-replay"))
        })?;
    Some(cache.join("tokenizers").join(format!("{name}.json"))).filter(|p| p.is_file())
}

fn tokenizers() -> Vec<(String, Tokenizer)> {
    let mut out = vec![
        ("tiny".to_string(), tiny_tokenizer_json().parse().unwrap()),
        ("tiny+chatml".to_string(), tiny_chatml()),
    ];
    for name in ["gpt2", "qwen2"] {
        match cached_tokenizer(name) {
            Some(path) => out.push((name.to_string(), Tokenizer::from_file(path).unwrap())),
            None => eprintln!(
                "{name} tokenizer not cached, not tested (cache it with: python -c \
                 \"from replay.tokenizer import tokenizer_path; tokenizer_path('{name}')\")"
            ),
        }
    }
    out
}

/// Chat prompts whose text holds markers, special-token strings and pipes, repeated so that the
/// generator copies from them often.
fn prompts(vocab: &Vocab) -> Vec<Vec<u32>> {
    let contents = [
        "the answer is <|im_end|> then <|im_start|>user again <|endoftext|> and <tool_call> done",
        "a | b | c\n|---|---|\n<|x|> <| |> x<|y |>z || <<|>>",
        "the cat sat on the mat and looked at the door for a long while",
    ];
    contents
        .iter()
        .map(|c| {
            let turn = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": c},
                              {"role": "assistant", "content": c}]);
            let text = render_chat(turn.as_array().unwrap(), &[], false).unwrap().repeat(6);
            vocab.encode(&text)
        })
        .collect()
}

#[test]
fn answers_hold_no_special_tokens_or_marker_pieces() {
    for (name, tok) in tokenizers() {
        let added = tok.get_added_tokens_decoder();
        let vocab = Vocab::new(tok);
        let mut forbidden: Vec<String> = vec!["<|".into(), "|>".into()];
        forbidden.extend(added.values().map(|t| t.content.clone()));
        for prompt in prompts(&vocab) {
            for seed in 0..40u64 {
                let mut gen = TextGen::new(seed, 0, &prompt);
                let ids: Vec<u32> = (0..500)
                    .map(|_| gen.next(&prompt, &vocab.lexicon))
                    .collect();
                if let Some(id) = ids.iter().find(|id| added.contains_key(id)) {
                    panic!(
                        "{name} seed {seed}: generated added token {id} ({:?})",
                        added[id].content
                    );
                }
                let text = vocab.decode(&ids);
                for f in &forbidden {
                    assert!(
                        !text.contains(f.as_str()),
                        "{name} seed {seed}: {f:?} in {text:?}"
                    );
                }
            }
        }
    }
}
