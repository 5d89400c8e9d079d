//! Schedule generation: rates, burstiness (CV), determinism under a seed, trace rescaling, errors.

use replay_core::{arrival_offsets, Arrivals, CoreError};

fn gaps(v: &[i64]) -> Vec<f64> {
    v.windows(2).map(|w| (w[1] - w[0]) as f64).collect()
}
fn mean_cv(x: &[f64]) -> (f64, f64) {
    let m = x.iter().sum::<f64>() / x.len() as f64;
    let var = x.iter().map(|g| (g - m) * (g - m)).sum::<f64>() / x.len() as f64;
    (m, var.sqrt() / m)
}
fn rate_of(v: &[i64]) -> f64 {
    (v.len() - 1) as f64 / ((v[v.len() - 1] - v[0]) as f64 / 1e9)
}
fn gen(kind: Arrivals, rate: f64, seed: u64) -> Vec<i64> {
    arrival_offsets(&kind, 20_000, Some(rate), None, &[], seed).unwrap()
}
fn assert_sorted_from_zero(v: &[i64]) {
    assert_eq!(v[0], 0);
    assert!(v.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn poisson_rate_and_cv() {
    let v = gen(Arrivals::Poisson, 500.0, 1);
    assert_sorted_from_zero(&v);
    assert!(
        (rate_of(&v) / 500.0 - 1.0).abs() < 0.03,
        "rate {}",
        rate_of(&v)
    );
    let (_, cv) = mean_cv(&gaps(&v));
    assert!((cv - 1.0).abs() < 0.05, "cv {cv}");
}

#[test]
fn gamma_rate_and_cv() {
    for (cv_target, seed) in [(0.5, 3u64), (2.0, 4), (4.0, 5)] {
        let v = gen(Arrivals::Gamma { cv: cv_target }, 200.0, seed);
        assert_sorted_from_zero(&v);
        // Mean-rate error of a sum of 20k gaps has relative sd cv/sqrt(20k) (~3% at cv 4).
        let tol = 0.02 + 3.0 * cv_target / (20_000f64).sqrt();
        assert!(
            (rate_of(&v) / 200.0 - 1.0).abs() < tol,
            "cv {cv_target}: rate {}",
            rate_of(&v)
        );
        let (_, cv) = mean_cv(&gaps(&v));
        assert!(
            (cv / cv_target - 1.0).abs() < 0.05,
            "target {cv_target}, got {cv}"
        );
    }
}

#[test]
fn gamma_cv_one_is_poisson_like() {
    let (_, cv) = mean_cv(&gaps(&gen(Arrivals::Gamma { cv: 1.0 }, 100.0, 9)));
    assert!((cv - 1.0).abs() < 0.05, "cv {cv}");
}

#[test]
fn constant_exact_spacing() {
    let v = gen(Arrivals::Constant, 1000.0, 0);
    assert!(v
        .iter()
        .enumerate()
        .all(|(i, &t)| t == i as i64 * 1_000_000));
    let v = arrival_offsets(&Arrivals::Constant, 4, Some(3.0), None, &[], 0).unwrap();
    assert_eq!(v, vec![0, 333_333_333, 666_666_667, 1_000_000_000]);
}

#[test]
fn seeds_are_deterministic() {
    assert_eq!(
        gen(Arrivals::Poisson, 10.0, 42),
        gen(Arrivals::Poisson, 10.0, 42)
    );
    assert_ne!(
        gen(Arrivals::Poisson, 10.0, 42),
        gen(Arrivals::Poisson, 10.0, 43)
    );
    let g = Arrivals::Gamma { cv: 2.0 };
    assert_eq!(gen(g.clone(), 10.0, 7), gen(g.clone(), 10.0, 7));
    assert_ne!(gen(g.clone(), 10.0, 7), gen(g, 10.0, 8));
}

#[test]
fn trace_rescale_keeps_shape_and_hits_rate() {
    // A bursty trace starting at an arbitrary epoch-like offset.
    let base = 1_700_000_000_000_000_000i64;
    let gaps_ns = [
        0i64,
        5_000_000,
        1_000_000,
        900_000_000,
        2_000_000,
        0,
        300_000_000,
        7_000_000,
    ];
    let mut trace = Vec::new();
    let mut t = base;
    for g in gaps_ns.iter().cycle().take(2001) {
        t += g;
        trace.push(t);
    }
    let n = 2000;
    let v = arrival_offsets(&Arrivals::Trace, n, Some(250.0), None, &trace, 0).unwrap();
    assert_eq!(v.len(), n);
    assert_sorted_from_zero(&v);
    assert!(
        (rate_of(&v) / 250.0 - 1.0).abs() < 1e-6,
        "rate {}",
        rate_of(&v)
    );
    let (_, cv_in) = mean_cv(&gaps(&trace[..n]));
    let (_, cv_out) = mean_cv(&gaps(&v));
    assert!(
        (cv_out / cv_in - 1.0).abs() < 1e-6,
        "cv {cv_in} -> {cv_out}"
    );
    // Speedup divides time.
    let s = arrival_offsets(&Arrivals::Trace, 4, None, Some(2.0), &trace, 0).unwrap();
    assert_eq!(s, vec![0, 2_500_000, 3_000_000, 453_000_000]);
    let same = arrival_offsets(&Arrivals::Trace, 4, None, Some(1.0), &trace, 0).unwrap();
    assert_eq!(same, vec![0, 5_000_000, 6_000_000, 906_000_000]);
}

#[test]
fn empty_and_single() {
    assert!(
        arrival_offsets(&Arrivals::Poisson, 0, Some(1.0), None, &[], 0)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        arrival_offsets(&Arrivals::Poisson, 1, Some(1.0), None, &[], 0).unwrap(),
        vec![0]
    );
    assert_eq!(
        arrival_offsets(&Arrivals::Trace, 1, Some(5.0), None, &[77], 0).unwrap(),
        vec![0]
    );
}

fn field_of(r: Result<Vec<i64>, CoreError>) -> &'static str {
    match r {
        Err(CoreError::Config { field, .. }) => field,
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn error_cases() {
    let p = Arrivals::Poisson;
    assert_eq!(
        field_of(arrival_offsets(&p, 5, Some(0.0), None, &[], 0)),
        "rate"
    );
    assert_eq!(
        field_of(arrival_offsets(&p, 5, Some(-1.0), None, &[], 0)),
        "rate"
    );
    assert_eq!(
        field_of(arrival_offsets(&p, 5, Some(f64::NAN), None, &[], 0)),
        "rate"
    );
    assert_eq!(field_of(arrival_offsets(&p, 5, None, None, &[], 0)), "rate");
    assert_eq!(
        field_of(arrival_offsets(&p, 5, Some(1.0), Some(2.0), &[], 0)),
        "speedup"
    );
    let g = Arrivals::Gamma { cv: 0.0 };
    assert_eq!(
        field_of(arrival_offsets(&g, 5, Some(1.0), None, &[], 0)),
        "cv"
    );
    let g = Arrivals::Gamma { cv: -2.0 };
    assert_eq!(
        field_of(arrival_offsets(&g, 5, Some(1.0), None, &[], 0)),
        "cv"
    );
    let t = Arrivals::Trace;
    let trace = [0, 10, 20, 30];
    assert_eq!(
        field_of(arrival_offsets(&t, 3, Some(1.0), Some(1.0), &trace, 0)),
        "rate"
    );
    assert_eq!(
        field_of(arrival_offsets(&t, 3, None, None, &trace, 0)),
        "rate"
    );
    assert_eq!(
        field_of(arrival_offsets(&t, 3, None, Some(0.0), &trace, 0)),
        "speedup"
    );
    assert_eq!(
        field_of(arrival_offsets(&t, 5, Some(1.0), None, &trace, 0)),
        "trace_offsets_ns"
    );
    assert_eq!(
        field_of(arrival_offsets(&t, 3, Some(1.0), None, &[0, 20, 10], 0)),
        "trace_offsets_ns"
    );
    assert_eq!(
        field_of(arrival_offsets(&t, 3, Some(1.0), None, &[5, 5, 5], 0)),
        "trace_offsets_ns"
    );
    // Offsets past i64 ns are refused rather than wrapped.
    assert_eq!(
        field_of(arrival_offsets(
            &Arrivals::Constant,
            3,
            Some(1e-12),
            None,
            &[],
            0
        )),
        "rate"
    );
}
