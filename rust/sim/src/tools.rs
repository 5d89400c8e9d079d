//! Tool calls out: which tools a request offers, whether the engine answers with calls, and what
//! the calls say.
//!
//! Owns `ToolRequest` (a request's `tools`, `tool_choice` and `parallel_tool_calls`),
//! `ToolPolicy` (the engine's seeded policy and its knobs), `ToolCall` (one call, its argument
//! text split into the pieces its tokens decode to), `CallTurn` (a tool answer's progress token by
//! token) and `arguments_for` (argument JSON for a parameter schema).
//!
//! The policy, deterministic per (seed, prompt token ids): `tool_choice: "none"` or no tools,
//! text; `"auto"` (or absent), a tool turn with probability `tool_call_probability`;
//! `"required"`, always a tool turn; a named function, exactly one call of it. A tool turn has
//! 1 + a geometric number of calls (mean `mean_parallel_tool_calls`, at most
//! `max_parallel_tool_calls`; 1 when `parallel_tool_calls` is false), each of a tool drawn
//! uniformly from the request's, with arguments of a lognormal size (median
//! `tool_argument_tokens`, log-sigma `ARGUMENT_SIGMA`) valid for the tool's parameter schema.
//! A call's tokens are its argument text's tokens under the engine's tokenizer plus
//! `CALL_OVERHEAD_TOKENS` (the model's wrapper around them: the call's markers and its name); the
//! engine generates that many tokens for the turn, so the decode work and the usage count them.

use std::collections::HashSet;

use serde_json::{json, Map, Number, Value};

use crate::config::EngineConfig;
use crate::error::SimError;
use crate::kv::mix;
use crate::request::ApiError;
use crate::textgen::{lognormal, prompt_hash, unit};
use crate::vocab::Vocab;

/// Tokens a call costs besides its argument text: a Hermes-style model (Qwen2.5) writes
/// `<tool_call>\n{"name": NAME, "arguments": ` before the arguments and `}\n</tool_call>` after,
/// 14-16 tokens under Qwen2's tokenizer with the two markers as single tokens, for names of 4-17
/// characters.
pub const CALL_OVERHEAD_TOKENS: usize = 15;
/// Log-space sigma of the argument size.
pub const ARGUMENT_SIGMA: f64 = 1.0;
/// Nesting depth past which a schema's value is left empty (recursive `$ref`s).
const MAX_DEPTH: u32 = 8;

const TURN_DOMAIN: u64 = 0x7001_CA11;
const FOLLOW_DOMAIN: u64 = 0x7001_F011;

/// The request header by which a replay asks for the answer its Trace recorded (the Trace's
/// `tool_calls` column): the argument tokens of each tool call, comma-separated (`40,25,10`);
/// empty: the answer was text. Other servers ignore it.
pub const REPLAY_TOOL_CALLS_HEADER: &str = "x-replay-tool-calls";
/// Most calls the header may ask for.
pub const MAX_REPLAY_TOOL_CALLS: usize = 128;

/// The header's value: each call's argument tokens (empty: a text answer). An error says what
/// is wrong with it.
pub fn parse_replay_tool_calls(value: &[u8]) -> Result<Vec<u32>, ApiError> {
    let bad = |what: String| {
        ApiError::bad_request(format!(
            "header {REPLAY_TOOL_CALLS_HEADER}: {what} (expected comma-separated argument token counts, e.g. '40,25'; empty for a text answer)"
        ))
    };
    let text = std::str::from_utf8(value).map_err(|_| bad("not ASCII".into()))?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let sizes = text
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .map_err(|_| bad(format!("'{}' is not a token count", p.trim())))
        })
        .collect::<Result<Vec<u32>, ApiError>>()?;
    if sizes.len() > MAX_REPLAY_TOOL_CALLS {
        return Err(bad(format!(
            "{} calls, at most {MAX_REPLAY_TOOL_CALLS}",
            sizes.len()
        )));
    }
    Ok(sizes)
}

/// How a request lets the engine use its tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// One offered function tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    /// Its parameter JSON schema (`{}` when the tool gave none).
    pub parameters: Value,
}

/// A request's tools and what it allows.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

impl Default for ToolRequest {
    fn default() -> Self {
        ToolRequest {
            tools: Vec::new(),
            choice: ToolChoice::Auto,
            parallel: true,
        }
    }
}

