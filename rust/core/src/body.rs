//! Request bodies as a replay sends them, made without a round trip through a JSON object.
//!
//! A replay sends each stored body with its settings applied at the top level (Python's
//! `replay.plan._rewrite_body`): `model` replaced, `stream` on, `stream_options.include_usage`
//! (chat and completions) and `max_tokens` (or a Responses request's `max_output_tokens`), and
//! `ignore_eos`; an embeddings body gets only the model. Python does it by parsing the body and
//! writing it again with `replay.bodies.body_json` (compact separators, non-ASCII as it is), which
//! costs about 100 µs for a 13 KB chat body: more than the rest of a send.
//!
//! [`rewrite`] does the same on the text: it splits the stored object into its top-level members
//! and sets, replaces or drops members as Python's dict would (a replaced member keeps its place,
//! a new one goes last), copying every other byte. That equals Python's answer exactly when the
//! stored text is what `body_json` writes for its own parsed value, which is how traces store
//! bodies; [`rewrite`] checks that as it scans (no whitespace between tokens; strings escaped as
//! CPython escapes them; numbers as CPython writes them back; no repeated key in any object) and
//! answers [`NotCanonical`] otherwise, for the caller to take Python's path for that body.
//! [`synthesized`] writes a token-only row's synthesized body (`replay.synth.Synthesizer.body`)
//! as `body_json` writes it.

use std::borrow::Cow;

/// The API a request is sent to, in the order of `replay.plan.API_PATHS` (its path index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completions,
    Responses,
    Embeddings,
}

impl Api {
    /// From the plan's path index (`replay.plan.API_PATHS` order).
    pub fn from_index(i: u8) -> Option<Api> {
        match i {
            0 => Some(Api::Chat),
            1 => Some(Api::Completions),
            2 => Some(Api::Responses),
            3 => Some(Api::Embeddings),
            _ => None,
        }
    }
}

/// What a replay sets in each body it sends.
#[derive(Debug, Clone, Copy)]
pub struct SendSettings<'a> {
    pub api: Api,
    /// replaces the body's model name (None: kept)
    pub model: Option<&'a str>,
    /// the `max_tokens` sent (None: the body's own, if any)
    pub max_tokens: Option<i64>,
    pub ignore_eos: bool,
}

/// The stored text is not what `body_json` writes for it (or not a JSON object at all): the
/// caller rewrites that body the slow way, which also reports what is wrong with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotCanonical {
    /// byte offset where the scan stopped
    pub at: usize,
}

