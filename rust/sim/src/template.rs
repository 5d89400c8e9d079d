//! The chat template: how a `messages` list becomes the prompt text.
//!
//! A fixed ChatML-style template, the same for every profile:
//!
//! ```text
//! <|im_start|>{role}\n{content}<|im_end|>\n      (for each message)
//! <|im_start|>assistant\n                        (the generation prompt)
//! ```
//!
//! The markers are plain text when the vocabulary lacks them (GPT-2) and single special tokens
//! when it has them (Qwen2). A message's content is a string, null, or a list of parts whose
//! `text` parts are joined; other parts (images) are refused. As Hermes-style templates (Qwen2.5)
//! do, a request's `tools` come first as a system block listing each tool's JSON on a line
//! between `<tools>` and `</tools>`, and an assistant message's `tool_calls` follow its content,
//! each as `<tool_call>\n{"name": NAME, "arguments": ARGUMENTS}\n</tool_call>\n`.

use serde_json::Value;

/// Render `tools` and `messages`; `add_generation_prompt` appends the assistant header. Err
/// names the offending message.
pub fn render_chat(
    messages: &[Value],
    tools: &[Value],
    add_generation_prompt: bool,
) -> Result<String, String> {
    let mut out = String::new();
    if !tools.is_empty() {
        out.push_str("<|im_start|>system\n# Tools\n<tools>\n");
        for t in tools {
            out.push_str(&t.to_string());
            out.push('\n');
        }
        out.push_str("</tools><|im_end|>\n");
    }
    for (i, m) in messages.iter().enumerate() {
        let Some(obj) = m.as_object() else {
            return Err(format!("messages[{i}] must be an object"));
        };
        let role = match obj.get("role") {
            Some(Value::String(r)) => r.as_str(),
            _ => return Err(format!("messages[{i}].role must be a string")),
        };
        out.push_str("<|im_start|>");
        out.push_str(role);
        out.push('\n');
        match obj.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Array(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    match (part.get("type").and_then(Value::as_str), part.get("text")) {
                        (Some("text") | None, Some(Value::String(t))) => out.push_str(t),
                        _ => {
                            return Err(format!(
                                "messages[{i}].content[{j}]: only text parts are supported"
                            ))
                        }
                    }
                }
            }
            Some(_) => {
                return Err(format!(
                    "messages[{i}].content must be a string or a list of parts"
                ))
            }
        }
        if let Some(Value::Array(calls)) = obj.get("tool_calls") {
            for call in calls {
                let f = call.get("function").unwrap_or(&Value::Null);
                let field = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or("");
                out.push_str("<tool_call>\n{\"name\": ");
                out.push_str(&Value::String(field("name").to_string()).to_string());
                out.push_str(", \"arguments\": ");
                out.push_str(field("arguments"));
                out.push_str("}\n</tool_call>\n");
            }
        }
        out.push_str("<|im_end|>\n");
    }
    if add_generation_prompt {
        out.push_str("<|im_start|>assistant\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chatml_rendering() {
        let msgs = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]},
            {"role": "assistant", "content": null},
        ]);
        let text = render_chat(msgs.as_array().unwrap(), &[], true).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n\
             <|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n"
        );
        let no_gen = render_chat(&msgs.as_array().unwrap()[..1], &[], false).unwrap();
        assert_eq!(no_gen, "<|im_start|>system\nBe brief.<|im_end|>\n");
        assert!(render_chat(&[json!({"content": "x"})], &[], true)
            .unwrap_err()
            .contains("role"));
        assert!(render_chat(&[json!("x")], &[], true).is_err());
        let image = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]);
        assert!(render_chat(image.as_array().unwrap(), &[], true).is_err());
    }

    #[test]
    fn tools_and_tool_calls_are_rendered() {
        let tools = [json!({"type": "function", "function": {"name": "f"}})];
        let msgs = json!([
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "2"},
        ]);
        let text = render_chat(msgs.as_array().unwrap(), &tools, false).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\n# Tools\n<tools>\n{\"function\":{\"name\":\"f\"},\"type\":\"function\"}\n</tools><|im_end|>\n\
             <|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<|im_end|>\n\
             <|im_start|>tool\n2<|im_end|>\n"
        );
    }
}
