//! One HTTP/1.1 keep-alive connection, written and read by hand (idle ones wait in `pool.rs`),
//! over TCP or over TLS (`tls.rs`); `Dialer` opens them.
//!
//! The runner owns the socket so that it knows the moment a request goes on the wire: `sent` is
//! stamped as the write of the request to its connection starts (as wrk2 stamps it), not when a
//! task was scheduled or a pool was asked. The request can be written from any thread
//! (`try_write_now`, a non-blocking `writev`; over TLS the request is encrypted on that thread and
//! its records written the same way), which lets the dispatcher put a request on a connection
//! opened before t0 without a hop through an I/O worker. Responses are read on the runtime: the
//! status line and headers (`httparse`), then the body by `content-length`, by `chunked` framing,
//! or until close.

use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls::{tls_failure, Tls};

/// Largest response head accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most headers in a response head.
const MAX_HEADERS: usize = 64;
/// Read buffer reserve per read.
const READ_CHUNK: usize = 16 * 1024;

/// Why reading or writing a connection failed.
#[derive(Debug)]
pub enum HttpError {
    /// The socket failed (reset, broken pipe, ...).
    Io(io::Error),
    /// The peer closed the connection where more was expected.
    Closed(&'static str),
    /// The peer sent something that is not HTTP/1.x.
    Protocol(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Io(e) => write!(f, "{e}"),
            HttpError::Closed(what) => write!(f, "connection closed {what}"),
            HttpError::Protocol(m) => write!(f, "bad HTTP response: {m}"),
        }
    }
}

impl From<io::Error> for HttpError {
    fn from(e: io::Error) -> Self {
        HttpError::Io(e)
    }
}

/// A response's status line and the headers that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// `content-type`, lowercased ("" when absent).
    pub content_type: String,
    /// The connection may carry another request after this response.
    pub keep_alive: bool,
    framing: Framing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

/// Where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// Decoding state of one response body.
#[derive(Debug)]
pub struct Body {
    framing: Framing,
    chunk: Chunk,
    remaining: u64,
    done: bool,
}

impl Body {
    pub fn new(head: &Head) -> Body {
        let remaining = match head.framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        Body {
            framing: head.framing,
            chunk: Chunk::Size,
            remaining,
            done: head.framing == Framing::Length(0),
        }
    }

    /// The whole body was read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Take the next piece of body data out of `buf`, if any is there. Ok(None): need more
    /// bytes (or the body is done).
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, HttpError> {
        loop {
            if self.done {
                return Ok(None);
            }
            match self.framing {
                Framing::UntilClose => {
                    return Ok((!buf.is_empty()).then(|| buf.split().freeze()));
                }
                Framing::Length(_) => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let k = (self.remaining as usize).min(buf.len());
                    self.remaining -= k as u64;
                    self.done = self.remaining == 0;
                    return Ok(Some(buf.split_to(k).freeze()));
                }
                Framing::Chunked => match self.chunk {
                    Chunk::Size => {
                        let Some(eol) = find_crlf(buf) else {
                            return too_long(buf.len(), "chunk size line").map(|_| None);
                        };
                        let line = &buf[..eol];
                        let hex = line.split(|&b| b == b';').next().unwrap_or(b"");
                        let size = std::str::from_utf8(hex)
                            .ok()
                            .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                            .ok_or_else(|| {
                                HttpError::Protocol(format!(
                                    "bad chunk size {:?}",
                                    String::from_utf8_lossy(&line[..line.len().min(20)])
                                ))
                            })?;
                        buf.advance(eol + 2);
                        self.chunk = if size == 0 {
                            Chunk::Trailers
                        } else {
                            Chunk::Data(size)
                        };
                    }
                    Chunk::Data(left) => {
                        if buf.is_empty() {
                            return Ok(None);
                        }
                        let k = (left as usize).min(buf.len());
                        let left = left - k as u64;
                        self.chunk = if left == 0 {
                            Chunk::DataEnd
                        } else {
                            Chunk::Data(left)
                        };
                        return Ok(Some(buf.split_to(k).freeze()));
                    }
                    Chunk::DataEnd => {
                        if buf.len() < 2 {
                            return Ok(None);
                        }
                        if &buf[..2] != b"\r\n" {
                            return Err(HttpError::Protocol("chunk not followed by CRLF".into()));
                        }
                        buf.advance(2);
                        self.chunk = Chunk::Size;
                    }
                    Chunk::Trailers => {
                        let Some(eol) = find_crlf(buf) else {
                            return too_long(buf.len(), "trailer").map(|_| None);
                        };
                        buf.advance(eol + 2);
                        if eol == 0 {
                            self.done = true;
                        }
                    }
                },
            }
        }
    }
}

