//! replay-sim: serve the simulated engine from the command line.
//!
//! Flags are vLLM's names (see `replay_sim::flags::USAGE`) plus `--tokenizer PATH`, `--host`,
//! `--port` (default 8000; 0 = any free port), `--profile` and `--time-scale`. The first stdout
//! line is `listening on http://HOST:PORT` (flushed), then it serves until killed.

use std::io::Write;

use replay_sim::flags::{parse_flags, USAGE};

fn main() {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if !argv
        .iter()
        .any(|a| a == "--port" || a.starts_with("--port="))
    {
        argv.extend(["--port".to_string(), "8000".to_string()]);
    }
    let config = match parse_flags(argv) {
        Ok(Some(c)) => c,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("replay-sim: {e}");
            std::process::exit(2);
        }
    };
    let server = match replay_sim::serve(&config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("replay-sim: {e}");
            std::process::exit(2);
        }
    };
    let r = server.resolved();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {}", server.url());
    let _ = writeln!(
        out,
        "profile {} | {} KV blocks of {} tokens | max-model-len {} | model {}",
        r.profile.name,
        r.num_blocks,
        r.config.block_size,
        r.max_model_len,
        r.config.served_model_name
    );
    let _ = out.flush();
    drop(out);
    server.join();
}
