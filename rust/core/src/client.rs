//! The HTTP side of a run, set up once: base-URL validation, per-path request URIs, the header
//! set, the pooled hyper-util client, and mapping transport errors to `ErrorKind`.
//!
//! HTTP/1.1 keep-alive through hyper-util's legacy `Client`: idle connections are reused and new
//! ones are opened on demand, so the number of connections follows the number in flight (the
//! run bounds that with a semaphore).

use std::collections::HashMap;
use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::Uri;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::error::CoreError;
use crate::record::ErrorKind;

/// The pooled client type used by the runner.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A validated `http://host[:port][/prefix]` base URL.
#[derive(Debug, Clone)]
pub struct BaseUrl {
    /// `scheme://authority` plus any path prefix, without a trailing slash.
    prefix: String,
}

impl BaseUrl {
    /// Validate: http only, with a host, no query or fragment.
    pub fn parse(url: &str) -> Result<BaseUrl, CoreError> {
        let bad = |message: &str| CoreError::Url {
            url: url.to_string(),
            message: message.to_string(),
        };
        let uri: Uri = url
            .trim()
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(bad("https is not supported (http only)")),
            Some(other) => {
                return Err(bad(&format!(
                    "scheme {other:?} is not supported (http only)"
                )))
            }
            None => return Err(bad("missing scheme; expected http://host:port")),
        }
        let authority = uri.authority().ok_or_else(|| bad("missing host"))?;
        if authority.host().is_empty() {
            return Err(bad("missing host"));
        }
        if uri.query().is_some() || url.contains('#') {
            return Err(bad("a base url takes no query or fragment"));
        }
        let path = uri.path().trim_end_matches('/');
        Ok(BaseUrl {
            prefix: format!("http://{authority}{path}"),
        })
    }

    /// The URI for a request path (`/v1/chat/completions`, a leading `/` is optional).
    pub fn join(&self, path: &str) -> Result<Uri, CoreError> {
        let full = if path.starts_with('/') {
            format!("{}{}", self.prefix, path)
        } else {
            format!("{}/{}", self.prefix, path)
        };
        full.parse::<Uri>().map_err(|e| CoreError::Url {
            url: full.clone(),
            message: e.to_string(),
        })
    }

    /// URIs for many paths, parsing each distinct path once.
    pub fn join_all<'a>(
        &self,
        paths: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<Uri>, CoreError> {
        let mut cache: HashMap<&str, Uri> = HashMap::new();
        let mut out = Vec::new();
        for p in paths {
            let uri = match cache.get(p) {
                Some(u) => u.clone(),
                None => {
                    let u = self.join(p)?;
                    cache.insert(p, u.clone());
                    u
                }
            };
            out.push(uri);
        }
        Ok(out)
    }
}

/// Headers sent with every request: JSON content type, SSE accept, then the configured ones
/// (which replace the defaults of the same name).
pub fn build_headers(extra: &[(String, String)]) -> Result<HeaderMap, CoreError> {
    let mut map = HeaderMap::new();
    map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    map.insert(
        ACCEPT,
        HeaderValue::from_static("text/event-stream, application/json"),
    );
    let mut seen: Vec<HeaderName> = Vec::new();
    for (name, value) in extra {
        let n = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| CoreError::config("headers", format!("invalid header name {name:?}")))?;
        let v = HeaderValue::from_str(value.trim()).map_err(|_| {
            CoreError::config("headers", format!("invalid value for header {name:?}"))
        })?;
        if seen.contains(&n) {
            map.append(n, v);
        } else {
            map.insert(n.clone(), v);
            seen.push(n);
        }
    }
    Ok(map)
}