impl ToolRequest {
    /// Read `tools`, `tool_choice` and `parallel_tool_calls` from a chat or Responses request
    /// (a chat tool is `{"type":"function","function":{"name",...}}`, a Responses one
    /// `{"type":"function","name",...}`; a named choice is either shape).
    pub fn parse(obj: &Map<String, Value>) -> Result<ToolRequest, ApiError> {
        let mut tools = Vec::new();
        match obj.get("tools") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, t) in list.iter().enumerate() {
                    let bad = |what: &str| {
                        ApiError::invalid(format!("tools.[{i}]"), format!("tools[{i}]: {what}"))
                    };
                    if t.get("type").and_then(Value::as_str) != Some("function") {
                        return Err(bad("only tools of type 'function' are supported"));
                    }
                    let f = t.get("function").unwrap_or(t);
                    let name = f
                        .get("name")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                        .ok_or_else(|| bad("a function tool needs a name"))?;
                    let parameters = match f.get("parameters") {
                        None | Some(Value::Null) => json!({}),
                        Some(p @ Value::Object(_)) => p.clone(),
                        Some(_) => return Err(bad("'parameters' must be a JSON schema object")),
                    };
                    tools.push(Tool {
                        name: name.to_string(),
                        parameters,
                    });
                }
            }
            Some(_) => return Err(ApiError::invalid("tools", "'tools' must be a list")),
        }
        let choice = match obj.get("tool_choice") {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        format!(
                            "tool_choice must be none, auto, required or a function, got '{other}'"
                        ),
                    ))
                }
            },
            Some(v) => {
                let name = v
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .or_else(|| v.get("name"))
                    .and_then(Value::as_str)
                    .filter(|_| v.get("type").and_then(Value::as_str) == Some("function"))
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "tool_choice",
                            "tool_choice must be none, auto, required or {\"type\": \"function\", ...} naming a function",
                        )
                    })?;
                if !tools.iter().any(|t| t.name == name) {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        format!("tool_choice names function '{name}', which is not in 'tools'"),
                    ));
                }
                ToolChoice::Named(name.to_string())
            }
        };
        if tools.is_empty() && matches!(choice, ToolChoice::Required) {
            return Err(ApiError::invalid(
                "tool_choice",
                "tool_choice 'required' needs 'tools'",
            ));
        }
        let parallel = match obj.get("parallel_tool_calls") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid(
                    "parallel_tool_calls",
                    "'parallel_tool_calls' must be a boolean",
                ))
            }
        };
        Ok(ToolRequest {
            tools,
            choice,
            parallel,
        })
    }
}

/// The engine's tool-call policy (module docs); its knobs are `EngineConfig`'s `tool_*` fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    pub probability: f64,
    pub max_parallel: u32,
    pub mean_parallel: f64,
    pub argument_tokens: u32,
}

impl ToolPolicy {
    /// The policy a config asks for; errors name the flag.
    pub fn from_config(c: &EngineConfig) -> Result<ToolPolicy, SimError> {
        if !(0.0..=1.0).contains(&c.tool_call_probability) {
            return Err(SimError::config(
                "--tool-call-probability",
                format!("must be in [0, 1], got {}", c.tool_call_probability),
            ));
        }
        if c.max_parallel_tool_calls < 1 {
            return Err(SimError::config(
                "--max-parallel-tool-calls",
                "must be >= 1",
            ));
        }
        let mean = c.mean_parallel_tool_calls;
        if !(mean >= 1.0 && mean <= c.max_parallel_tool_calls as f64) {
            return Err(SimError::config(
                "--mean-parallel-tool-calls",
                format!(
                    "must be in [1, --max-parallel-tool-calls ({})], got {mean}",
                    c.max_parallel_tool_calls
                ),
            ));
        }
        if c.tool_argument_tokens < 1 {
            return Err(SimError::config("--tool-argument-tokens", "must be >= 1"));
        }
        Ok(ToolPolicy {
            probability: c.tool_call_probability,
            max_parallel: c.max_parallel_tool_calls,
            mean_parallel: mean,
            argument_tokens: c.tool_argument_tokens,
        })
    }

    /// The calls the engine answers `prompt` with, or None for a text answer. `max_tokens`
    /// caps the arguments' drawn size so that the calls usually fit. A request with
    /// `ignore_eos` and `tool_choice` auto asks for exactly `max_tokens` tokens (a benchmark's
    /// or a replay's request): it gets text; only a forced choice makes it a tool turn.
    pub fn plan(
        &self,
        req: &ToolRequest,
        seed: u64,
        prompt: &[u32],
        max_tokens: u32,
        ignore_eos: bool,
        vocab: &Vocab,
    ) -> Option<Vec<ToolCall>> {
        let mut draws = Draws(prompt_hash(seed, TURN_DOMAIN, prompt));
        let tool_turn = match req.choice {
            ToolChoice::None => false,
            _ if req.tools.is_empty() => false,
            ToolChoice::Auto if ignore_eos => false,
            ToolChoice::Auto => draws.unit() < self.probability,
            ToolChoice::Required | ToolChoice::Named(_) => true,
        };
        if !tool_turn {
            return None;
        }
        let n = match &req.choice {
            ToolChoice::Named(_) => 1,
            _ if !req.parallel => 1,
            _ => self.parallel_count(draws.unit()),
        };
        let budget = (max_tokens as usize / n).saturating_sub(CALL_OVERHEAD_TOKENS);
        let calls = (0..n)
            .map(|_| {
                let tool = match &req.choice {
                    ToolChoice::Named(name) => req
                        .tools
                        .iter()
                        .find(|t| &t.name == name)
                        .expect("a named choice is one of the tools (ToolRequest::parse)"),
                    _ => &req.tools[(draws.next() % req.tools.len() as u64) as usize],
                };
                let drawn =
                    lognormal(draws.next(), self.argument_tokens as f64, ARGUMENT_SIGMA).round();
                let size = (drawn.max(1.0) as usize).min(budget.max(1));
                let arguments = arguments_for(&tool.parameters, draws.next(), size, vocab);
                ToolCall::new(call_id(draws.next()), &tool.name, &arguments, vocab)
            })
            .collect();
        Some(calls)
    }

