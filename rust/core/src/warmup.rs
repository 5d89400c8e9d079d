//! The warm-up before t0: keep-alive connections opened one after another, each checked by one
//! `GET /v1/models` answered in full, and put in the pool for the first requests. During the
//! run, `keep_warm` keeps that many open across quiet spells.

use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderMap;

use crate::client::{BaseUrl, Encoder, POOL_IDLE_TIMEOUT};
use crate::conn::Body;
use crate::shared::{stopped, Shared, Target};

/// How often the warm-keeper looks at the pool.
const KEEP_EVERY: Duration = Duration::from_millis(250);
/// Idle connections this old are replaced by fresh ones, well before the pool's idle timeout
/// (`POOL_IDLE_TIMEOUT`) would drop them.
const REFRESH_AFTER: Duration = Duration::from_secs(3);
const _: () =
    assert!(REFRESH_AFTER.as_millis() + KEEP_EVERY.as_millis() < POOL_IDLE_TIMEOUT.as_millis());

/// Keep `count` connections open for the rest of the run (the ones warm-up opened): every
/// `KEEP_EVERY`, idle connections older than `REFRESH_AFTER` or closed by the server are
/// dropped, and the pool is topped up to `count` less the requests in flight with new
/// connections, opened here, off any request's path. Without it a request due after a quiet
/// spell longer than the idle timeout (a trace's gap, or a first request seconds after t0)
/// found the pool empty and paid for a connect in its send lag. Ends with the run's stop signal
/// or its runtime. In a fleet, each replica's connections are kept so (`replica`), less its
/// own requests in flight.
pub(crate) async fn keep_warm(shared: Arc<Shared>, replica: usize, count: usize, slots: usize) {
    let mut tick = tokio::time::interval(KEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut stop_rx = shared.stop_rx.clone();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped(&mut stop_rx) => return,
        }
        let target = &shared.targets[replica];
        drop(target.pool.take_stale(REFRESH_AFTER));
        let in_flight = match shared.in_flight.get(replica) {
            Some(open) => open.load(std::sync::atomic::Ordering::Relaxed) as usize,
            None => slots.saturating_sub(shared.permits.available_permits()),
        };
        let missing = count
            .saturating_sub(in_flight)
            .saturating_sub(target.pool.idle_len());
        for _ in 0..missing {
            match target.dialer.dial().await {
                Ok(conn) => target.pool.put(conn),
                Err(_) => break, // the server is not taking connections now: try again next tick
            }
        }
    }
}

/// How long a warm-up connection may take to answer its `GET /v1/models`. A server that does
/// not answer a new connection that fast is queueing it (e.g. a thread-per-connection server
/// whose threads are all held by the connections opened before it), so warming stops there.
const WARM_ANSWER_TIMEOUT: Duration = Duration::from_millis(500);

/// Open `wanted` connections one after another, each checked by one `GET /v1/models` answered
/// in full, and put them in the pool. Returns how many were opened and why warming stopped
/// short ("" if it did not).
pub(crate) async fn warm_up(
    target: &Target,
    base: &BaseUrl,
    headers: &HeaderMap,
    wanted: usize,
) -> (usize, String) {
    let Ok(probe) = Encoder::get(base, headers, "/v1/models") else {
        return (0, "cannot build the warm-up request".into());
    };
    let mut opened = 0;
    while opened < wanted {
        let checked = async {
            let mut conn = target
                .dialer
                .dial()
                .await
                .map_err(|e| format!("connect: {e}"))?;
            conn.write_rest(&[&probe], 0)
                .await
                .map_err(|e| format!("write: {e}"))?;
            let head = conn.read_head().await.map_err(|e| e.to_string())?;
            let mut body = Body::new(&head);
            while conn
                .next_data(&mut body)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {}
            if !(head.keep_alive && conn.is_clean()) {
                return Err("the server closes connections after a response".to_string());
            }
            Ok(conn)
        };
        match tokio::time::timeout(WARM_ANSWER_TIMEOUT, checked).await {
            Ok(Ok(conn)) => {
                target.pool.put(conn);
                opened += 1;
            }
            Ok(Err(why)) => return (opened, why),
            Err(_) => {
                let ms = WARM_ANSWER_TIMEOUT.as_millis();
                return (
                    opened,
                    format!("connection {} got no answer within {ms} ms", opened + 1),
                );
            }
        }
    }
    (opened, String::new())
}
