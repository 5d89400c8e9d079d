//! Command-line flags of the benchmark server, parsed by hand (`--flag value` or `--flag=value`).

use std::fmt;

/// Server settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub host: String,
    pub port: u16,
    /// Token-bearing events per response.
    pub chunks: usize,
    /// Pause before each token event, in microseconds (0 = none).
    pub chunk_delay_us: u64,
    /// Runtime threads (1 = current-thread runtime).
    pub threads: usize,
    /// `usage.prompt_tokens` reported in the final usage event.
    pub prompt_tokens: u64,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            host: "127.0.0.1".into(),
            port: 8000,
            chunks: 20,
            chunk_delay_us: 0,
            threads: 1,
            prompt_tokens: 16,
        }
    }
}

pub const USAGE: &str = "usage: sse-bench-server [--host 127.0.0.1] [--port 8000] [--chunks 20] \
[--chunk-delay-us 0] [--threads 1] [--prompt-tokens 16]";

/// Why the flags were refused (one line).
#[derive(Debug, PartialEq)]
pub enum ArgsError {
    Help,
    Bad(String),
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::Help => f.write_str(USAGE),
            ArgsError::Bad(m) => f.write_str(m),
        }
    }
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, ArgsError> {
    v.parse().map_err(|_| {
        ArgsError::Bad(format!(
            "sse-bench-server: {flag} needs a non-negative integer, got {v:?}"
        ))
    })
}

/// Parse flags (without the program name).
pub fn parse(argv: impl IntoIterator<Item = String>) -> Result<Args, ArgsError> {
    let mut args = Args::default();
    let mut it = argv.into_iter();
    while let Some(raw) = it.next() {
        if raw == "-h" || raw == "--help" {
            return Err(ArgsError::Help);
        }
        let (flag, inline) = match raw.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (raw.clone(), None),
        };
        if !matches!(
            flag.as_str(),
            "--host" | "--port" | "--chunks" | "--chunk-delay-us" | "--threads" | "--prompt-tokens"
        ) {
            return Err(ArgsError::Bad(format!(
                "sse-bench-server: unknown argument {raw:?} ({USAGE})"
            )));
        }
        let value = match inline.or_else(|| it.next()) {
            Some(v) => v,
            None => {
                return Err(ArgsError::Bad(format!(
                    "sse-bench-server: {flag} needs a value"
                )))
            }
        };
        match flag.as_str() {
            "--host" => args.host = value,
            "--port" => args.port = number(&flag, &value)?,
            "--chunks" => args.chunks = number(&flag, &value)?,
            "--chunk-delay-us" => args.chunk_delay_us = number(&flag, &value)?,
            "--threads" => args.threads = number(&flag, &value)?,
            _ => args.prompt_tokens = number(&flag, &value)?,
        }
    }
    if args.threads == 0 {
        return Err(ArgsError::Bad(
            "sse-bench-server: --threads must be at least 1".into(),
        ));
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Args, ArgsError> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn flags() {
        assert_eq!(p("").unwrap(), Args::default());
        let a = p("--port 0 --chunks=3 --chunk-delay-us 250 --threads 2 --host 0.0.0.0").unwrap();
        assert_eq!(
            (
                a.port,
                a.chunks,
                a.chunk_delay_us,
                a.threads,
                a.host.as_str()
            ),
            (0, 3, 250, 2, "0.0.0.0")
        );
        assert!(matches!(p("--port x"), Err(ArgsError::Bad(_))));
        assert!(matches!(p("--port 70000"), Err(ArgsError::Bad(_))));
        assert!(matches!(p("--chunks"), Err(ArgsError::Bad(_))));
        assert!(matches!(p("--bogus 1"), Err(ArgsError::Bad(_))));
        assert!(matches!(p("--threads 0"), Err(ArgsError::Bad(_))));
        assert_eq!(p("--help"), Err(ArgsError::Help));
    }
}
