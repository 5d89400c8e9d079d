//! OpenAI-style event and response interpretation: tokens, usage, [DONE], error events, bad JSON.

use replay_core::{parse_openai_event, parse_openai_response, OpenAiEvent, SseError, Usage};

fn chunk(data: &str) -> (bool, Option<Usage>) {
    match parse_openai_event(data.as_bytes()).unwrap() {
        OpenAiEvent::Chunk { has_token, usage } => (has_token, usage),
        OpenAiEvent::Done => panic!("unexpected done"),
    }
}

#[test]
fn done_marker() {
    assert_eq!(parse_openai_event(b"[DONE]").unwrap(), OpenAiEvent::Done);
    assert_eq!(parse_openai_event(b" [DONE] ").unwrap(), OpenAiEvent::Done);
}

#[test]
fn token_bearing_chunks() {
    let content = r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi \"q\""},"finish_reason":null}]}"#;
    assert_eq!(chunk(content), (true, None));
    assert!(chunk(r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#).0);
    assert!(chunk(r#"{"choices":[{"delta":{"content":null,"reasoning":"think"}}]}"#).0);
    assert!(chunk(r#"{"choices":[{"index":0,"text":"abc","logprobs":null}]}"#).0);
    let tool =
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#;
    assert!(chunk(tool).0);
}

#[test]
fn empty_chunks_carry_no_token() {
    assert!(!chunk(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).0);
    assert!(!chunk(r#"{"choices":[{"delta":{"content":null,"tool_calls":null}}]}"#).0);
    assert!(!chunk(r#"{"choices":[{"delta":{"tool_calls":[]},"finish_reason":"stop"}]}"#).0);
    assert!(!chunk(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#).0);
    assert!(!chunk(r#"{"choices":[{"delta":null,"text":""}]}"#).0);
    assert!(!chunk(r#"{"object":"x"}"#).0);
}

#[test]
fn final_usage_chunk_with_empty_choices() {
    let data = r#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":20,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":8}}}"#;
    let usage = Usage {
        prompt_tokens: 12,
        completion_tokens: 20,
        cached_tokens: Some(8),
    };
    assert_eq!(chunk(data), (false, Some(usage)));
    let no_details = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":null}}"#;
    assert_eq!(
        chunk(no_details).1,
        Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 4,
            cached_tokens: None
        })
    );
    assert_eq!(
        chunk(r#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#),
        (true, None)
    );
}

#[test]
fn error_event() {
    let data = r#"{"error":{"object":"error","message":"out of memory\nsecond line","type":"InternalServerError","code":500}}"#;
    assert_eq!(
        parse_openai_event(data.as_bytes()).unwrap_err(),
        SseError::ServerError {
            message: "out of memory".into()
        }
    );
    let plain = r#"{"error":"boom"}"#;
    assert_eq!(
        parse_openai_event(plain.as_bytes()).unwrap_err(),
        SseError::ServerError {
            message: "boom".into()
        }
    );
}

#[test]
fn invalid_json_is_malformed() {
    for bad in [
        &b"{not json"[..],
        b"",
        b"hello",
        b"[1,2]",
        b"{\"choices\":5}",
        b"{\"choices\":[{\"delta\":{\"content\":\"a\"}}",
    ] {
        assert!(
            matches!(parse_openai_event(bad), Err(SseError::Malformed { .. })),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn non_stream_response() {
    let body = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
    let usage = Usage {
        prompt_tokens: 5,
        completion_tokens: 1,
        cached_tokens: None,
    };
    assert_eq!(
        parse_openai_response(body.as_bytes()).unwrap(),
        (true, Some(usage))
    );
    let completion = r#"{"choices":[{"text":"abc","index":0}]}"#;
    assert_eq!(
        parse_openai_response(completion.as_bytes()).unwrap(),
        (true, None)
    );
    let empty = r#"{"choices":[{"message":{"content":""}}],"usage":{"prompt_tokens":5,"completion_tokens":0}}"#;
    assert!(!parse_openai_response(empty.as_bytes()).unwrap().0);
    assert!(matches!(
        parse_openai_response(b"<html>"),
        Err(SseError::Malformed { .. })
    ));
    assert!(matches!(
        parse_openai_response(br#"{"error":{"message":"bad"}}"#),
        Err(SseError::ServerError { .. })
    ));
}
