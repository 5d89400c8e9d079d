//! Causal sessions resend the engine's own answers.
//!
//! A multi-turn chat resends the whole conversation each turn, the assistant's earlier answers
//! included. Live, those answers were the live engine's: it had generated them and held their KV
//! blocks, so each turn hit its prefix cache through them. A replay that resends the recorded
//! answers sends text its engine never generated, and misses from the first of them on. In a
//! causal run (a turn is released after the previous one ends) the runner keeps the text each
//! request with a later turn streamed (`Answers`) and writes the answers of a turn's earlier turns
//! into its body in place of the recorded ones (`SendBody::answers_at`: the byte spans of the
//! history's assistant messages, oldest first, as the planner found them; the last is the
//! parent's answer, the one before it the grandparent's, and so on), so the engine sees the
//! conversation it had, as it did live. With `max_tokens` set to the recorded output length an
//! answer has the recorded length in tokens, give or take what retokenizing its text merges or
//! splits. An answer that is missing (its request failed) stays as recorded (counted). The answers
//! of a session are dropped when its last turn is sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

/// A request's body, and where in it the answers of its earlier turns sit, when they should be
/// the engine's own: the byte ranges of those answers' JSON string contents (between their
/// quotes), oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendBody {
    pub bytes: Bytes,
    pub answers_at: Vec<(u32, u32)>,
}

impl From<Bytes> for SendBody {
    fn from(bytes: Bytes) -> Self {
        SendBody {
            bytes,
            answers_at: Vec::new(),
        }
    }
}

/// The answers requests streamed, until their session's last turn is sent.
pub(crate) struct Answers {
    /// Requests whose answer a later request resends (those with a later turn).
    want: Vec<bool>,
    got: Mutex<HashMap<usize, String>>,
    /// Answers written into a later turn's body.
    pub resent: AtomicU64,
    /// Answers a later turn sent as recorded: the request that should have streamed it failed.
    pub recorded: AtomicU64,
}

impl Answers {
    pub fn new(want: Vec<bool>) -> Self {
        Answers {
            want,
            got: Mutex::new(HashMap::new()),
            resent: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
        }
    }

    pub fn wants(&self, index: usize) -> bool {
        self.want.get(index).copied().unwrap_or(false)
    }

    pub fn keep(&self, index: usize, text: String) {
        self.got.lock().expect("answers").insert(index, text);
    }

    /// The body to send for request `index`, whose earlier turns are `chain` (its parent first,
    /// then the parent's parent, ...): their answers written in at `body`'s spans (the last span
    /// takes the parent's answer), the rest as recorded. A request with no later turn ends its
    /// session: its earlier turns' answers are dropped.
    pub fn body_for(&self, index: usize, chain: &[usize], body: SendBody) -> Bytes {
        let mut got = self.got.lock().expect("answers");
        // span i of k (oldest first) holds the answer of the turn k - 1 - i back along `chain`
        let k = body.answers_at.len();
        let edits: Vec<((u32, u32), &str)> = body
            .answers_at
            .iter()
            .enumerate()
            .filter_map(|(i, at)| {
                let text = chain.get(k - 1 - i).and_then(|turn| got.get(turn))?;
                Some((*at, text.as_str()))
            })
            .collect();
        self.resent.fetch_add(edits.len() as u64, Ordering::Relaxed);
        self.recorded
            .fetch_add((k - edits.len()) as u64, Ordering::Relaxed);
        let out = splice(&body.bytes, &edits);
        if !self.wants(index) {
            for turn in chain {
                got.remove(turn);
            }
        }
        out
    }
}

/// `body` with each span of `edits` (in order, not overlapping) replaced by its text as JSON
/// string contents (escaped). Spans out of order or outside the body leave it as it is.
pub fn splice(body: &Bytes, edits: &[((u32, u32), &str)]) -> Bytes {
    let mut end = 0usize;
    for ((a, b), _) in edits {
        let (a, b) = (*a as usize, *b as usize);
        if a < end || a > b || b > body.len() {
            return body.clone();
        }
        end = b;
    }
    if edits.is_empty() {
        return body.clone();
    }
    let mut out = BytesMut::with_capacity(body.len() + 64 * edits.len());
    let mut from = 0usize;
    for ((a, b), text) in edits {
        let quoted = serde_json::to_string(text).expect("a string serializes");
        out.extend_from_slice(&body[from..*a as usize]);
        out.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
        from = *b as usize;
    }
    out.extend_from_slice(&body[from..]);
    out.freeze()
}

