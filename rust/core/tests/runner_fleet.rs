//! A fleet: one schedule sent to several replicas, each request routed as it is sent, and each
//! record saying which replica it went to.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use replay_core::route::Policy;
use replay_core::{run_streamed, RouteKeys, RunConfig, RunControl, Schedule};

fn servers(n: usize) -> Vec<common::TestServer> {
    (0..n).map(|_| common::start()).collect()
}

fn fleet_config(servers: &[common::TestServer], route: Policy) -> RunConfig {
    RunConfig {
        more_urls: servers[1..].iter().map(|s| s.url()).collect(),
        route,
        ..common::config(servers[0].url())
    }
}

/// The request indexes each server saw (its POSTs, not the warm-up probes).
fn seen(servers: &[common::TestServer]) -> Vec<Vec<usize>> {
    servers
        .iter()
        .map(|s| {
            let mut v: Vec<usize> = s
                .arrivals
                .lock()
                .unwrap()
                .iter()
                .filter(|a| a.path != "/v1/models")
                .map(|a| common::index_of(&a.body))
                .collect();
            v.sort();
            v
        })
        .collect()
}

fn schedule(paths: &[&str], offsets_ns: &[i64], route: RouteKeys) -> (Schedule, Vec<Bytes>) {
    let reqs = paths
        .iter()
        .zip(offsets_ns)
        .enumerate()
        .map(|(i, (p, &o))| common::planned(p, i, o))
        .collect();
    let (mut s, bodies) = Schedule::of(reqs).unwrap();
    s.route = route;
    (s, bodies)
}

#[test]
fn round_robin_spreads_and_records_say_where() {
    let fleet = servers(3);
    let n = 9;
    let (s, bodies) = schedule(
        &vec!["/sse?chunks=2"; n],
        &(0..n as i64).map(|i| i * 2_000_000).collect::<Vec<_>>(),
        RouteKeys::default(),
    );
    let cfg = RunConfig {
        warm_connections: 3,
        ..fleet_config(&fleet, Policy::RoundRobin)
    };
    let r = run_streamed(&cfg, s, bodies, Arc::new(RunControl::default()), None).unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    assert_eq!(r.replica, vec![0, 1, 2, 0, 1, 2, 0, 1, 2]);
    assert_eq!(
        seen(&fleet),
        vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5, 8]]
    );
    // the warm connections were shared out: one per replica
    assert_eq!(r.stats.warm_opened, 3);
    for s in &fleet {
        let probes = s
            .arrivals
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.path == "/v1/models")
            .count();
        assert_eq!(probes, 1);
    }
}

#[test]
fn session_keeps_a_session_on_one_replica() {
    let fleet = servers(3);
    // sessions 7, 8, 9 interleaved; request 6 has none
    let sessions = vec![7u64, 8, 9, 7, 8, 9, 0, 7, 9];
    let n = sessions.len();
    let (s, bodies) = schedule(
        &vec!["/sse?chunks=1"; n],
        &(0..n as i64).map(|i| i * 2_000_000).collect::<Vec<_>>(),
        RouteKeys {
            sessions: sessions.clone(),
            ..RouteKeys::default()
        },
    );
    let r = run_streamed(
        &fleet_config(&fleet, Policy::Session),
        s,
        bodies,
        Arc::new(RunControl::default()),
        None,
    )
    .unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    for (i, &si) in sessions.iter().enumerate() {
        for (j, &sj) in sessions.iter().enumerate() {
            if si != 0 && si == sj {
                assert_eq!(r.replica[i], r.replica[j], "session {si}: {:?}", r.replica);
            }
        }
    }
    // three sessions, three replicas: one each
    let mut firsts = vec![r.replica[0], r.replica[1], r.replica[2]];
    firsts.sort();
    assert_eq!(firsts, vec![0, 1, 2]);
    // what each server saw is what the records say
    let seen = seen(&fleet);
    for (i, &rep) in r.replica.iter().enumerate() {
        assert!(seen[rep as usize].contains(&i), "request {i}: {seen:?}");
    }
}

#[test]
fn prefix_follows_shared_blocks() {
    let fleet = servers(2);
    // requests 0 and 1 start two prefixes; 2..6 each extend one of them
    let blocks: Vec<Vec<u64>> = vec![
        vec![1, 2],
        vec![5, 6],
        vec![5, 6, 7],
        vec![1, 2, 3],
        vec![1, 9],
        vec![5, 6, 7, 8],
    ];
    let mut keys = RouteKeys {
        block_offsets: vec![0],
        ..RouteKeys::default()
    };
    for b in &blocks {
        keys.blocks.extend_from_slice(b);
        keys.block_offsets.push(keys.blocks.len() as u64);
    }
    let n = blocks.len();
    let (s, bodies) = schedule(
        &vec!["/sse?chunks=1"; n],
        &(0..n as i64).map(|i| i * 2_000_000).collect::<Vec<_>>(),
        keys,
    );
    let r = run_streamed(
        &fleet_config(&fleet, Policy::Prefix),
        s,
        bodies,
        Arc::new(RunControl::default()),
        None,
    )
    .unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    let a = r.replica[0];
    let b = r.replica[1];
    assert_ne!(a, b);
    assert_eq!(r.replica, vec![a, b, b, a, a, b]);
}

#[test]
fn least_loaded_avoids_a_busy_replica() {
    let fleet = servers(3);
    // request 0 holds its replica 600 ms before its first token; the next ones come while it
    // is open, 100 ms apart, and finish at once
    let (s, bodies) = schedule(
        &["/queued", "/sse?chunks=1", "/sse?chunks=1", "/sse?chunks=1"],
        &[0, 100_000_000, 200_000_000, 300_000_000],
        RouteKeys::default(),
    );
    let r = run_streamed(
        &fleet_config(&fleet, Policy::LeastLoaded),
        s,
        bodies,
        Arc::new(RunControl::default()),
        None,
    )
    .unwrap();
    assert!(r.error_kind.iter().all(|&k| k == 0), "{:?}", r.error_detail);
    let busy = r.replica[0];
    assert!(r.replica[1..].iter().all(|&x| x != busy), "{:?}", r.replica);
}

#[test]
fn a_bad_replica_url_is_named() {
    let fleet = servers(1);
    let cfg = RunConfig {
        more_urls: vec!["ftp://nowhere:1".into()],
        ..common::config(fleet[0].url())
    };
    let (s, bodies) = schedule(&["/sse"], &[0], RouteKeys::default());
    let e = run_streamed(&cfg, s, bodies, Arc::new(RunControl::default()), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ftp://nowhere:1"), "{e}");
}
