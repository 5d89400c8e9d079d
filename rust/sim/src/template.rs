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
//! `text` parts are joined; other parts (images) are refused.

use serde_json::Value;

/// Render `messages`; `add_generation_prompt` appends the assistant header. Err names the
/// offending message.
pub fn render_chat(messages: &[Value], add_generation_prompt: bool) -> Result<String, String> {
    let mut out = String::new();
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
        let text = render_chat(msgs.as_array().unwrap(), true).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n\
             <|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n"
        );
        let no_gen = render_chat(&msgs.as_array().unwrap()[..1], false).unwrap();
        assert_eq!(no_gen, "<|im_start|>system\nBe brief.<|im_end|>\n");
        assert!(render_chat(&[json!({"content": "x"})], true)
            .unwrap_err()
            .contains("role"));
        assert!(render_chat(&[json!("x")], true).is_err());
        let image = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]);
        assert!(render_chat(image.as_array().unwrap(), true).is_err());
    }
}
