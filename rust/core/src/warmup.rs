//! The warm-up before t0: keep-alive connections opened one after another, each checked by one
//! `GET /v1/models` answered in full, and put in the pool for the first requests.

use std::time::Duration;

use http::header::HeaderMap;

use crate::client::{BaseUrl, Encoder};
use crate::conn::{Body, Conn};
use crate::exchange::Shared;

/// How long a warm-up connection may take to answer its `GET /v1/models`. A server that does
/// not answer a new connection that fast is queueing it (e.g. a thread-per-connection server
/// whose threads are all held by the connections opened before it), so warming stops there.
const WARM_ANSWER_TIMEOUT: Duration = Duration::from_millis(500);

/// Open `wanted` connections one after another, each checked by one `GET /v1/models` answered
/// in full, and put them in the pool. Returns how many were opened and why warming stopped
/// short ("" if it did not).
pub(crate) async fn warm_up(
    shared: &Shared,
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
            let mut conn = Conn::connect(&shared.addrs, shared.connect_timeout)
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
                shared.pool.put(conn);
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
