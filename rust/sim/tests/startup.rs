//! `serve_with` returns once the server thread is running under its name, so a caller that looks
//! for the engine's threads right away (to check their CPUs, say) finds them. Alone in its test
//! binary: no other test's server threads come and go while it looks.

#[cfg(target_os = "linux")]
#[test]
fn the_server_thread_is_there_when_serve_returns() {
    use std::collections::HashSet;
    use std::sync::Arc;

    use replay_sim::fixture::tiny_vocab;
    use replay_sim::{serve_with, EngineConfig};

    // the ids of this process's threads named "replay-sim"
    let named = || -> HashSet<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| {
                let t = t.ok()?;
                let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
                (name.trim() == "replay-sim").then(|| t.file_name().to_string_lossy().into_owned())
            })
            .collect()
    };
    let vocab = Arc::new(tiny_vocab());
    for _ in 0..100 {
        // the previous server's thread is joined, but the kernel may list it for a moment more;
        // wait until it is gone: a thread that leaves the list while it is read can hide another
        // thread from that read (seen on CI: the new thread missing from the listing once in 100)
        let since = std::time::Instant::now();
        while !named().is_empty() {
            assert!(
                since.elapsed() < std::time::Duration::from_secs(5),
                "a stopped server's thread still listed after 5 s"
            );
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let config = EngineConfig::from_json(r#"{"profile": "instant"}"#).unwrap();
        let server = serve_with(config.resolve().unwrap(), Arc::clone(&vocab)).unwrap();
        assert_eq!(
            named().len(),
            1,
            "one new replay-sim thread, named, when serve_with returns"
        );
        drop(server);
    }
}