#[derive(Deserialize)]
struct TextMsg {
    #[serde(default)]
    choices: Vec<TextChoice>,
}

#[derive(Deserialize)]
struct TextChoice {
    #[serde(default)]
    delta: Option<TextPart>,
    #[serde(default)]
    message: Option<TextPart>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct TextPart {
    #[serde(default)]
    content: Option<String>,
}

/// The text a streamed chunk (or a whole JSON response) carries: the first choice's
/// `delta.content`, `message.content` or `text`; "" when it carries none or is not JSON.
pub fn text_of(data: &[u8]) -> String {
    let Ok(msg) = serde_json::from_slice::<TextMsg>(data.trim_ascii()) else {
        return String::new();
    };
    let Some(c) = msg.choices.into_iter().next() else {
        return String::new();
    };
    c.delta
        .and_then(|d| d.content)
        .or_else(|| c.message.and_then(|m| m.content))
        .or(c.text)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_writes_each_answer_escaped_between_its_quotes() {
        let body = Bytes::from_static(
            br#"{"messages":[{"role":"assistant","content":"one"},{"role":"assistant","content":"two"},{"role":"user","content":"q"}]}"#,
        );
        let at = |s: &[u8]| {
            let a = body.windows(s.len()).position(|w| w == s).unwrap() as u32;
            (a, a + s.len() as u32)
        };
        let out = splice(
            &body,
            &[
                (at(b"one"), "first \"quoted\"\nline \u{e9}"),
                (at(b"two"), "2nd"),
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["messages"][0]["content"], "first \"quoted\"\nline \u{e9}");
        assert_eq!(v["messages"][1]["content"], "2nd");
        assert_eq!(v["messages"][2]["content"], "q");
        assert_eq!(splice(&body, &[((5, 500), "x")]), body); // outside: as it was
        assert_eq!(splice(&body, &[(at(b"two"), "b"), (at(b"one"), "a")]), body);
        // out of order
    }

    #[test]
    fn text_of_reads_deltas_messages_and_completions() {
        assert_eq!(
            text_of(br#"{"choices":[{"delta":{"content":"he"}}]}"#),
            "he"
        );
        assert_eq!(
            text_of(br#"{"choices":[{"delta":{"role":"assistant"}}]}"#),
            ""
        );
        assert_eq!(
            text_of(br#"{"choices":[{"message":{"content":"all"}}]}"#),
            "all"
        );
        assert_eq!(text_of(br#"{"choices":[{"text":"t"}]}"#), "t");
        assert_eq!(
            text_of(br#"{"choices":[],"usage":{"prompt_tokens":3}}"#),
            ""
        );
        assert_eq!(text_of(b"[DONE]"), "");
    }

    #[test]
    fn a_turn_takes_its_earlier_turns_answers_and_the_last_turn_drops_them() {
        // a session of turns 0 -> 1 -> 2; turn 2 resends the answers of 0 and 1
        let answers = Answers::new(vec![true, true, false]);
        assert!(answers.wants(0) && answers.wants(1) && !answers.wants(2) && !answers.wants(7));
        let body = SendBody {
            bytes: Bytes::from_static(br#"["r0","r1"]"#),
            answers_at: vec![(2, 4), (7, 9)],
        };
        answers.keep(0, "a0".into());
        answers.keep(1, "a1".into());
        let turn1 = SendBody {
            bytes: Bytes::from_static(br#"["r0"]"#),
            answers_at: vec![(2, 4)],
        };
        assert_eq!(&answers.body_for(1, &[0], turn1)[..], br#"["a0"]"#);
        assert_eq!(
            &answers.body_for(2, &[1, 0], body.clone())[..],
            br#"["a0","a1"]"#
        );
        assert_eq!(answers.resent.load(Ordering::Relaxed), 3);
        // turn 2 ended the session: the answers are gone, a resend goes as recorded
        assert_eq!(&answers.body_for(2, &[1, 0], body)[..], br#"["r0","r1"]"#);
        assert_eq!(answers.recorded.load(Ordering::Relaxed), 2);
        let plain = SendBody::from(Bytes::from_static(b"{}"));
        assert_eq!(&answers.body_for(0, &[], plain)[..], b"{}");
    }
}
