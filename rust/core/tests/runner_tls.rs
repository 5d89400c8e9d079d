//! https targets: the server's certificate checked against `--ca-cert` (or skipped with
//! `--insecure`), the name checked, a certificate the run cannot trust failing it before t0, and
//! warm TLS connections reused by the dispatcher's own writes (their session tickets read, not
//! taken for a server's close).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use replay_core::{run, CoreError, RunConfig, RunControl, TlsOptions};

/// A file in the temp folder, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn with(text: &str) -> TempFile {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let name = format!("replay-core-tls-{}-{n}.pem", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }

    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The server's certificate as a --ca-cert file.
fn ca_of(server: &common::TestServer) -> TempFile {
    TempFile::with(server.cert_pem.as_deref().unwrap())
}

fn tls_config(url: String, tls: TlsOptions) -> RunConfig {
    RunConfig {
        tls,
        ..common::config(url)
    }
}

#[test]
fn an_https_run_over_warm_connections_trusting_its_ca() {
    let server = common::start_tls();
    let ca = ca_of(&server);
    // 40 requests 10 ms apart on two warm connections: each is free again long before the next
    // request, so the dispatcher writes every request on a warm TLS connection. A connection
    // judged closed because of the session tickets the server sent after the handshake would
    // be replaced by a new one for nearly every request.
    let reqs: Vec<_> = (0..40)
        .map(|i| common::planned("/sse?chunks=3", i, i as i64 * 10_000_000))
        .collect();
    let cfg = RunConfig {
        warm_connections: 2,
        ..tls_config(
            server.url(),
            TlsOptions {
                ca_cert: Some(ca.path()),
                insecure: false,
            },
        )
    };
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    assert_eq!(r.stats.warm_opened, 2, "{}", r.stats.warm_detail);
    assert!(
        r.output_chunks.iter().all(|&c| c == 3),
        "{:?}",
        r.output_chunks
    );
    assert!(r.completion_tokens.iter().all(|&c| c == 3));
    // the certificate check before t0, two warm connections, nothing opened during the run
    let accepted = server.accepted.load(Ordering::SeqCst);
    assert!(accepted <= 3, "{accepted} connections for 40 requests");
    let bodies: Vec<usize> = server
        .arrivals
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.path != "/v1/models")
        .map(|a| common::index_of(&a.body))
        .collect();
    assert_eq!(
        bodies,
        (0..40).collect::<Vec<_>>(),
        "every body arrived whole, in order"
    );
}

#[test]
fn the_connection_that_checked_the_certificate_carries_the_first_request() {
    // No warm-up: the one connection opened before t0 is the certificate check's, which read
    // nothing after its handshake, so the server's session tickets wait unread on it. Read and
    // decrypted, they leave it usable; taken for bytes nobody asked for, it would be dropped
    // and the first request would open a second connection.
    let server = common::start_tls();
    let ca = ca_of(&server);
    let reqs: Vec<_> = (0..10)
        .map(|i| common::planned("/sse?chunks=2", i, i as i64 * 10_000_000))
        .collect();
    let cfg = tls_config(
        server.url(),
        TlsOptions {
            ca_cert: Some(ca.path()),
            insecure: false,
        },
    );
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn insecure_accepts_a_certificate_nobody_vouches_for() {
    let server = common::start_tls();
    let reqs: Vec<_> = (0..5)
        .map(|i| common::planned("/sse", i, i as i64 * 1_000_000))
        .collect();
    let cfg = tls_config(
        server.url(),
        TlsOptions {
            ca_cert: None,
            insecure: true,
        },
    );
    let r = run(&cfg, reqs, Arc::new(RunControl::default())).unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
}

fn run_error(cfg: &RunConfig) -> CoreError {
    let reqs = vec![common::planned("/sse", 0, 0)];
    run(cfg, reqs, Arc::new(RunControl::default())).unwrap_err()
}

#[test]
fn an_untrusted_or_misnamed_certificate_fails_the_run_before_t0() {
    let server = common::start_tls();
    // The system's roots do not hold a self-signed certificate.
    let e = run_error(&tls_config(server.url(), TlsOptions::default()));
    match &e {
        CoreError::Url { url, message } => {
            assert_eq!(url, &server.url());
            assert!(
                message.contains("certificate") && message.contains("--ca-cert"),
                "{message}"
            );
        }
        other => panic!("{other}"),
    }
    assert!(!e.to_string().contains('\n'), "one line: {e}");
    // Trusted, but the certificate names `localhost`, not 127.0.0.1.
    let ca = ca_of(&server);
    let by_ip = format!("https://{}", server.addr);
    let e = run_error(&tls_config(
        by_ip.clone(),
        TlsOptions {
            ca_cert: Some(ca.path()),
            insecure: false,
        },
    ));
    assert!(
        matches!(&e, CoreError::Url { url, message } if url == &by_ip && message.contains("certificate")),
        "{e}"
    );
    assert!(
        server.arrivals.lock().unwrap().is_empty(),
        "no request reached the server"
    );
}

#[test]
fn a_server_presenting_a_ca_certificate_as_its_own_is_told_apart() {
    // `openssl req -x509` makes such certificates by default; Python's ssl accepts them as a
    // server's own, rustls does not, so the run fails before t0 and says why in words.
    let server = common::start_tls_as(rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained));
    let ca = ca_of(&server);
    let e = run_error(&tls_config(
        server.url(),
        TlsOptions {
            ca_cert: Some(ca.path()),
            insecure: false,
        },
    ));
    assert!(
        matches!(&e, CoreError::Url { message, .. } if message.contains("is a CA certificate")),
        "{e}"
    );
}

#[test]
fn a_ca_file_that_holds_no_certificate_is_a_config_error() {
    let server = common::start_tls();
    let missing = std::env::temp_dir().join("replay-core-no-such-ca.pem");
    let not_pem = TempFile::with("hello\n");
    for path in [missing.to_string_lossy().into_owned(), not_pem.path()] {
        let e = run_error(&tls_config(
            server.url(),
            TlsOptions {
                ca_cert: Some(path.clone()),
                insecure: false,
            },
        ));
        assert!(
            matches!(&e, CoreError::Config { field: "ca_cert", message } if message.contains(&path)),
            "{e}"
        );
    }
}