/// How long an idle connection is kept for reuse: below the 5 s keep-alive timeout of uvicorn
/// (vLLM, SGLang) and cpp-httplib (llama-server), so the client drops an idle connection before
/// the server closes it. Reusing one that the server is closing at that very moment fails the
/// request as a reset although the engine did nothing wrong.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// A pooled HTTP/1.1 client. `connect_timeout` None = no limit. Idle connections are kept (up
/// to `max_idle`, for `POOL_IDLE_TIMEOUT`) so a steady load reuses them.
pub fn build_client(connect_timeout: Option<Duration>, max_idle: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(connect_timeout);
    connector.set_nodelay(true);
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(max_idle)
        .retry_canceled_requests(true)
        .build(connector)
}

/// Classify a failure of `Client::request` (before response headers).
pub fn classify_request_error(err: &hyper_util::client::legacy::Error) -> (ErrorKind, String) {
    let detail = error_chain(err);
    if err.is_connect() {
        let kind = match find_io_kind(err) {
            Some(io::ErrorKind::ConnectionRefused) => ErrorKind::ConnectRefused,
            _ => ErrorKind::Connect,
        };
        return (kind, format!("connect: {detail}"));
    }
    (classify_chain(err), detail)
}

/// Classify an error while reading the response body.
pub fn classify_body_error(err: &hyper::Error) -> (ErrorKind, String) {
    (classify_chain(err), error_chain(err))
}

fn classify_chain(err: &(dyn StdError + 'static)) -> ErrorKind {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message()
                || h.is_closed()
                || h.is_canceled()
                || h.is_body_write_aborted()
            {
                return ErrorKind::Reset;
            }
            if h.is_timeout() {
                return ErrorKind::Timeout;
            }
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return match io.kind() {
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof => ErrorKind::Reset,
                io::ErrorKind::TimedOut => ErrorKind::Timeout,
                _ => ErrorKind::Other,
            };
        }
        cur = e.source();
    }
    ErrorKind::Other
}

fn find_io_kind(err: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cur = e.source();
    }
    None
}

/// "outer: inner: innermost" on one line, without repeating identical messages.
fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        let s = e.to_string();
        if !s.is_empty() && parts.last() != Some(&s) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_validation() {
        let b = BaseUrl::parse("http://127.0.0.1:8000/").unwrap();
        assert_eq!(
            b.join("/v1/chat/completions").unwrap().to_string(),
            "http://127.0.0.1:8000/v1/chat/completions"
        );
        assert_eq!(
            b.join("v1/completions").unwrap().to_string(),
            "http://127.0.0.1:8000/v1/completions"
        );
        let p = BaseUrl::parse("http://localhost:9/proxy/").unwrap();
        assert_eq!(
            p.join("/v1/x").unwrap().to_string(),
            "http://localhost:9/proxy/v1/x"
        );
        for bad in [
            "https://h:1",
            "ftp://h",
            "127.0.0.1:8000",
            "",
            "http://",
            "http://h:1/?q=1",
            "http://h:1/#f",
            "not a url",
        ] {
            match BaseUrl::parse(bad) {
                Err(CoreError::Url { url, .. }) => assert_eq!(url, bad),
                other => panic!("{bad:?} accepted: {other:?}"),
            }
        }
        let e = BaseUrl::parse("https://x").unwrap_err().to_string();
        assert!(e.contains("https://x") && e.contains("http only"), "{e}");
    }

    #[test]
    fn join_all_reuses_paths() {
        let b = BaseUrl::parse("http://h:1").unwrap();
        let uris = b.join_all(["/a", "/b", "/a"].into_iter()).unwrap();
        assert_eq!(uris.len(), 3);
        assert_eq!(uris[2].path(), "/a");
        assert!(b.join_all(["/ok", "/bad path"].into_iter()).is_err());
    }

    #[test]
    fn headers() {
        let h = build_headers(&[
            ("Authorization".into(), "Bearer x".into()),
            ("content-type".into(), "text/plain".into()),
        ])
        .unwrap();
        assert_eq!(h["authorization"], "Bearer x");
        assert_eq!(h[CONTENT_TYPE], "text/plain");
        assert!(build_headers(&[("bad name".into(), "x".into())]).is_err());
        assert!(build_headers(&[("x".into(), "a\nb".into())]).is_err());
    }
}
