//! The HTTP side of a run, set up once: base-URL validation and resolution, the header set,
//! the request encoder, and mapping transport errors to `ErrorKind`. The connections themselves
//! (and their pool) are in `conn.rs`.

use std::collections::HashMap;
use std::io;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::Uri;

use crate::conn::HttpError;
use crate::error::CoreError;
use crate::record::ErrorKind;

/// A validated `http(s)://host[:port][/prefix]` base URL.
#[derive(Debug, Clone)]
pub struct BaseUrl {
    /// `scheme://authority` plus any path prefix, without a trailing slash.
    prefix: String,
    /// `host[:port]` as given (the `host` header).
    authority: String,
    host: String,
    port: u16,
    https: bool,
}

impl BaseUrl {
    /// Validate: http or https, with a host, no query or fragment.
    pub fn parse(url: &str) -> Result<BaseUrl, CoreError> {
        let bad = |message: &str| CoreError::Url {
            url: url.to_string(),
            message: message.to_string(),
        };
        let uri: Uri = url
            .trim()
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => {
                return Err(bad(&format!(
                    "scheme {other:?} is not supported (http or https)"
                )))
            }
            None => return Err(bad("missing scheme; expected http://host:port")),
        };
        let authority = uri.authority().ok_or_else(|| bad("missing host"))?;
        if authority.host().is_empty() {
            return Err(bad("missing host"));
        }
        if uri.query().is_some() || url.contains('#') {
            return Err(bad("a base url takes no query or fragment"));
        }
        let path = uri.path().trim_end_matches('/');
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let scheme = if https { "https" } else { "http" };
        Ok(BaseUrl {
            prefix: format!("{scheme}://{authority}{path}"),
            authority: authority.as_str().to_string(),
            host: host.to_string(),
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
            https,
        })
    }

    /// The URL as validated (scheme, authority, path prefix).
    pub fn as_str(&self) -> &str {
        &self.prefix
    }

    /// The host name or IP address (no brackets, no port).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Connections are made over TLS.
    pub fn is_https(&self) -> bool {
        self.https
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
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// The socket addresses of the base URL's host (resolved once, before t0).
pub fn resolve(base: &BaseUrl) -> Result<Vec<SocketAddr>, CoreError> {
    let addrs: Vec<SocketAddr> = (base.host.as_str(), base.port)
        .to_socket_addrs()
        .map_err(|e| CoreError::Url {
            url: base.prefix.clone(),
            message: format!("cannot resolve host {:?}: {e}", base.host),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(CoreError::Url {
            url: base.prefix.clone(),
            message: format!("host {:?} has no address", base.host),
        });
    }
    Ok(addrs)
}

/// The bytes of each request before its body: one shared prefix per path (request line, host,
/// headers), then a `content-length` line per request.
#[derive(Debug, Clone)]
pub struct Encoder {
    prefixes: HashMap<String, Bytes>,
    fallback: Bytes,
}

impl Encoder {
    /// An encoder for `paths` (each joined to `base`) with `headers` on every request.
    pub fn new<'a>(
        base: &BaseUrl,
        headers: &HeaderMap,
        paths: impl Iterator<Item = &'a str>,
    ) -> Result<Encoder, CoreError> {
        let mut prefixes = HashMap::new();
        for p in paths {
            if !prefixes.contains_key(p) {
                let uri = base.join(p)?;
                prefixes.insert(p.to_string(), Self::prefix(base, headers, "POST", &uri));
            }
        }
        let fallback = Self::prefix(base, headers, "POST", &base.join("/")?);
        Ok(Encoder { prefixes, fallback })
    }

    fn prefix(base: &BaseUrl, headers: &HeaderMap, method: &str, uri: &Uri) -> Bytes {
        let target = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut out =
            format!("{method} {target} HTTP/1.1\r\nhost: {}\r\n", base.authority).into_bytes();
        for (name, value) in headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Bytes::from(out)
    }

    /// (shared prefix, this request's own header lines (`plan::HeadLines`, written as they
    /// are), its `content-length` line and the blank line).
    pub fn head(&self, path: &str, own_headers: &[u8], body_len: usize) -> (Bytes, Vec<u8>) {
        let prefix = self.prefixes.get(path).unwrap_or(&self.fallback).clone();
        let mut tail = Vec::with_capacity(own_headers.len() + 40);
        tail.extend_from_slice(own_headers);
        write!(tail, "content-length: {body_len}\r\n\r\n").expect("a Vec takes any write");
        (prefix, tail)
    }

    /// A complete `GET path` request (used to check warm connections).
    pub fn get(base: &BaseUrl, headers: &HeaderMap, path: &str) -> Result<Bytes, CoreError> {
        let uri = base.join(path)?;
        let mut out = Self::prefix(base, headers, "GET", &uri).to_vec();
        out.extend_from_slice(b"\r\n");
        Ok(Bytes::from(out))
    }
}

/// Classify a failed connect.
pub fn classify_connect_error(err: &io::Error) -> (ErrorKind, String) {
    let kind = match err.kind() {
        io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
        _ => ErrorKind::Connect,
    };
    (kind, format!("connect: {}", one_line(&err.to_string())))
}

/// Classify a failure while writing the request or reading the response.
pub fn classify_http_error(err: &HttpError) -> (ErrorKind, String) {
    let kind = match err {
        HttpError::Io(e) => match e.kind() {
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => ErrorKind::Reset,
            io::ErrorKind::TimedOut => ErrorKind::Timeout,
            _ => ErrorKind::Other,
        },
        HttpError::Closed(_) => ErrorKind::Reset,
        HttpError::Protocol(_) => ErrorKind::Other,
    };
    (kind, one_line(&err.to_string()))
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
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
        let s = BaseUrl::parse("https://[::1]/gw").unwrap();
        assert!(s.is_https() && s.port == 443 && s.host() == "::1");
        assert_eq!(
            s.join("/v1/x").unwrap().to_string(),
            "https://[::1]/gw/v1/x"
        );
        assert!(!b.is_https() && b.port == 8000);
        for bad in [
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
        let e = BaseUrl::parse("ftp://x").unwrap_err().to_string();
        assert!(e.contains("ftp://x") && e.contains("http or https"), "{e}");
    }

    #[test]
    fn encoder_writes_request_heads() {
        let b = BaseUrl::parse("http://localhost:9/proxy").unwrap();
        let h = build_headers(&[("Authorization".into(), "Bearer k".into())]).unwrap();
        let enc = Encoder::new(&b, &h, ["/v1/chat/completions"].into_iter()).unwrap();
        let (prefix, tail) = enc.head("/v1/chat/completions", b"", 42);
        let text = String::from_utf8(prefix.to_vec()).unwrap();
        assert!(
            text.starts_with("POST /proxy/v1/chat/completions HTTP/1.1\r\nhost: localhost:9\r\n"),
            "{text}"
        );
        assert!(
            text.contains("authorization: Bearer k\r\n")
                && text.contains("content-type: application/json\r\n")
        );
        assert_eq!(tail, b"content-length: 42\r\n\r\n");
        let (_, tail) = enc.head("/v1/chat/completions", b"x-replay-tool-calls: 40,2\r\n", 7);
        assert_eq!(
            tail,
            b"x-replay-tool-calls: 40,2\r\ncontent-length: 7\r\n\r\n"
        );
        let get = Encoder::get(&b, &h, "/v1/models").unwrap();
        assert!(
            get.starts_with(b"GET /proxy/v1/models HTTP/1.1\r\n") && get.ends_with(b"\r\n\r\n")
        );
        assert!(Encoder::new(&b, &h, ["/bad path"].into_iter()).is_err());
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
