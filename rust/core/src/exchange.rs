//! One request's life: the dispatcher puts it on the wire when it can (`launch`), a task on the
//! runtime finishes what is left (a connection slot, a connection, the rest of the write).
//! `sent` is stamped as the request's write to its socket starts, once a slot and a connection
//! are in hand (wrk2 stamps a request's start the same way); then headers and every body
//! piece as it is read, interprets the body, and hands the finished `RequestRecord` back to
//! the run. Every outcome (ok, fault, deadline, cut-off, cancel) yields a record.
//!
//! The deadline and the stop signal race the exchange future (`response.rs` reads the answer);
//! it writes its stamps into state that outlives the future, so a timed-out or stopped request
//! keeps what it saw.

use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::OwnedSemaphorePermit;

use crate::client::{classify_connect_error, classify_http_error};
use crate::conn::Conn;
use crate::record::{ErrorKind, RequestRecord};
use crate::response::{exchange, State};
use crate::shared::{stopped, Shared, CUT_OFF};

/// A request's bytes: shared head prefix, its content-length line, its body.
pub(crate) struct Wire {
    prefix: Bytes,
    tail: Vec<u8>,
    body: Bytes,
}

impl Wire {
    fn len(&self) -> usize {
        self.prefix.len() + self.tail.len() + self.body.len()
    }

    fn parts(&self) -> [&[u8]; 3] {
        [&self.prefix, &self.tail, &self.body]
    }
}

/// How far the dispatcher got with a request.
enum Start {
    /// Written whole on an idle connection; the write started at `sent_ns`.
    Sent {
        conn: Conn,
        permit: OwnedSemaphorePermit,
        sent_ns: i64,
    },
    /// Partly written (`written` bytes, the write started at `sent_ns`) on an idle connection.
    Partial {
        conn: Conn,
        permit: OwnedSemaphorePermit,
        written: usize,
        sent_ns: i64,
    },
    /// Nothing written: the task gets a slot (if `permit` is None) and a connection (unless
    /// `conn` is one whose socket was full).
    Fresh {
        permit: Option<OwnedSemaphorePermit>,
        conn: Option<Conn>,
    },
}

/// Called on the dispatcher thread when request `index` is due: take a slot and an idle
/// connection to `replica` and write the request now if both are at hand, then hand the rest to
/// a task.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    shared: &Arc<Shared>,
    runtime: &Handle,
    index: usize,
    replica: usize,
    release_ns: i64,
    path: &str,
    own_headers: &[u8],
    body: Bytes,
) {
    let handed = Instant::now();
    let target = &shared.targets[replica];
    if let Some(open) = shared.in_flight.get(replica) {
        open.fetch_add(1, Ordering::Relaxed);
    }
    let (prefix, tail) = target.encoder.head(path, own_headers, body.len());
    let wire = Wire { prefix, tail, body };
    let mut conn_ns = -1;
    let mut dead = Vec::new();
    let start = match shared.permits.clone().try_acquire_owned() {
        Err(_) => Start::Fresh {
            permit: None,
            conn: None,
        },
        Ok(permit) => match target.pool.try_take(&mut dead) {
            None => Start::Fresh {
                permit: Some(permit),
                conn: None,
            },
            Some(mut conn) => {
                conn_ns = handed.elapsed().as_nanos() as i64;
                let [a, b, c] = wire.parts();
                let slices = [IoSlice::new(a), IoSlice::new(b), IoSlice::new(c)];
                // Stamped as the write starts (as wrk2 does): a write to a loopback socket
                // wakes the server's thread, which may preempt this one before the call
                // returns, and that wait is not the send's.
                let sent_ns = shared.now_ns();
                match conn.try_write_now(&slices) {
                    Ok(n) if n == wire.len() => {
                        shared.control.sent.fetch_add(1, Ordering::Relaxed);
                        Start::Sent {
                            conn,
                            permit,
                            sent_ns,
                        }
                    }
                    Ok(0) => Start::Fresh {
                        permit: Some(permit),
                        conn: Some(conn),
                    },
                    Ok(written) => Start::Partial {
                        conn,
                        permit,
                        written,
                        sent_ns,
                    },
                    // A broken idle connection: closed on a worker with the other dead ones, and
                    // the task opens a new one.
                    Err(_) => {
                        dead.push(conn);
                        Start::Fresh {
                            permit: Some(permit),
                            conn: None,
                        }
                    }
                }
            }
        },
    };
    let mut rec = RequestRecord::new(index);
    rec.replica = replica as u16;
    rec.release_ns = release_ns;
    rec.conn_ns = conn_ns;
    rec.keep_chunks = shared.keep_chunks;
    runtime.spawn(request_task(shared.clone(), rec, wire, start, handed));
    if !dead.is_empty() {
        runtime.spawn(async move { drop(dead) });
    }
}