    /// The calls of a replayed answer (`REPLAY_TOOL_CALLS_HEADER`): one per entry of
    /// `argument_tokens`, with arguments of that many tokens (as near as the tool's schema
    /// allows: `arguments_for`), each of a tool drawn from the request's (the named one where
    /// `tool_choice` names one). The recorded answer wins over the policy, `tool_choice` auto
    /// with `ignore_eos` and `parallel_tool_calls`; None (text) when the recorded answer was text,
    /// the request offers no tools or its `tool_choice` is none.
    pub fn follow(
        req: &ToolRequest,
        argument_tokens: &[u32],
        seed: u64,
        prompt: &[u32],
        vocab: &Vocab,
    ) -> Option<Vec<ToolCall>> {
        if argument_tokens.is_empty() || req.tools.is_empty() || req.choice == ToolChoice::None {
            return None;
        }
        let mut draws = Draws(prompt_hash(seed, FOLLOW_DOMAIN, prompt));
        let calls = argument_tokens
            .iter()
            .map(|&size| {
                let tool = match &req.choice {
                    ToolChoice::Named(name) => req
                        .tools
                        .iter()
                        .find(|t| &t.name == name)
                        .expect("a named choice is one of the tools (ToolRequest::parse)"),
                    _ => &req.tools[(draws.next() % req.tools.len() as u64) as usize],
                };
                let arguments = arguments_for(&tool.parameters, draws.next(), size as usize, vocab);
                ToolCall::new(call_id(draws.next()), &tool.name, &arguments, vocab)
            })
            .collect();
        Some(calls)
    }

    /// 1 + a geometric count with mean `mean_parallel`, at most `max_parallel`, from `u` in [0, 1).
    fn parallel_count(&self, u: f64) -> usize {
        let stay = 1.0 - 1.0 / self.mean_parallel; // chance of one more call
        let extra = if stay <= 0.0 {
            0.0
        } else {
            ((1.0 - u).ln() / stay.ln()).floor()
        };
        (1.0 + extra).min(self.max_parallel as f64) as usize
    }
}

/// `call_` and 24 hex digits, as OpenAI's ids look.
fn call_id(h: u64) -> String {
    format!("call_{:016x}{:08x}", mix(h), mix(!h) as u32)
}

/// One tool call: its id, the tool's name, and its argument text as the pieces its tokens decode
/// to (one piece per token: `pieces.concat()` is the argument text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub pieces: Vec<String>,
}

impl ToolCall {
    pub fn new(id: String, name: &str, arguments: &str, vocab: &Vocab) -> ToolCall {
        let mut pending = Vec::new();
        let pieces = vocab
            .encode(arguments)
            .iter()
            .map(|&t| {
                let mut piece = String::new();
                vocab.decode_into(&[t], &mut pending, &mut piece);
                piece
            })
            .collect();
        ToolCall {
            id,
            name: name.to_string(),
            pieces,
        }
    }

    pub fn arguments(&self) -> String {
        self.pieces.concat()
    }

    /// Tokens the model generates for this call.
    pub fn tokens(&self) -> usize {
        CALL_OVERHEAD_TOKENS + self.pieces.len()
    }

    /// The Responses API's item id of the call at `index` of response `response_id`.
    pub fn item_id(response_id: &str, index: usize) -> String {
        format!("fc_{}_{index}", response_id.trim_start_matches("resp_"))
    }
}

/// What the tokens of one engine step said, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEvent {
    /// Call `index` begins (its id and name are known).
    Start(usize),
    /// More argument text of call `index`.
    Arguments(usize, String),
    /// Call `index` is complete.
    Done(usize),
}

/// A tool answer being generated: how much of its text lead is left, which call the next token
/// belongs to, and how far into it. The answer's first `text` tokens are text content (a
/// replayed answer of an exact length: `text_before_calls`), then each call's first
/// `CALL_OVERHEAD_TOKENS` tokens start it, its argument tokens follow.
#[derive(Debug, Clone)]
pub struct CallTurn {
    pub calls: Vec<ToolCall>,
    /// Text tokens before the calls, and how many of them are still to come.
    pub lead: usize,
    text: usize,
    call: usize,
    pos: usize,
}

/// The text tokens a replayed answer of exactly `max_tokens` tokens carries before its `calls`
/// (what the calls' tokens leave of `max_tokens`; none when they do not fit), so that the
/// answer's tokens are `max_tokens` whenever the calls fit.
pub fn text_before_calls(max_tokens: u32, calls: &[ToolCall]) -> usize {
    let calls: usize = calls.iter().map(ToolCall::tokens).sum();
    (max_tokens as usize).saturating_sub(calls)
}

impl CallTurn {
    pub fn new(calls: Vec<ToolCall>) -> CallTurn {
        CallTurn::with_text(0, calls)
    }

