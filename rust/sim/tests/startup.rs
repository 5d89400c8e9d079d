//! `serve_with` returns once the server thread is running under its name, so a caller that looks
//! for the engine's threads right away (to check their CPUs, say) finds them. Alone in its test
//! binary: no other test's server threads come and go while it counts.

#[cfg(target_os = "linux")]
#[test]
fn the_server_thread_is_there_when_serve_returns() {
    use std::sync::Arc;

    use replay_sim::fixture::tiny_vocab;
    use replay_sim::{serve_with, EngineConfig};

    let named = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "replay-sim")
            .count()
    };
    let vocab = Arc::new(tiny_vocab());
    for _ in 0..20 {
        let config = EngineConfig::from_json(r#"{"profile": "instant"}"#).unwrap();
        let server = serve_with(config.resolve().unwrap(), Arc::clone(&vocab)).unwrap();
        assert_eq!(named(), 1);
        drop(server);
        assert_eq!(named(), 0, "stop() joins the server thread");
    }
}
