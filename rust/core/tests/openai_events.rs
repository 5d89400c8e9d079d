//! OpenAI-style event and response interpretation: tokens, usage, [DONE], error events, bad JSON.

use replay_core::{parse_openai_event, parse_openai_response, OpenAiEvent, SseError, Usage};

fn chunk(data: &str) -> (bool, Option<Usage>) {
    match parse_openai_event(data.as_bytes()).unwrap() {
        OpenAiEvent::Chunk { has_token, usage } => (has_token, usage),
        OpenAiEvent::Done | OpenAiEvent::End { .. } => panic!("unexpected end"),
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

#[test]
fn responses_api_stream_events() {
    let delta = r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel"}"#;
    assert_eq!(chunk(delta), (true, None));
    let reasoning = r#"{"type":"response.reasoning_text.delta","delta":"hmm"}"#;
    assert!(chunk(reasoning).0);
    let args = r#"{"type":"response.function_call_arguments.delta","delta":"{\"a\""}"#;
    assert!(chunk(args).0);
    assert!(!chunk(r#"{"type":"response.output_text.delta","delta":""}"#).0);
    // lifecycle events carry no token, even with text in them
    let done_text = r#"{"type":"response.output_text.done","text":"Hello"}"#;
    assert_eq!(chunk(done_text), (false, None));
    assert!(!chunk(r#"{"type":"response.created","response":{"id":"r","status":"in_progress","usage":null}}"#).0);
    let completed = r#"{"type":"response.completed","sequence_number":9,"response":{"id":"r","status":"completed","output":[],"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":4},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":18}}}"#;
    assert_eq!(
        parse_openai_event(completed.as_bytes()).unwrap(),
        OpenAiEvent::End {
            usage: Some(Usage {
                prompt_tokens: 11,
                completion_tokens: 7,
                cached_tokens: Some(4)
            })
        }
    );
    // stopped by max_output_tokens: an end too
    let incomplete = r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":2,"output_tokens":5}}}"#;
    assert!(matches!(
        parse_openai_event(incomplete.as_bytes()).unwrap(),
        OpenAiEvent::End {
            usage: Some(Usage {
                completion_tokens: 5,
                ..
            })
        }
    ));
}

#[test]
fn responses_api_errors() {
    let failed = r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"out of memory"}}}"#;
    assert_eq!(
        parse_openai_event(failed.as_bytes()).unwrap_err(),
        SseError::ServerError {
            message: "out of memory".into()
        }
    );
    let error = r#"{"type":"error","code":"rate_limit","message":"slow down","param":null}"#;
    assert_eq!(
        parse_openai_event(error.as_bytes()).unwrap_err(),
        SseError::ServerError {
            message: "slow down".into()
        }
    );
}

#[test]
fn responses_and_embeddings_json() {
    let response = br#"{"id":"resp_1","object":"response","status":"completed","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi there","annotations":[]}]}],"usage":{"input_tokens":9,"output_tokens":3,"input_tokens_details":{"cached_tokens":0}}}"#;
    let (has, usage) = parse_openai_response(response).unwrap();
    assert!(has);
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 9,
            completion_tokens: 3,
            cached_tokens: Some(0)
        })
    );
    let call =
        br#"{"object":"response","output":[{"type":"function_call","name":"f","arguments":"{}"}]}"#;
    assert!(parse_openai_response(call).unwrap().0);
    let empty = br#"{"object":"response","output":[{"type":"message","content":[{"type":"output_text","text":""}]}]}"#;
    assert!(!parse_openai_response(empty).unwrap().0);
    let embeddings = br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2]}],"model":"m","usage":{"prompt_tokens":6,"total_tokens":6}}"#;
    let (has, usage) = parse_openai_response(embeddings).unwrap();
    assert!(!has);
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 6,
            completion_tokens: -1,
            cached_tokens: None
        })
    );
}