    /// An answer of `text` tokens of text content, then `calls`.
    pub fn with_text(text: usize, calls: Vec<ToolCall>) -> CallTurn {
        CallTurn {
            calls,
            lead: text,
            text,
            call: 0,
            pos: 0,
        }
    }

    /// Tokens of the whole answer (text and calls).
    pub fn tokens(&self) -> usize {
        self.lead + self.calls.iter().map(ToolCall::tokens).sum::<usize>()
    }

    /// Whether the text and every call were generated.
    pub fn complete(&self) -> bool {
        self.text == 0 && self.call == self.calls.len()
    }

    /// Take up to `n` generated tokens as text content; how many were (the rest are the calls':
    /// `advance`).
    pub fn take_text(&mut self, n: usize) -> usize {
        let k = n.min(self.text);
        self.text -= k;
        k
    }

    /// Take `n` more generated tokens; the events they make, argument pieces of one call in a
    /// row joined into one event.
    pub fn advance(&mut self, n: usize) -> Vec<CallEvent> {
        let mut events: Vec<CallEvent> = Vec::new();
        for _ in 0..n {
            let Some(call) = self.calls.get(self.call) else {
                break;
            };
            if self.pos == 0 {
                events.push(CallEvent::Start(self.call));
            }
            if let Some(piece) = self.pos.checked_sub(CALL_OVERHEAD_TOKENS) {
                let piece = &call.pieces[piece];
                match events.last_mut() {
                    Some(CallEvent::Arguments(i, text)) if *i == self.call => text.push_str(piece),
                    _ => events.push(CallEvent::Arguments(self.call, piece.clone())),
                }
            }
            self.pos += 1;
            if self.pos == call.tokens() {
                events.push(CallEvent::Done(self.call));
                self.call += 1;
                self.pos = 0;
            }
        }
        events
    }

    /// The calls as generated so far: the started ones, the last cut where generation stopped.
    pub fn generated(&self) -> Vec<ToolCall> {
        let mut calls = self.calls[..self.call].to_vec();
        if self.pos > 0 {
            let mut last = self.calls[self.call].clone();
            last.pieces
                .truncate(self.pos.saturating_sub(CALL_OVERHEAD_TOKENS));
            calls.push(last);
        }
        calls
    }
}

/// A counter-based random stream.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }

    fn unit(&mut self) -> f64 {
        unit(self.next())
    }
}

/// Argument JSON for a parameter `schema`, of `tokens` tokens where the schema allows it: every
/// required property, each optional one with probability 1/2, values of the schema's types
/// (`string`, `number`, `integer` within `minimum`/`maximum`, `boolean`, `array` within
/// `minItems`/`maxItems`, `object`, `null`, `enum`, `const`, the first of `anyOf`/`oneOf`/`allOf`,
/// local `$ref`s); string values are filled with common words until the text is `tokens` long
/// (the first string without a length cap takes the last few words or gives them up). A schema
/// without such a string, or whose smallest value is longer, gets that value.
pub fn arguments_for(schema: &Value, seed: u64, tokens: usize, vocab: &Vocab) -> String {
    let words: Vec<&str> = vocab
        .lexicon
        .words()
        .iter()
        .filter_map(|&w| vocab.text(w))
        .map(str::trim)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    let words = if words.is_empty() { vec!["x"] } else { words };
    // the same structure (its own draws) with `per_string` words in each string, `extra` more
    // (or fewer) in the first, the words drawn by `salt`
    let build = |per_string: usize, extra: isize, salt: u64| {
        let mut fill = Fill {
            words: &words,
            per_string,
            extra,
            draws: Draws(mix(seed ^ 0x57 ^ salt.wrapping_mul(0x9E37_79B9))),
            strings: 0,
        };
        let text = fill.value(schema, schema, &mut Draws(seed), 0).to_string();
        (text, fill.strings)
    };
    // first with one word per string, to learn the structure's size and its strings ...
    let (text, strings) = build(1, 0, 0);
    let used = vocab.encode(&text).len();
    if strings == 0 || used >= tokens {
        return text;
    }
    // ... then the words left shared among them (a word ~ a token) ...
    let per_string = 1 + (tokens - used) / strings;
    let (mut extra, mut salt) = (0isize, 0u64);
    let mut best = (usize::MAX, String::new());
    // ... and the first string's words moved until the count is exact (a word that merges with
    // its neighbour can make it swing by two: then other words are drawn)
    let mut tried = HashSet::new();
    for _ in 0..EXACT_ROUNDS {
        let text = build(per_string, extra, salt).0;
        let got = vocab.encode(&text).len();
        if got.abs_diff(tokens) < best.0 {
            best = (got.abs_diff(tokens), text);
        }
        if got == tokens {
            break;
        }
        let next = (extra + tokens as isize - got as isize).max(1 - per_string as isize);
        if !tried.insert((next, salt)) {
            salt += 1;
        }
        extra = next;
    }
    best.1
}

/// Rounds of `arguments_for`'s last step (moving words to hit the size).
const EXACT_ROUNDS: usize = 12;

/// The leaves' content: words for strings, counted.
struct Fill<'a> {
    words: &'a [&'a str],
    per_string: usize,
    /// Words added to (or taken from) the first string without a length cap.
    extra: isize,
    draws: Draws,
    strings: usize,
}

