//! The engines behind one HTTP front: one engine, or a fleet of replicas and the router that
//! picks one for each request.
//!
//! Owns `Fleet` and `Replica`. With `--replicas N` (N > 1) the server runs N engines in one
//! process, each with its own scheduler, KV cache and prefix cache, metrics and modelled clock,
//! as N separate GPUs would be; the front tokenizes a request once and the router
//! (`replay_core::route::Router`, the policies the runner's client-side routing uses too) picks
//! its replica from the request's session (the `--session-header` header's value, hashed), its
//! prompt's chained block hashes (the ones the replica's prefix cache then looks up: hashed
//! once, `kv::block_hashes`) and each replica's requests in flight. With one replica there is
//! no router in the path: no hashing, no lock, the one engine gets every request.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderName};
use tokio::sync::mpsc;

use crate::engine::Submission;
use crate::kv::{block_hashes, mix};
use crate::metrics::{self, Metrics};
use replay_core::route::{Policy, Router};

/// The response header in which a fleet says which replica (0, 1, ...) served a request.
pub const REPLICA_HEADER: &str = "x-replay-replica";

/// One engine of the fleet, as the front sees it.
pub struct Replica {
    pub engine: mpsc::UnboundedSender<Submission>,
    pub metrics: Arc<Mutex<Metrics>>,
    /// `POST /reset_prefix_cache` raises it (the engine applies it before its next request).
    pub cache_resets: Arc<AtomicU64>,
    /// Requests handed to it and not finished (the engine lowers it).
    pub in_flight: Arc<AtomicU32>,
}

/// The replicas and, with more than one, the router.
pub struct Fleet {
    pub replicas: Vec<Replica>,
    router: Option<Mutex<Router>>,
    session_header: HeaderName,
    block_size: u32,
}

/// A routed request: its replica and, when the router hashed its prompt, the block hashes.
pub struct Routed {
    pub replica: usize,
    pub hashes: Vec<u64>,
}

impl Fleet {
    /// `replicas` behind a router of `router`'s policy when there are more than one; under
    /// `prefix` the router remembers as many blocks per replica as a replica's KV cache holds
    /// (`num_blocks`). `session_header` must be a valid header name (`EngineConfig::resolve`).
    pub fn new(
        replicas: Vec<Replica>,
        router: Policy,
        session_header: &str,
        block_size: u32,
        num_blocks: u32,
    ) -> Fleet {
        let n = replicas.len();
        Fleet {
            replicas,
            router: (n > 1)
                .then(|| Mutex::new(Router::with_memory(router, n, num_blocks.max(1) as usize))),
            session_header: HeaderName::from_bytes(session_header.as_bytes())
                .expect("a header name checked by resolve"),
            block_size,
        }
    }

    /// The request's session for the router (None without a router, or without the header).
    pub fn session(&self, headers: &HeaderMap) -> Option<u64> {
        self.router.as_ref()?;
        headers
            .get(&self.session_header)
            .map(|v| session_hash(v.as_bytes()))
    }

    /// Pick the replica for a request of `session` (`Fleet::session`) and `prompt` (replica 0
    /// without a router), and count it in flight there.
    pub fn route(&self, session: Option<u64>, prompt: &[u32]) -> Routed {
        let routed = match &self.router {
            None => Routed {
                replica: 0,
                hashes: Vec::new(),
            },
            Some(router) => {
                let hashes = block_hashes(prompt, self.block_size);
                let in_flight: Vec<u32> = self
                    .replicas
                    .iter()
                    .map(|r| r.in_flight.load(Ordering::Acquire))
                    .collect();
                let pick = router
                    .lock()
                    .expect("router")
                    .pick(session, &hashes, &in_flight);
                Routed {
                    replica: pick.min(self.replicas.len() - 1),
                    hashes,
                }
            }
        };
        self.replicas[routed.replica]
            .in_flight
            .fetch_add(1, Ordering::AcqRel);
        routed
    }

    /// Hand `sub` to replica `i` (counted in flight by `route`); false when it is shutting down.
    pub fn submit(&self, i: usize, sub: Submission) -> bool {
        let r = &self.replicas[i];
        let sent = r.engine.send(sub).is_ok();
        if !sent {
            r.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        sent
    }

    /// A fleet's answer names the replica that served it (`REPLICA_HEADER`); one engine's is
    /// left as it is.
    pub fn mark<B>(&self, mut resp: http::Response<B>, replica: usize) -> http::Response<B> {
        if self.router.is_some() {
            resp.headers_mut()
                .insert(REPLICA_HEADER, http::HeaderValue::from(replica));
        }
        resp
    }

    /// Ask every replica to drop its cached prefixes.
    pub fn reset_prefix_caches(&self) {
        for r in &self.replicas {
            r.cache_resets.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// GET /metrics: one engine's series, or the fleet's totals and each replica's.
    pub fn metrics_text(&self) -> String {
        let guards: Vec<_> = self
            .replicas
            .iter()
            .map(|r| r.metrics.lock().expect("metrics"))
            .collect();
        let parts: Vec<&Metrics> = guards.iter().map(|g| &**g).collect();
        metrics::render_fleet(&parts)
    }

    /// GET /sim/requests over every replica.
    pub fn modelled_json(&self) -> String {
        let guards: Vec<_> = self
            .replicas
            .iter()
            .map(|r| r.metrics.lock().expect("metrics"))
            .collect();
        let parts: Vec<&Metrics> = guards.iter().map(|g| &**g).collect();
        metrics::modelled_json(&parts)
    }
}

/// A session header's value as the router's key.
pub fn session_hash(value: &[u8]) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for chunk in value.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = mix(h ^ u64::from_le_bytes(word));
    }
    mix(h ^ value.len() as u64)
}