/// Append `s` as a JSON string the way CPython's `json.dumps(..., ensure_ascii=False)` writes it:
/// `"` and `\` escaped, the control characters as `\n`, `\r`, `\t`, `\b`, `\f` or `\u00xx`,
/// every other character as it is.
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(k) = special(&bytes[start..]) {
        let i = start + k;
        out.extend_from_slice(&bytes[start..i]);
        let b = bytes[i];
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xf) as usize]);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Where the first byte of `bytes` that a JSON string cannot hold as it is sits: a `"`, a `\`
/// or a control character. Eight bytes at a time (SWAR): a body's text is mostly long runs of
/// plain characters between such bytes.
fn special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let x = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        let quote = x ^ (ONES * b'"' as u64);
        let slash = x ^ (ONES * b'\\' as u64);
        // a byte under 0x20, or equal to either (a zero byte of `quote` or `slash`); the lowest
        // flagged byte is exact (a borrow only flags bytes above a true one)
        let hits = ((x.wrapping_sub(ONES * 0x20) & !x)
            | (quote.wrapping_sub(ONES) & !quote)
            | (slash.wrapping_sub(ONES) & !slash))
            & HIGH;
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|k| at + k)
}

/// A JSON object's members in order: each key's text between its quotes (as escaped) and its
/// value's text.
type Members<'a> = Vec<(&'a [u8], Cow<'a, [u8]>)>;

fn set(members: &mut Members<'_>, key: &'static [u8], value: Vec<u8>) {
    match members.iter_mut().find(|(k, _)| *k == key) {
        Some(m) => m.1 = Cow::Owned(value),
        None => members.push((key, Cow::Owned(value))),
    }
}

/// Python's `_rewrite_body` on the members of a body.
fn apply(members: &mut Members<'_>, s: &SendSettings<'_>) {
    if let Some(model) = s.model {
        let mut v = Vec::with_capacity(model.len() + 2);
        write_json_str(&mut v, model);
        set(members, b"model", v);
    }
    if s.api == Api::Embeddings {
        return;
    }
    set(members, b"stream", b"true".to_vec());
    if s.api == Api::Responses {
        if let Some(mt) = s.max_tokens {
            set(members, b"max_output_tokens", mt.to_string().into_bytes());
        }
    } else {
        set(
            members,
            b"stream_options",
            b"{\"include_usage\":true}".to_vec(),
        );
        if let Some(mt) = s.max_tokens {
            set(members, b"max_tokens", mt.to_string().into_bytes());
            members.retain(|(k, _)| *k != b"max_completion_tokens");
        }
    }
    if s.max_tokens.is_some() && s.ignore_eos {
        set(members, b"ignore_eos", b"true".to_vec());
    }
}

/// A body as sent, not written yet: its top-level members (most of them borrowed from the
/// stored text), so that a window of bodies can be sized before one buffer is filled.
#[derive(Debug, Clone)]
pub struct Body<'a> {
    members: Members<'a>,
}

impl Body<'_> {
    /// Its length in bytes as written.
    pub fn len(&self) -> usize {
        let inner: usize = self
            .members
            .iter()
            .map(|(k, v)| k.len() + v.len() + 3)
            .sum();
        2 + inner + self.members.len().saturating_sub(1)
    }

    /// Never: a body is at least `{}`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Write it at the start of `out` (at least [`Body::len`] bytes); the bytes written.
    pub fn write_into(&self, out: &mut [u8]) -> usize {
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(b"{");
        for (i, (k, v)) in self.members.iter().enumerate() {
            if i > 0 {
                put(b",");
            }
            put(b"\"");
            put(k);
            put(b"\":");
            put(v);
        }
        put(b"}");
        at
    }

    /// Append it to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let from = out.len();
        out.resize(from + self.len(), 0);
        self.write_into(&mut out[from..]);
    }
}

/// `stored` (a body as a trace stores it) with `settings` applied, as
/// `body_json(_rewrite_body(...))` writes it; [`NotCanonical`] when the text is not exactly what
/// `body_json` writes for its own value, or not an object.
pub fn rewrite<'a>(
    stored: &'a [u8],
    settings: &SendSettings<'_>,
) -> Result<Body<'a>, NotCanonical> {
    let mut members = top_members(stored)?;
    apply(&mut members, settings);
    Ok(Body { members })
}

/// The body `replay.synth.Synthesizer.body(api, model, max_tokens, text)` builds, with
/// `settings` applied, as `body_json(_rewrite_body(...))` writes it.
pub fn synthesized(
    model: Option<&str>,
    max_tokens: Option<i64>,
    text: &str,
    settings: &SendSettings<'_>,
) -> Body<'static> {
    let mut members: Members<'static> = Vec::with_capacity(8);
    if let Some(m) = model {
        let mut v = Vec::with_capacity(m.len() + 2);
        write_json_str(&mut v, m);
        members.push((b"model", Cow::Owned(v)));
    }
    let mut t = Vec::with_capacity(text.len() + 40);
    match settings.api {
        Api::Chat => {
            t.extend_from_slice(b"[{\"role\":\"user\",\"content\":");
            write_json_str(&mut t, text);
            t.extend_from_slice(b"}]");
            members.push((b"messages", Cow::Owned(t)));
        }
        Api::Responses | Api::Embeddings => {
            write_json_str(&mut t, text);
            members.push((b"input", Cow::Owned(t)));
        }
        Api::Completions => {
            write_json_str(&mut t, text);
            members.push((b"prompt", Cow::Owned(t)));
        }
    }
    if let (Some(mt), false) = (max_tokens, settings.api == Api::Embeddings) {
        let key: &'static [u8] = if settings.api == Api::Responses {
            b"max_output_tokens"
        } else {
            b"max_tokens"
        };
        members.push((key, Cow::Owned(mt.to_string().into_bytes())));
    }
    apply(&mut members, settings);
    Body { members }
}

/// The top-level members of `text`, which must be one canonical JSON object (see the module).
fn top_members(text: &[u8]) -> Result<Members<'_>, NotCanonical> {
    let mut scan = Scan {
        text,
        at: 0,
        keys: Vec::new(),
    };
    let mut members: Members<'_> = Vec::with_capacity(16);
    if scan.peek() != Some(b'{') {
        return Err(scan.fail());
    }
    scan.at += 1;
    if scan.peek() == Some(b'}') {
        scan.at += 1;
    } else {
        loop {
            let key = scan.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                return Err(scan.fail());
            }
            scan.expect(b':')?;
            let from = scan.at;
            scan.value(0)?;
            members.push((key, Cow::Borrowed(&text[from..scan.at])));
            match scan.next() {
                Some(b',') => continue,
                Some(b'}') => break,
                _ => return Err(scan.fail()),
            }
        }
    }
    if scan.at != text.len() {
        return Err(scan.fail());
    }
    Ok(members)
}

/// Nesting deeper than this is left to Python.
const MAX_DEPTH: usize = 128;

struct Scan<'a> {
    text: &'a [u8],
    at: usize,
    /// keys of the objects open at each depth (reused), to find a repeated one
    keys: Vec<Vec<&'a [u8]>>,
}

impl<'a> Scan<'a> {
    fn fail(&self) -> NotCanonical {
        NotCanonical { at: self.at }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, want: u8) -> Result<(), NotCanonical> {
        match self.next() {
            Some(b) if b == want => Ok(()),
            _ => Err(self.fail()),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), NotCanonical> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.fail())
        }
    }

    /// A string as CPython writes one; its text between the quotes.
    fn string(&mut self) -> Result<&'a [u8], NotCanonical> {
        self.expect(b'"')?;
        let from = self.at;
        let text = self.text;
        loop {
            let Some(k) = special(&text[self.at..]) else {
                self.at = text.len();
                return Err(self.fail());
            };
            self.at += k;
            match text[self.at] {
                b'"' => {
                    self.at += 1;
                    return Ok(&text[from..self.at - 1]);
                }
                b'\\' => {
                    let esc = text.get(self.at + 1).copied();
                    match esc {
                        Some(b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f') => self.at += 2,
                        Some(b'u') => {
                            // only a control character without a short escape, in lower case
                            let hex = text.get(self.at + 2..self.at + 6).ok_or(self.fail())?;
                            let ok = hex[0] == b'0'
                                && hex[1] == b'0'
                                && matches!(hex[2], b'0' | b'1')
                                && matches!(hex[3], b'0'..=b'9' | b'a'..=b'f')
                                && !matches!(&hex[2..4], b"08" | b"09" | b"0a" | b"0c" | b"0d");
                            if !ok {
                                return Err(self.fail());
                            }
                            self.at += 6;
                        }
                        _ => return Err(self.fail()),
                    }
                }
                _ => return Err(self.fail()), // a raw control character
            }
        }
    }

    /// A number as CPython writes back what it parsed: an int (not `-0`), or a float whose
    /// `repr` is certainly the same text (fixed notation, at most 15 significant digits, no
    /// trailing zero but `.0`, the exponent `repr` writes without `e`).
    fn number(&mut self) -> Result<(), NotCanonical> {
        let text = self.text;
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let int_from = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let int = &text[int_from..self.at];
        if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
            return Err(self.fail());
        }
        match self.peek() {
            Some(b'.') => {}
            Some(b'e' | b'E') => return Err(self.fail()),
            _ => {
                if &text[start..self.at] == b"-0" {
                    return Err(self.fail());
                }
                return Ok(());
            }
        }
        self.at += 1;
        let frac_from = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let frac = &text[frac_from..self.at];
        if frac.is_empty()
            || matches!(self.peek(), Some(b'e' | b'E'))
            || (frac.len() > 1 && frac.last() == Some(&b'0'))
        {
            return Err(self.fail());
        }
        // significant digits, and where the first one sits (repr writes 1e-05 and 1e+16)
        let digits: Vec<u8> = int.iter().chain(frac).copied().collect();
        let Some(first) = digits.iter().position(|&d| d != b'0') else {
            return Ok(()); // 0.0 or -0.0
        };
        let last = digits.iter().rposition(|&d| d != b'0').unwrap_or(first);
        let exponent = int.len() as i64 - 1 - first as i64;
        if last - first + 1 > 15 || !(-4..16).contains(&exponent) {
            return Err(self.fail());
        }
        Ok(())
    }

    fn value(&mut self, depth: usize) -> Result<(), NotCanonical> {
        match self.peek() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.fail()),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), NotCanonical> {
        if depth > MAX_DEPTH {
            return Err(self.fail());
        }
        self.expect(b'{')?;
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        if self.keys.len() <= depth {
            self.keys.resize_with(depth + 1, Vec::new);
        }
        self.keys[depth].clear();
        loop {
            let key = self.string()?;
            if self.keys[depth].contains(&key) {
                return Err(self.fail()); // Python keeps one of them
            }
            self.keys[depth].push(key);
            self.expect(b':')?;
            self.value(depth)?;
            match self.next() {
                Some(b',') => continue,
                Some(b'}') => return Ok(()),
                _ => return Err(self.fail()),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), NotCanonical> {
        if depth > MAX_DEPTH {
            return Err(self.fail());
        }
        self.expect(b'[')?;
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.value(depth)?;
            match self.next() {
                Some(b',') => continue,
                Some(b']') => return Ok(()),
                _ => return Err(self.fail()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(body: &[u8]) -> String {
        String::from_utf8_lossy(body).into_owned()
    }

    fn chat(model: Option<&str>, max_tokens: Option<i64>, ignore_eos: bool) -> SendSettings<'_> {
        SendSettings {
            api: Api::Chat,
            model,
            max_tokens,
            ignore_eos,
        }
    }

    fn rewritten(stored: &str, s: &SendSettings<'_>) -> Result<String, NotCanonical> {
        let body = rewrite(stored.as_bytes(), s)?;
        let mut out = vec![b'x'; 3];
        body.write(&mut out);
        assert_eq!(
            out.len(),
            3 + body.len(),
            "its length is known before it is written"
        );
        Ok(show(&out[3..]))
    }

    #[test]
    fn members_are_replaced_in_place_added_last_and_dropped() {
        let stored = r#"{"model":"a","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9,"stream":false}"#;
        assert_eq!(
            rewritten(stored, &chat(Some("m"), Some(5), true)).unwrap(),
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"ignore_eos":true}"#
        );
        // no model given, no send limit: the model stays and max_completion_tokens too
        assert_eq!(
            rewritten(stored, &chat(None, None, true)).unwrap(),
            r#"{"model":"a","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9,"stream":true,"stream_options":{"include_usage":true}}"#
        );
        let responses = SendSettings {
            api: Api::Responses,
            model: Some("m"),
            max_tokens: Some(7),
            ignore_eos: false,
        };
        assert_eq!(
            rewritten(r#"{"input":"x"}"#, &responses).unwrap(),
            r#"{"input":"x","model":"m","stream":true,"max_output_tokens":7}"#
        );
        let embeddings = SendSettings {
            api: Api::Embeddings,
            ..responses
        };
        assert_eq!(
            rewritten(r#"{"input":"x","model":"a"}"#, &embeddings).unwrap(),
            r#"{"input":"x","model":"m"}"#
        );
        assert_eq!(
            rewritten("{}", &chat(None, None, false)).unwrap(),
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#
        );
    }

    #[test]
    fn canonical_text_is_taken() {
        for ok in [
            "{\"a\":\"\\\"\\\\\\n\\r\\t\\b\\f\\u0000\\u001f\\u000b\",\"b\":\"é☃😀\u{7f}\"}",
            r#"{"n":[0,-1,12,0.5,-0.5,1.0,-0.0,0.0,100.0,0.0001,0.1,123456789012345.0,2.25]}"#,
            r#"{"t":true,"f":false,"z":null,"o":{},"l":[],"d":{"a":1,"b":{"a":2}},"k":[{"a":1},{"a":2}]}"#,
            r#"{"x":"\\u00e9"}"#,
        ] {
            assert!(rewritten(ok, &chat(None, None, false)).is_ok(), "{ok}");
        }
    }

    #[test]
    fn text_python_would_write_otherwise_is_left_to_python() {
        for bad in [
            r#"{"a": 1}"#,
            r#" {"a":1}"#,
            r#"{"a":1} "#,
            r#"{"a":[1, 2]}"#,
            r#"{"a":"\u00e9"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\u000a"}"#,
            r#"{"a":"\/"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":1,"a":2}"#,
            r#"{"o":{"a":1,"a":2}}"#,
            r#"{"a":-0}"#,
            r#"{"a":01}"#,
            r#"{"a":1e5}"#,
            r#"{"a":1.50}"#,
            r#"{"a":0.00001}"#,
            r#"{"a":10000000000000000.0}"#,
            r#"{"a":0.1234567890123456}"#,
            r#"{"a":NaN}"#,
            r#"{"a":Infinity}"#,
            r#"{"a":1."#,
            r#"{"a":"x"#,
            r#"["a"]"#,
            r#""a""#,
            "",
            r#"{"a":1}{"#,
            r#"{"a":tru}"#,
        ] {
            assert!(rewritten(bad, &chat(None, None, false)).is_err(), "{bad}");
        }
        // repeated keys in different objects are fine (checked per object, at any depth)
        assert!(rewritten(r#"{"a":{"b":{"a":1}},"b":1}"#, &chat(None, None, false)).is_ok());
    }

    #[test]
    fn deep_nesting_is_left_to_python() {
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        assert!(rewritten(&deep, &chat(None, None, false)).is_err());
    }

    #[test]
    fn special_bytes_are_found_wherever_they_sit() {
        for len in 0..40 {
            let plain = vec![b'a'; len];
            assert_eq!(special(&plain), None);
            for at in 0..len {
                for b in [b'"', b'\\', 0u8, 0x1f, b'\n'] {
                    let mut text = plain.clone();
                    text[at] = b;
                    // a second one later, and bytes just above and below the bounds around it
                    if at + 2 < len {
                        text[at + 2] = b'"';
                    }
                    assert_eq!(special(&text), Some(at), "{len} {at} {b}");
                }
                let mut text = plain.clone();
                text[at] = 0x20;
                assert_eq!(special(&text), None);
                text[at] = 0x80;
                assert_eq!(special(&text), None);
                text[at] = 0xff;
                assert_eq!(special(&text), None);
            }
        }
    }

    #[test]
    fn strings_are_escaped_as_cpython_does() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\"b\\c\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}é/");
        assert_eq!(
            show(&out),
            r#""a\"b\\c\n\r\t\b\f\u0000\u001f"#.to_string() + "\u{7f}é/\""
        );
    }

    #[test]
    fn synthesized_bodies_match_the_python_shapes() {
        let mut out = Vec::new();
        let body = synthesized(
            None,
            Some(12),
            "hi \"there\"",
            &chat(Some("m"), Some(5), true),
        );
        body.write(&mut out);
        assert_eq!(out.len(), body.len());
        assert_eq!(
            show(&out),
            r#"{"messages":[{"role":"user","content":"hi \"there\""}],"max_tokens":5,"model":"m","stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}"#
        );
        out.clear();
        let completions = SendSettings {
            api: Api::Completions,
            model: None,
            max_tokens: None,
            ignore_eos: false,
        };
        synthesized(Some("a"), None, "x", &completions).write(&mut out);
        assert_eq!(
            show(&out),
            r#"{"model":"a","prompt":"x","stream":true,"stream_options":{"include_usage":true}}"#
        );
    }
}