async fn deadline(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending::<()>().await,
    }
}

fn stop_detail(stop: u8, sent: bool) -> (ErrorKind, &'static str) {
    match (stop, sent) {
        (CUT_OFF, false) => (ErrorKind::CutOff, "not sent: the drain ended"),
        (CUT_OFF, true) => (ErrorKind::CutOff, "still open when the drain ended"),
        (_, false) => (ErrorKind::Cancelled, "not sent: run cancelled"),
        (_, true) => (ErrorKind::Cancelled, "cancelled in flight"),
    }
}

/// Get the request on the wire: a slot, a connection, the rest of the write; stamps `conn_ns`
/// and `sent_ns`. Ok: the connection, the slot, and whether the connection had carried a request
/// before (from the pool). Err: why it never got there.
async fn put_on_wire(
    shared: &Shared,
    st: &mut State,
    wire: &Wire,
    start: Start,
    handed: Instant,
) -> Result<(Conn, OwnedSemaphorePermit, bool), (ErrorKind, String)> {
    let target = &shared.targets[st.rec.replica as usize];
    let (mut conn, permit, reused) =
        match start {
            Start::Sent {
                mut conn,
                permit,
                sent_ns,
            } => {
                st.rec.sent_ns = sent_ns;
                conn.flush()
                    .await
                    .map_err(|e| classify_http_error(&e.into()))?;
                return Ok((conn, permit, true));
            }
            Start::Partial {
                mut conn,
                permit,
                written,
                sent_ns,
            } => {
                st.rec.sent_ns = sent_ns;
                conn.write_rest(&wire.parts(), written)
                    .await
                    .map_err(|e| classify_http_error(&e.into()))?;
                shared.control.sent.fetch_add(1, Ordering::Relaxed);
                return Ok((conn, permit, true));
            }
            Start::Fresh {
                permit,
                conn: Some(conn),
            } => (conn, permit.expect("a slot comes with a connection"), true),
            Start::Fresh { permit, conn: None } => {
                let permit =
                    match permit {
                        Some(p) => p,
                        None => shared.permits.clone().acquire_owned().await.map_err(|_| {
                            (ErrorKind::Other, "connection slots closed".to_string())
                        })?,
                    };
                let (conn, reused) = match target.pool.take(&mut Vec::new()) {
                    Some(c) => (c, true),
                    None => match target.dialer.dial().await {
                        Ok(c) => (c, false),
                        Err(e) => {
                            st.rec.conn_ns = handed.elapsed().as_nanos() as i64;
                            return Err(classify_connect_error(&e));
                        }
                    },
                };
                st.rec.conn_ns = handed.elapsed().as_nanos() as i64;
                (conn, permit, reused)
            }
        };
    st.rec.sent_ns = shared.now_ns();
    conn.write_rest(&wire.parts(), 0)
        .await
        .map_err(|e| classify_http_error(&e.into()))?;
    shared.control.sent.fetch_add(1, Ordering::Relaxed);
    Ok((conn, permit, reused))
}

