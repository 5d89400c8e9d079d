//! The open-loop dispatcher: runs on a plain OS thread (never a tokio worker), waits for each
//! request's absolute deadline `t0 + offset_ns` by sleeping until shortly before it and spinning
//! the rest, then spawns the request onto the runtime without waiting for earlier ones.
//!
//! Deadlines are always absolute, so a late wake-up never shifts later requests. Requests due
//! at the same instant go out back to back. `cancel` is polled at least every `CANCEL_POLL`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Time before a deadline at which the thread stops sleeping and busy-spins. Linux `nanosleep`
/// usually overshoots by 50–100 µs (timer slack); the margin absorbs that. The spin does not
/// yield: on a contended core a yield can cost a whole scheduler slice (milliseconds).
pub const SPIN_WINDOW: Duration = Duration::from_micros(300);

/// Longest sleep between checks of the cancel flag.
pub const CANCEL_POLL: Duration = Duration::from_millis(10);

/// Block until `deadline` (returns true), or until `cancel` is set (returns false).
pub fn wait_until(deadline: Instant, cancel: &AtomicBool) -> bool {
    loop {
        if cancel.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        let left = deadline - now;
        if left > SPIN_WINDOW {
            std::thread::sleep((left - SPIN_WINDOW).min(CANCEL_POLL));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Result of a dispatch pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatched {
    /// How many items were handed to `launch` (a prefix of the schedule).
    pub count: usize,
    /// The pass stopped early because `cancel` was set.
    pub cancelled: bool,
}

/// Hand each item to `launch` at `t0 + offset_ns` (offsets nondecreasing, checked by the
/// caller). Stops early, without launching more, once `cancel` is set.
pub fn dispatch_all<T>(
    t0: Instant,
    items: impl IntoIterator<Item = (i64, T)>,
    cancel: &AtomicBool,
    mut launch: impl FnMut(T),
) -> Dispatched {
    let mut count = 0;
    for (offset_ns, item) in items {
        let due = t0 + Duration::from_nanos(offset_ns.max(0) as u64);
        if !wait_until(due, cancel) {
            return Dispatched {
                count,
                cancelled: true,
            };
        }
        launch(item);
        count += 1;
    }
    Dispatched {
        count,
        cancelled: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn launches_on_absolute_deadlines() {
        let cancel = AtomicBool::new(false);
        let t0 = Instant::now();
        let offsets = [0i64, 2_000_000, 2_000_000, 5_000_000, 12_000_000];
        let mut late_ns = Vec::new();
        let d = dispatch_all(t0, offsets.iter().map(|&o| (o, o)), &cancel, |o| {
            let at = t0.elapsed().as_nanos() as i64;
            assert!(at >= o, "launched early: {at} < {o}");
            late_ns.push(at - o);
        });
        assert_eq!(
            d,
            Dispatched {
                count: 5,
                cancelled: false
            }
        );
        // Generous bound (shared CI machines); typical lateness is a few microseconds.
        assert!(late_ns.iter().all(|&l| l < 20_000_000), "{late_ns:?}");
    }

    #[test]
    fn cancel_stops_a_long_wait_quickly() {
        let cancel = Arc::new(AtomicBool::new(false));
        let c2 = cancel.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            c2.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        let mut launched = 0;
        let d = dispatch_all(t0, [(0i64, ()), (10_000_000_000, ())], &cancel, |_| {
            launched += 1
        });
        setter.join().unwrap();
        assert_eq!(
            d,
            Dispatched {
                count: 1,
                cancelled: true
            }
        );
        assert_eq!(launched, 1);
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "cancel took {:?}",
            t0.elapsed()
        );
    }
}