impl Fill<'_> {
    /// Words for a string; one (cut to `max_len`) for a string with a length cap, which is not
    /// counted among those that share the size.
    fn string(&mut self, max_len: Option<u64>) -> Value {
        let words = match max_len {
            Some(_) => 1,
            None if self.strings == 0 => (self.per_string as isize + self.extra).max(1) as usize,
            None => self.per_string,
        };
        self.strings += usize::from(max_len.is_none());
        let mut s = String::new();
        for k in 0..words {
            if k > 0 {
                s.push(' ');
            }
            let w = self.words[(self.draws.next() % self.words.len() as u64) as usize];
            s.push_str(w);
        }
        if let Some(max) = max_len {
            s.truncate(max as usize);
        }
        Value::String(s)
    }

    /// A value of `schema`; `draws` decides the structure (the same in both passes).
    fn value(&mut self, schema: &Value, root: &Value, draws: &mut Draws, depth: u32) -> Value {
        let Value::Object(s) = schema else {
            return if schema == &Value::Bool(false) {
                Value::Null
            } else {
                self.string(None)
            };
        };
        if depth > MAX_DEPTH {
            return Value::Null;
        }
        if let Some(Value::String(r)) = s.get("$ref") {
            return match r.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => self.value(target, root, draws, depth + 1),
                None => self.string(None),
            };
        }
        if let Some(c) = s.get("const") {
            return c.clone();
        }
        if let Some(Value::Array(options)) = s.get("enum") {
            if !options.is_empty() {
                return options[(draws.next() % options.len() as u64) as usize].clone();
            }
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(options)) = s.get(key) {
                let pick = options
                    .iter()
                    .find(|o| o.get("type").and_then(Value::as_str) != Some("null"))
                    .or(options.first());
                if let Some(o) = pick {
                    return self.value(o, root, draws, depth + 1);
                }
            }
        }
        let kind = match s.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .or_else(|| ts.iter().find_map(Value::as_str))
                .unwrap_or("string"),
            _ if s.contains_key("properties") => "object",
            _ if s.contains_key("items") => "array",
            _ if schema == root => "object",
            _ => "string",
        };
        let num = |key: &str| s.get(key).and_then(Value::as_f64);
        match kind {
            "object" => {
                let required: HashSet<&str> = s
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut out = Map::new();
                if let Some(Value::Object(props)) = s.get("properties") {
                    for (name, prop) in props {
                        let keep = required.contains(name.as_str()) || draws.next() >> 63 == 0;
                        if keep {
                            out.insert(name.clone(), self.value(prop, root, draws, depth + 1));
                        }
                    }
                }
                Value::Object(out)
            }
            "array" => {
                let min = num("minItems").unwrap_or(0.0) as u64;
                let max = num("maxItems").map_or(u64::MAX, |m| m as u64);
                let n = (1 + draws.next() % 3).max(min).min(max);
                let items = s.get("items").cloned().unwrap_or(json!({"type": "string"}));
                Value::Array(
                    (0..n)
                        .map(|_| self.value(&items, root, draws, depth + 1))
                        .collect(),
                )
            }
            "integer" | "number" => {
                let lo = num("minimum")
                    .or(num("exclusiveMinimum").map(|x| x + 1.0))
                    .unwrap_or(0.0);
                let hi = num("maximum")
                    .or(num("exclusiveMaximum").map(|x| x - 1.0))
                    .unwrap_or(lo.max(0.0) + 100.0)
                    .max(lo);
                let x = lo + (hi - lo) * draws.unit();
                if kind == "integer" {
                    json!(x.floor().clamp(lo.ceil(), hi.floor().max(lo.ceil())) as i64)
                } else {
                    let x = (x * 100.0).floor() / 100.0;
                    Number::from_f64(x.clamp(lo, hi)).map_or(json!(0), Value::Number)
                }
            }
            "boolean" => Value::Bool(draws.next() >> 63 == 1),
            "null" => Value::Null,
            _ => self.string(num("maxLength").map(|m| m as u64)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::tiny_vocab;

    fn policy() -> ToolPolicy {
        ToolPolicy::from_config(&EngineConfig::default()).unwrap()
    }

    fn request(body: Value) -> Result<ToolRequest, ApiError> {
        ToolRequest::parse(body.as_object().unwrap())
    }

    /// Whether `v` is valid for `schema`, for the keywords `arguments_for` honours.
    fn valid(v: &Value, schema: &Value, root: &Value) -> bool {
        let s = schema.as_object().unwrap();
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            return valid(v, root.pointer(&r[1..]).unwrap(), root);
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            return e.contains(v);
        }
        if let Some(o) = s.get("anyOf").and_then(Value::as_array) {
            return o.iter().any(|o| valid(v, o, root));
        }
        let t = match s.get("type") {
            Some(Value::Array(ts)) => {
                return ts.iter().any(|t| {
                    let mut one = s.clone();
                    one.insert("type".into(), t.clone());
                    valid(v, &Value::Object(one), root)
                })
            }
            Some(t) => t.as_str().unwrap(),
            None => "object",
        };
        let n = |k: &str| s.get(k).and_then(Value::as_f64);
        match (t, v) {
            ("object", Value::Object(o)) => {
                let props = s.get("properties").and_then(Value::as_object);
                let required = s.get("required").and_then(Value::as_array);
                required
                    .into_iter()
                    .flatten()
                    .all(|r| o.contains_key(r.as_str().unwrap()))
                    && o.iter().all(|(k, x)| valid(x, &props.unwrap()[k], root))
            }
            ("array", Value::Array(a)) => {
                a.len() as f64 >= n("minItems").unwrap_or(0.0)
                    && a.len() as f64 <= n("maxItems").unwrap_or(f64::MAX)
                    && a.iter().all(|x| valid(x, &s["items"], root))
            }
            ("integer", Value::Number(x)) if x.is_i64() => {
                let x = x.as_f64().unwrap();
                x >= n("minimum").unwrap_or(f64::MIN) && x <= n("maximum").unwrap_or(f64::MAX)
            }
            ("number", Value::Number(x)) => {
                let x = x.as_f64().unwrap();
                x >= n("minimum").unwrap_or(f64::MIN) && x <= n("maximum").unwrap_or(f64::MAX)
            }
            ("string", Value::String(x)) => x.len() as f64 <= n("maxLength").unwrap_or(f64::MAX),
            ("boolean", Value::Bool(_)) | ("null", Value::Null) => true,
            _ => false,
        }
    }

    fn schemas() -> Vec<Value> {
        vec![
            json!({}),
            json!({"type": "object", "properties": {}}),
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "line": {"type": "integer", "minimum": 1, "maximum": 9},
                "ratio": {"type": "number", "minimum": -1.5, "maximum": 1.5},
                "force": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["read", "write"]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 2, "maxItems": 4},
                "note": {"type": ["string", "null"]},
                "where": {"type": "object", "properties": {
                    "city": {"type": "string"}, "zip": {"type": "integer"}
                }, "required": ["city", "zip"]},
            }, "required": ["path", "line", "ratio", "force", "mode", "tags", "where"]}),
            // pydantic-style: $defs, $ref and anyOf with null
            json!({"$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
                   "type": "object", "properties": {
                       "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
                       "label": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                   "required": ["points", "label"]}),
        ]
    }

    #[test]
    fn arguments_are_valid_json_for_their_schema() {
        let v = tiny_vocab();
        for schema in schemas() {
            for seed in 0..40 {
                let text = arguments_for(&schema, seed, 30, &v);
                let got: Value = serde_json::from_str(&text).unwrap();
                assert!(got.is_object(), "{schema}: {text}");
                assert!(valid(&got, &schema, &schema), "{schema}: {text}");
            }
        }
    }

    fn size_of_shell(v: &Vocab, tokens: usize) -> usize {
        let shell = json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]});
        v.encode(&arguments_for(&shell, 3, tokens, v)).len()
    }

    #[test]
    fn argument_size_follows_the_target_and_seeds_repeat() {
        let v = tiny_vocab();
        let shell = json!({"type": "object", "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}}, "required": ["command"]});
        for schema in [&shell, &schemas()[2]] {
            let size = |tokens| v.encode(&arguments_for(schema, 7, tokens, &v)).len();
            let skeleton = size(1);
            for target in [skeleton + 20, skeleton + 400] {
                let got = size(target);
                assert!(
                    got as f64 >= 0.8 * target as f64 && got as f64 <= 1.2 * target as f64,
                    "{schema}: {target} -> {got}"
                );
            }
            assert_eq!(
                arguments_for(schema, 7, 50, &v),
                arguments_for(schema, 7, 50, &v)
            );
            assert_ne!(
                arguments_for(schema, 7, 50, &v),
                arguments_for(schema, 8, 50, &v)
            );
        }
        assert!(size_of_shell(&v, 30) <= 40, "{}", size_of_shell(&v, 30));
    }

    #[test]
    fn tool_choice_decides_and_parallel_count_follows_its_knobs() {
        let v = tiny_vocab();
        let tools = json!([
            {"type": "function", "function": {"name": "read", "parameters": schemas()[2]}},
            {"type": "function", "function": {"name": "grep"}},
        ]);
        let plan = |choice: Value, parallel: bool, p: &ToolPolicy, prompt: &[u32]| {
            let r = request(
                json!({"tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel}),
            )
            .unwrap();
            p.plan(&r, 0, prompt, 4096, false, &v)
        };
        let mut p = policy();
        let prompts: Vec<Vec<u32>> = (0..300u32).map(|i| vec![i, i + 1, 7]).collect();
        assert!(prompts
            .iter()
            .all(|q| plan(json!("none"), true, &p, q).is_none()));
        let mut counts = Vec::new();
        for q in &prompts {
            let calls = plan(json!("required"), true, &p, q).unwrap();
            assert!((1..=p.max_parallel as usize).contains(&calls.len()));
            for c in &calls {
                assert!(["read", "grep"].contains(&c.name.as_str()));
                assert!(c.id.starts_with("call_") && c.id.len() == 29);
                serde_json::from_str::<Value>(&c.arguments()).unwrap();
            }
            let ids: HashSet<&String> = calls.iter().map(|c| &c.id).collect();
            assert_eq!(ids.len(), calls.len());
            counts.push(calls.len());
            assert_eq!(plan(json!("required"), false, &p, q).unwrap().len(), 1);
            let named = plan(
                json!({"type": "function", "function": {"name": "grep"}}),
                true,
                &p,
                q,
            )
            .unwrap();
            assert_eq!((named.len(), named[0].name.as_str()), (1, "grep"));
            assert_eq!(
                plan(json!("required"), true, &p, q),
                plan(json!("required"), true, &p, q)
            );
        }
        let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
        assert!((mean - p.mean_parallel).abs() < 0.25, "{mean}");
        assert!(counts.iter().any(|&n| n > 1) && counts.contains(&1));
        p.mean_parallel = 1.0;
        assert!(prompts
            .iter()
            .all(|q| plan(json!("required"), true, &p, q).unwrap().len() == 1));
        // auto: a tool turn with the policy's probability
        let turns = |p: &ToolPolicy| {
            prompts
                .iter()
                .filter(|q| plan(json!("auto"), true, p, q).is_some())
                .count()
        };
        p.probability = 0.0;
        assert_eq!(turns(&p), 0);
        p.probability = 1.0;
        assert_eq!(turns(&p), prompts.len());
        p.probability = 0.5;
        assert!((100..200).contains(&turns(&p)), "{}", turns(&p));
    }

    #[test]
    fn a_replayed_answer_has_the_recorded_calls_and_sizes() {
        let v = tiny_vocab();
        let shell = json!({"type": "object", "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}}, "required": ["command"]});
        let r = request(json!({"tools": [
            {"type": "function", "function": {"name": "read", "parameters": schemas()[2]}},
            {"type": "function", "function": {"name": "shell", "parameters": shell}},
        ], "tool_choice": "auto", "parallel_tool_calls": false}))
        .unwrap();
        let shell_only = request(json!({"tools": [{"type": "function", "function": {"name": "shell", "parameters": shell}}]})).unwrap();
        // sizes above each schema's smallest value (about 130 and 16-30 tokens under this vocab)
        let cases = [
            (&r, [160u32, 200, 240, 300, 190]),
            (&shell_only, [40, 45, 60, 50, 90]),
        ];
        let (mut exact, mut all) = (0, 0);
        for (q, (r, sizes)) in (0..30u32).flat_map(|q| cases.iter().map(move |c| (q, c))) {
            let prompt = [q, 5, 9];
            let calls = ToolPolicy::follow(r, sizes, 0, &prompt, &v).unwrap();
            // every call, whatever parallel_tool_calls says, of its recorded size
            assert_eq!(calls.len(), sizes.len());
            for (c, &size) in calls.iter().zip(sizes) {
                let args: Value = serde_json::from_str(&c.arguments()).unwrap();
                let schema = &r
                    .tools
                    .iter()
                    .find(|t| t.name == c.name)
                    .unwrap()
                    .parameters;
                assert!(valid(&args, schema, schema), "{}", c.arguments());
                // exact but where a word merges with its neighbours (this test vocabulary
                // has such words: then off by one)
                assert!(
                    c.pieces.len().abs_diff(size as usize) <= 1,
                    "{size}: {}",
                    c.arguments()
                );
                assert_eq!(c.tokens(), c.pieces.len() + CALL_OVERHEAD_TOKENS);
                exact += usize::from(c.pieces.len() == size as usize);
                all += 1;
            }
            assert_eq!(ToolPolicy::follow(r, sizes, 0, &prompt, &v), Some(calls));
        }
        assert!(exact * 10 >= all * 9, "{exact} of {all} exact");
        // a text answer recorded, tool_choice none, no tools: text
        assert_eq!(ToolPolicy::follow(&r, &[], 0, &[1], &v), None);
        let none =
            request(json!({"tools": [{"type": "function", "name": "a"}], "tool_choice": "none"}))
                .unwrap();
        assert_eq!(ToolPolicy::follow(&none, &[10], 0, &[1], &v), None);
        assert_eq!(
            ToolPolicy::follow(&request(json!({})).unwrap(), &[10], 0, &[1], &v),
            None
        );
        // a named choice: every call is of it
        let named = request(
            json!({"tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "b"}],
                                   "tool_choice": {"type": "function", "name": "b"}}),
        )
        .unwrap();
        let calls = ToolPolicy::follow(&named, &[5, 8], 0, &[1], &v).unwrap();
        assert!(calls.iter().all(|c| c.name == "b"));
        // a schema whose smallest value is longer than asked gets that value
        let rigid = json!({"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["n", "ok"]});
        let text = arguments_for(&rigid, 1, 1, &v);
        assert!(v.encode(&text).len() > 1, "{text}");
    }

    #[test]
    fn the_replay_header_reads_counts_and_names_what_is_wrong() {
        assert_eq!(parse_replay_tool_calls(b"40,25, 10").unwrap(), [40, 25, 10]);
        assert_eq!(parse_replay_tool_calls(b"").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_replay_tool_calls(b" 7 ").unwrap(), [7]);
        for (bad, says) in [
            (&b"40,x"[..], "'x' is not a token count"),
            (b"40,,2", "'' is not a token count"),
            (b"-3", "'-3' is not a token count"),
        ] {
            let e = parse_replay_tool_calls(bad).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(
                e.message.starts_with("header x-replay-tool-calls: "),
                "{}",
                e.message
            );
            assert!(e.message.contains(says), "{}", e.message);
        }
        let many = vec!["1"; MAX_REPLAY_TOOL_CALLS + 1].join(",");
        assert!(parse_replay_tool_calls(many.as_bytes()).is_err());
    }

    #[test]
    fn requests_name_their_bad_tool_fields() {
        for (body, param) in [
            (json!({"tools": [{"type": "web_search"}]}), "tools.[0]"),
            (
                json!({"tools": [{"type": "function", "function": {}}]}),
                "tools.[0]",
            ),
            (json!({"tools": 3}), "tools"),
            (
                json!({"tools": [], "tool_choice": "required"}),
                "tool_choice",
            ),
            (json!({"tool_choice": "sometimes"}), "tool_choice"),
            (
                json!({"tools": [{"type": "function", "name": "a"}], "tool_choice": {"type": "function", "name": "b"}}),
                "tool_choice",
            ),
            (json!({"parallel_tool_calls": "yes"}), "parallel_tool_calls"),
        ] {
            let e = request(body.clone()).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{body}");
        }
        // the Responses API's flat tool and choice shapes
        let r = request(json!({"tools": [{"type": "function", "name": "a", "parameters": {"type": "object"}}],
                               "tool_choice": {"type": "function", "name": "a"}, "parallel_tool_calls": false}))
        .unwrap();
        assert_eq!(
            (r.choice, r.parallel, r.tools[0].name.as_str()),
            (ToolChoice::Named("a".into()), false, "a")
        );
    }

    #[test]
    fn a_turn_of_an_exact_length_is_text_then_its_calls() {
        let v = tiny_vocab();
        let calls = vec![
            ToolCall::new("call_a".into(), "f", r#"{"path": "the of"}"#, &v),
            ToolCall::new("call_b".into(), "g", "{}", &v),
        ];
        let of_calls: usize = calls.iter().map(ToolCall::tokens).sum();
        // the calls fit: text makes up the rest, the answer is max_tokens long
        let text = text_before_calls(200, &calls);
        assert_eq!(text, 200 - of_calls);
        let mut turn = CallTurn::with_text(text, calls.clone());
        assert_eq!(turn.tokens(), 200);
        // the first tokens are text, then the calls'
        assert_eq!(turn.take_text(text - 1), text - 1);
        assert!(!turn.complete());
        assert_eq!(turn.take_text(3), 1);
        assert_eq!(turn.advance(2), [CallEvent::Start(0)]);
        assert_eq!(turn.take_text(5), 0);
        turn.advance(of_calls);
        assert!(turn.complete());
        assert_eq!(turn.generated(), calls);
        // they do not fit: no text, the calls whole
        assert_eq!(text_before_calls(of_calls as u32 - 1, &calls), 0);
        assert_eq!(text_before_calls(of_calls as u32, &calls), 0);
        assert_eq!(CallTurn::new(calls).tokens(), of_calls);
    }

    #[test]
    fn a_turn_streams_each_call_then_its_arguments_token_by_token() {
        let v = tiny_vocab();
        let calls = vec![
            ToolCall::new("call_a".into(), "f", r#"{"path": "the of"}"#, &v),
            ToolCall::new("call_b".into(), "g", "{}", &v),
        ];
        assert_eq!(calls[0].arguments(), r#"{"path": "the of"}"#);
        let mut turn = CallTurn::new(calls.clone());
        let total = turn.tokens();
        assert_eq!(
            total,
            2 * CALL_OVERHEAD_TOKENS + calls[0].pieces.len() + calls[1].pieces.len()
        );
        let first = turn.advance(CALL_OVERHEAD_TOKENS + 2);
        assert_eq!(first[0], CallEvent::Start(0));
        assert_eq!(
            first[1],
            CallEvent::Arguments(0, calls[0].pieces[..2].concat())
        );
        assert_eq!(
            turn.generated()[0].arguments(),
            calls[0].pieces[..2].concat()
        );
        let rest = turn.advance(total);
        assert!(turn.complete());
        assert_eq!(turn.generated(), calls);
        let mut args = [calls[0].pieces[..2].concat(), String::new()];
        for e in &rest {
            if let CallEvent::Arguments(i, t) = e {
                args[*i].push_str(t);
            }
        }
        assert_eq!(args, [calls[0].arguments(), calls[1].arguments()]);
        let kinds: Vec<String> = rest
            .iter()
            .map(|e| match e {
                CallEvent::Start(i) => format!("start{i}"),
                CallEvent::Arguments(i, _) => format!("args{i}"),
                CallEvent::Done(i) => format!("done{i}"),
            })
            .collect();
        assert_eq!(kinds, ["args0", "done0", "start1", "args1", "done1"]);
        assert!(turn.advance(3).is_empty());
    }
}