/// Read the answer on `conn` (see `response::exchange`); `resend` is the request's bytes when
/// `conn` had carried a request before. Such a connection may have been closed by the server
/// just as the request went out: llama.cpp's server, for one, closes every connection after a
/// streamed answer without saying `Connection: close`, and a request written in the µs before
/// its FIN arrives finds the socket reset with no answer. A request on a reused connection that
/// ends that way (reset or closed before any byte of a response came back, so the server never
/// answered it) is sent once more on a new connection, as HTTP clients do for a reused idle
/// connection (RFC 9112 §9.3.1); its `sent_ns` stays that of the first write, so the reconnect
/// counts in its TTFT. Each is counted in `Shared::resent`. Returns true when the connection
/// (then the new one) can carry another request.
async fn exchange_or_resend(
    shared: &Shared,
    st: &mut State,
    conn: &mut Conn,
    resend: Option<Wire>,
) -> bool {
    let reusable = exchange(shared, st, conn).await;
    let Some(wire) = resend else {
        return reusable;
    };
    if st.rec.first_byte_ns >= 0 || st.rec.error_kind != ErrorKind::Reset {
        return reusable;
    }
    shared.resent.fetch_add(1, Ordering::Relaxed);
    st.rec.clear_failure();
    let fresh = match shared.targets[st.rec.replica as usize].dialer.dial().await {
        Ok(c) => c,
        Err(e) => {
            let (kind, detail) = classify_connect_error(&e);
            st.end_with(kind, &detail, shared.now_ns());
            return false;
        }
    };
    *conn = fresh;
    if let Err(e) = conn.write_rest(&wire.parts(), 0).await {
        let (kind, detail) = classify_http_error(&e.into());
        st.end_with(kind, &detail, shared.now_ns());
        return false;
    }
    drop(wire);
    exchange(shared, st, conn).await
}

/// The task spawned for one request.
async fn request_task(
    shared: Arc<Shared>,
    rec: RequestRecord,
    wire: Wire,
    start: Start,
    handed: Instant,
) {
    let mut stop_rx = shared.stop_rx.clone();
    let wants = shared.answers.as_ref().is_some_and(|a| a.wants(rec.index));
    let mut st = State::new(rec);
    if wants {
        st.answer = Some(String::new());
    }
    let on_wire = {
        let put = put_on_wire(&shared, &mut st, &wire, start, handed);
        tokio::select! {
            biased;
            stop = stopped(&mut stop_rx) => Err(Some(stop)),
            r = put => r.map_err(|(kind, detail)| {
                let t = shared.now_ns();
                st.end_with(kind, &detail, t);
                None
            }),
        }
    };
    let (mut conn, permit, resend) = match on_wire {
        // Kept for a reused connection only (see `exchange_or_resend`); otherwise freed now.
        Ok((conn, permit, reused)) => (conn, permit, reused.then_some(wire)),
        Err(stop) => {
            if let Some(stop) = stop {
                let (kind, detail) = stop_detail(stop, false);
                st.rec.sent_ns = -1;
                st.end_with(kind, detail, shared.now_ns());
            }
            return finish(&shared, st);
        }
    };
    let due = shared.timeout.map(|d| tokio::time::Instant::now() + d);
    let outcome = {
        let exchange = exchange_or_resend(&shared, &mut st, &mut conn, resend);
        tokio::select! {
            biased;
            stop = stopped(&mut stop_rx) => Err(Some(stop)),
            _ = deadline(due) => Err(None),
            reusable = exchange => Ok(reusable),
        }
    };
    let t = shared.now_ns();
    match outcome {
        Ok(true) => shared.targets[st.rec.replica as usize].pool.put(conn),
        Ok(false) => {}
        Err(Some(stop)) => {
            let (kind, detail) = stop_detail(stop, true);
            st.end_with(kind, detail, t);
        }
        Err(None) => {
            let ms = shared.timeout.unwrap_or_default().as_millis();
            st.end_with(
                ErrorKind::Timeout,
                &format!("no complete response within {ms} ms"),
                t,
            );
        }
    }
    drop(permit);
    finish(&shared, st);
}

fn finish(shared: &Shared, st: State) {
    shared.control.completed.fetch_add(1, Ordering::Relaxed);
    if let Some(open) = shared.in_flight.get(st.rec.replica as usize) {
        open.fetch_sub(1, Ordering::Relaxed);
    }
    if st.rec.error_kind != ErrorKind::None {
        shared.control.errors.fetch_add(1, Ordering::Relaxed);
    }
    if let (Some(answers), Some(text)) = (&shared.answers, st.answer) {
        if st.rec.error_kind == ErrorKind::None {
            answers.keep(st.rec.index, text); // before the end releases the child
        }
    }
    if let Some(tx) = &shared.ends_tx {
        let end = if st.rec.end_ns >= 0 {
            st.rec.end_ns
        } else {
            shared.now_ns()
        };
        let _ = tx.send((st.rec.index, end));
    }
    let _ = shared.records_tx.send(st.rec);
}
