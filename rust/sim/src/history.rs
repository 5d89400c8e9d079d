//! Agent histories in: the checks a real server makes on a request's conversation.
//!
//! Owns `check_chat` and `check_responses`. Chat completions: an assistant message needs content
//! (a string, or a non-empty list of parts) or `tool_calls`, each call with a string `id` and a
//! `function` with a string `name` and `arguments`; a `tool` message needs a `tool_call_id` that
//! an earlier assistant message's `tool_calls` issued in the same history. The Responses API: a
//! `function_call` item needs a string `call_id`, `name` and `arguments`; a
//! `function_call_output` item needs a `call_id` that an earlier `function_call` item issued.
//! A broken history is a 400 with the OpenAI error shape (`invalid_request_error`, `param` the
//! field) whose message names the message or item index (`messages[3]: ...`, `input[2]: ...`).

use std::collections::HashSet;

use serde_json::Value;

use crate::request::ApiError;

/// Check a chat request's `messages` (module docs).
pub fn check_chat(messages: &[Value]) -> Result<(), ApiError> {
    let mut issued: HashSet<&str> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let bad = |field: &str, what: String| {
            ApiError::invalid(
                format!("messages.[{i}].{field}"),
                format!("messages[{i}]: {what}"),
            )
        };
        match m.get("role").and_then(Value::as_str) {
            Some("assistant") => {
                let calls = match m.get("tool_calls") {
                    None | Some(Value::Null) => &[][..],
                    Some(Value::Array(calls)) => calls.as_slice(),
                    Some(_) => return Err(bad("tool_calls", "'tool_calls' must be a list".into())),
                };
                for (j, call) in calls.iter().enumerate() {
                    let id = call.get("id").and_then(Value::as_str);
                    let f = call.get("function");
                    let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                    let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str);
                    match (id, name, args) {
                        (Some(id), Some(_), Some(_)) => {
                            issued.insert(id);
                        }
                        _ => {
                            return Err(bad(
                                &format!("tool_calls.[{j}]"),
                                format!("tool_calls[{j}] needs a string 'id' and a 'function' with a string 'name' and 'arguments'"),
                            ))
                        }
                    }
                }
                let has_content = match m.get("content") {
                    Some(Value::String(_)) => true,
                    Some(Value::Array(parts)) => !parts.is_empty(),
                    _ => false,
                };
                if !has_content && calls.is_empty() {
                    return Err(bad(
                        "content",
                        "an assistant message needs 'content' or 'tool_calls'".into(),
                    ));
                }
            }
            Some("tool") => {
                let Some(id) = m.get("tool_call_id").and_then(Value::as_str) else {
                    return Err(bad(
                        "tool_call_id",
                        "a tool message needs a string 'tool_call_id'".into(),
                    ));
                };
                if !issued.contains(id) {
                    return Err(bad(
                        "tool_call_id",
                        format!("tool_call_id '{id}' answers no tool call of an earlier assistant message"),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Check a Responses request's `input` items (module docs).
pub fn check_responses(items: &[Value]) -> Result<(), ApiError> {
    let mut issued: HashSet<&str> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let field = |key: &str| item.get(key).and_then(Value::as_str);
        let bad =
            |what: String| ApiError::invalid(format!("input.[{i}]"), format!("input[{i}]: {what}"));
        match field("type") {
            Some("function_call") => match (field("call_id"), field("name"), field("arguments")) {
                (Some(id), Some(_), Some(_)) => {
                    issued.insert(id);
                }
                _ => {
                    return Err(bad(
                        "a function_call needs a string 'call_id', 'name' and 'arguments'".into(),
                    ))
                }
            },
            Some("function_call_output") => {
                let Some(id) = field("call_id") else {
                    return Err(bad("a function_call_output needs a string 'call_id'".into()));
                };
                if !issued.contains(id) {
                    return Err(bad(format!(
                        "function_call_output call_id '{id}' answers no earlier function_call"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(messages: Value) -> Result<(), ApiError> {
        check_chat(messages.as_array().unwrap())
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
    }

    #[test]
    fn valid_agent_histories_pass() {
        chat(json!([
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
            {"role": "assistant", "content": "", "tool_calls": []},
            {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            {"role": "tool", "tool_call_id": "a", "content": "again"},
        ]))
        .unwrap();
        check_responses(
            json!([
                {"role": "user", "content": "u"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ])
            .as_array()
            .unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn broken_histories_are_400_naming_the_message() {
        let user = json!({"role": "user", "content": "u"});
        for (messages, index, param, words) in [
            (
                json!([user, {"role": "tool", "tool_call_id": "x", "content": "1"}]),
                1,
                "messages.[1].tool_call_id",
                "'x' answers no tool call",
            ),
            (
                json!([user, {"role": "assistant", "tool_calls": [call("a")]}, {"role": "tool", "tool_call_id": "b", "content": "1"}]),
                2,
                "messages.[2].tool_call_id",
                "'b'",
            ),
            (
                json!([user, {"role": "tool", "content": "1"}]),
                1,
                "messages.[1].tool_call_id",
                "needs a string 'tool_call_id'",
            ),
            // the answer comes before the call
            (
                json!([user, {"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "assistant", "tool_calls": [call("a")]}]),
                1,
                "messages.[1].tool_call_id",
                "earlier",
            ),
            (
                json!([user, {"role": "assistant", "content": null}]),
                1,
                "messages.[1].content",
                "needs 'content' or 'tool_calls'",
            ),
            (
                json!([user, {"role": "assistant"}]),
                1,
                "messages.[1].content",
                "needs 'content' or 'tool_calls'",
            ),
            (
                json!([user, {"role": "assistant", "tool_calls": []}]),
                1,
                "messages.[1].content",
                "needs 'content' or 'tool_calls'",
            ),
            (
                json!([user, {"role": "assistant", "tool_calls": [{"id": "a"}]}]),
                1,
                "messages.[1].tool_calls.[0]",
                "tool_calls[0]",
            ),
        ] {
            let e = chat(messages.clone()).unwrap_err();
            assert_eq!(
                (e.status, e.kind, e.param.as_deref()),
                (400, "invalid_request_error", Some(param)),
                "{messages}"
            );
            assert!(
                e.message.starts_with(&format!("messages[{index}]: ")),
                "{}",
                e.message
            );
            assert!(e.message.contains(words), "{}", e.message);
        }
        for (items, index, words) in [
            (
                json!([{"type": "function_call_output", "call_id": "c", "output": "1"}]),
                0,
                "call_id 'c' answers no earlier function_call",
            ),
            (
                json!([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "d", "output": "1"}]),
                1,
                "'d'",
            ),
            (
                json!([{"role": "user", "content": "u"}, {"type": "function_call", "name": "f", "arguments": "{}"}]),
                1,
                "needs a string 'call_id'",
            ),
            (
                json!([{"type": "function_call_output", "output": "1"}]),
                0,
                "needs a string 'call_id'",
            ),
        ] {
            let e = check_responses(items.as_array().unwrap()).unwrap_err();
            assert_eq!(
                (e.status, e.param.clone()),
                (400, Some(format!("input.[{index}]")))
            );
            assert!(
                e.message.starts_with(&format!("input[{index}]: ")) && e.message.contains(words),
                "{}",
                e.message
            );
        }
    }
}