fn plain_looks_alive(tcp: &TcpStream) -> bool {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let mut probe = [0u8; 1];
        // SAFETY: a valid open socket fd owned by `tcp`, a 1-byte buffer we own.
        let n = unsafe {
            libc::recv(
                tcp.as_raw_fd(),
                probe.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return e.kind() == io::ErrorKind::WouldBlock;
        }
        false // 0: the server closed it; > 0: bytes nobody asked for
    }
    #[cfg(not(unix))]
    {
        let mut probe = [0u8; 1];
        match tcp.try_read(&mut probe) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn too_long(len: usize, what: &str) -> Result<(), HttpError> {
    if len > MAX_HEAD_BYTES {
        Err(HttpError::Protocol(format!("{what} longer than 64 KiB")))
    } else {
        Ok(())
    }
}

/// How connections to the target are opened: its addresses (resolved once, before t0), the
/// connect deadline (the TLS handshake included), and TLS for an https target.
#[derive(Debug)]
pub struct Dialer {
    pub addrs: Vec<SocketAddr>,
    pub timeout: Option<Duration>,
    pub tls: Option<Tls>,
}

impl Dialer {
    /// Connect to the first of the addresses that accepts (and complete the TLS handshake),
    /// within the timeout. A TLS failure (a certificate not trusted, a handshake refused) is an
    /// `InvalidData` error whose message says so.
    pub async fn dial(&self) -> io::Result<Conn> {
        let attempt = self.open();
        match self.timeout {
            Some(t) => tokio::time::timeout(t, attempt).await.unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect timed out after {} ms", t.as_millis()),
                ))
            }),
            None => attempt.await,
        }
    }

    async fn open(&self) -> io::Result<Conn> {
        let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to");
        for addr in &self.addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    let stream = match &self.tls {
                        None => Stream::Plain(stream),
                        Some(tls) => {
                            let secured = tls
                                .connector
                                .connect(tls.name.clone(), stream)
                                .await
                                .map_err(|e| {
                                    io::Error::new(
                                        io::ErrorKind::InvalidData,
                                        format!("TLS handshake with {addr}: {}", tls_failure(&e)),
                                    )
                                })?;
                            Stream::Tls(Box::new(secured))
                        }
                    };
                    return Ok(Conn {
                        stream,
                        buf: BytesMut::with_capacity(READ_CHUNK),
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

#[derive(Debug)]
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// `std::io` over a tokio socket without waiting (WouldBlock when it would), for rustls.
struct NowIo<'a>(&'a TcpStream);

impl Write for NowIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for NowIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// One open connection to the target.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    buf: BytesMut,
}

impl Conn {
    /// Write as much of `parts` as the connection takes now, without waiting; callable from any
    /// thread. Returns the bytes of `parts` taken (WouldBlock counts as 0). Over TLS they are
    /// taken once encrypted: records the socket did not take yet are written by `write_rest`.
    pub fn try_write_now(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        match &mut self.stream {
            Stream::Plain(tcp) => match tcp.try_write_vectored(parts) {
                Ok(n) => Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                Err(e) => Err(e),
            },
            Stream::Tls(tls) => {
                let (tcp, session) = tls.get_mut();
                let mut taken = 0;
                for part in parts {
                    let n = session.writer().write(part)?;
                    taken += n;
                    if n < part.len() {
                        break;
                    }
                }
                while session.wants_write() {
                    match session.write_tls(&mut NowIo(tcp)) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                Ok(taken)
            }
        }
    }

    /// Write `parts` from byte `skip` on, and whatever `try_write_now` left encrypted but
    /// unwritten, waiting for the socket as needed.
    pub async fn write_rest(&mut self, parts: &[&[u8]], mut skip: usize) -> io::Result<()> {
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            match &mut self.stream {
                Stream::Plain(tcp) => tcp.write_all(&part[skip..]).await?,
                Stream::Tls(tls) => tls.write_all(&part[skip..]).await?,
            }
            skip = 0;
        }
        self.flush().await
    }

    /// Write what `try_write_now` encrypted but the socket did not take yet (TLS; nothing to do
    /// over plain TCP).
    pub async fn flush(&mut self) -> io::Result<()> {
        match &mut self.stream {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(tls) => tls.flush().await,
        }
    }

    /// An idle connection is still usable: the server has not closed it and sent nothing
    /// unasked (checked without blocking, callable from any thread). On Unix this asks the
    /// socket itself (`recv` with `MSG_PEEK | MSG_DONTWAIT`), not the runtime's cached readiness,
    /// which may not have seen a close yet (e.g. right after the server died). Over TLS what
    /// arrived is read and decrypted now: a server's session tickets keep the connection usable,
    /// its close_notify or any data does not.
    pub fn looks_alive(&mut self) -> bool {
        match &mut self.stream {
            Stream::Plain(tcp) => plain_looks_alive(tcp),
            Stream::Tls(tls) => {
                let (tcp, session) = tls.get_mut();
                loop {
                    match session.read_tls(&mut NowIo(tcp)) {
                        Ok(0) => return false,
                        Ok(_) => match session.process_new_packets() {
                            Ok(state) => {
                                if state.plaintext_bytes_to_read() > 0 || state.peer_has_closed() {
                                    return false;
                                }
                            }
                            Err(_) => return false,
                        },
                        Err(e) => return e.kind() == io::ErrorKind::WouldBlock,
                    }
                }
            }
        }
    }

    async fn fill(&mut self) -> io::Result<usize> {
        self.buf.reserve(READ_CHUNK);
        match &mut self.stream {
            Stream::Plain(tcp) => tcp.read_buf(&mut self.buf).await,
            Stream::Tls(tls) => tls.read_buf(&mut self.buf).await,
        }
    }

    /// Read the response head (interim 1xx responses are skipped).
    pub async fn read_head(&mut self) -> Result<Head, HttpError> {
        loop {
            if let Some(head) = self.parse_head()? {
                if (100..200).contains(&head.status) {
                    continue;
                }
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(HttpError::Protocol(
                    "response head longer than 64 KiB".into(),
                ));
            }
            if self.fill().await? == 0 {
                return Err(HttpError::Closed("before the response headers"));
            }
        }
    }

    fn parse_head(&mut self) -> Result<Option<Head>, HttpError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let len = match resp.parse(&self.buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(HttpError::Protocol(e.to_string())),
        };
        let status = resp.code.unwrap_or(0);
        let http10 = resp.version == Some(0);
        let mut content_type = String::new();
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut close = http10;
        for h in resp.headers.iter() {
            let value = std::str::from_utf8(h.value).unwrap_or("").trim();
            if h.name.eq_ignore_ascii_case("content-type") {
                content_type = value.to_ascii_lowercase();
            } else if h.name.eq_ignore_ascii_case("content-length") {
                length =
                    Some(value.parse().map_err(|_| {
                        HttpError::Protocol(format!("bad content-length {value:?}"))
                    })?);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().ends_with("chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = value.to_ascii_lowercase();
                if v.contains("close") {
                    close = true;
                } else if v.contains("keep-alive") {
                    close = false;
                }
            }
        }
        self.buf.advance(len);
        let no_body = status == 204 || status == 304 || (100..200).contains(&status);
        let framing = if no_body {
            Framing::Length(0)
        } else if chunked {
            Framing::Chunked
        } else if let Some(n) = length {
            Framing::Length(n)
        } else {
            Framing::UntilClose
        };
        Ok(Some(Head {
            status,
            content_type,
            keep_alive: !close && framing != Framing::UntilClose,
            framing,
        }))
    }

    /// The next piece of body data, or None at the end of the body.
    pub async fn next_data(&mut self, body: &mut Body) -> Result<Option<Bytes>, HttpError> {
        loop {
            if let Some(data) = body.decode(&mut self.buf)? {
                return Ok(Some(data));
            }
            if body.done {
                return Ok(None);
            }
            if self.fill().await? == 0 {
                if body.framing == Framing::UntilClose {
                    body.done = true;
                    return Ok(None);
                }
                return Err(HttpError::Closed("before the end of the response body"));
            }
        }
    }

    /// Nothing unread is left over (a reused connection must start clean).
    pub fn is_clean(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, framing: Framing) -> Head {
        Head {
            status,
            content_type: String::new(),
            keep_alive: true,
            framing,
        }
    }

    fn decode_all(framing: Framing, wire: &[&[u8]]) -> Result<(Vec<u8>, bool), HttpError> {
        let mut body = Body::new(&head(200, framing));
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in wire {
            buf.extend_from_slice(piece);
            while let Some(d) = body.decode(&mut buf)? {
                out.extend_from_slice(&d);
            }
        }
        Ok((out, body.is_done()))
    }

    #[test]
    fn chunked_bodies_split_anywhere() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-T: 1\r\n\r\n";
        for cut in 0..wire.len() {
            let (a, b) = wire.split_at(cut);
            let (out, done) = decode_all(Framing::Chunked, &[a, b]).unwrap();
            assert_eq!(out, b"hello, world", "cut at {cut}");
            assert!(done, "cut at {cut}");
        }
        let (out, done) = decode_all(Framing::Chunked, &[b"5\r\nhel"]).unwrap();
        assert_eq!((out.as_slice(), done), (&b"hel"[..], false));
    }

    #[test]
    fn bad_chunks_are_protocol_errors() {
        assert!(matches!(
            decode_all(Framing::Chunked, &[b"zz\r\n"]),
            Err(HttpError::Protocol(_))
        ));
        assert!(matches!(
            decode_all(Framing::Chunked, &[b"2\r\nabXY"]),
            Err(HttpError::Protocol(_))
        ));
    }

    #[test]
    fn length_bodies_stop_at_the_length() {
        let mut body = Body::new(&head(200, Framing::Length(3)));
        let mut buf = BytesMut::from(&b"abcdef"[..]);
        assert_eq!(body.decode(&mut buf).unwrap().unwrap(), &b"abc"[..]);
        assert!(body.is_done());
        assert_eq!(&buf[..], b"def", "the next response's bytes stay");
        assert!(Body::new(&head(200, Framing::Length(0))).is_done());
    }
}
