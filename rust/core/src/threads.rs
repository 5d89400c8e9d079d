//! The runner's own threads as the OS sees them: context-switch counts per thread, so that a
//! stage whose sends were late can say whether the runner lost the CPU.
//!
//! Linux keeps `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` per thread in
//! `/proc/<pid>/task/<tid>/status`. A thread notes its own path when it starts
//! (`/proc/thread-self` points at it), and anyone can read it later, even after the thread has
//! gone idle. Elsewhere every count is zero.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::record::Switches;

/// The status file of the calling thread, if the OS has one.
pub fn current_thread() -> Option<PathBuf> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    Some(PathBuf::from("/proc").join(link).join("status"))
}

/// The counts in a thread's status file (zero when unreadable, e.g. the thread has exited).
pub fn switches(status: &Option<PathBuf>) -> Switches {
    let Some(text) = status.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) else {
        return Switches::default();
    };
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim_start_matches(':').trim().parse().ok())
            .unwrap_or(0)
    };
    Switches {
        voluntary: field("voluntary_ctxt_switches"),
        involuntary: field("nonvoluntary_ctxt_switches"),
    }
}

/// Counts since `before`.
pub fn since(now: Switches, before: Switches) -> Switches {
    Switches {
        voluntary: now.voluntary.saturating_sub(before.voluntary),
        involuntary: now.involuntary.saturating_sub(before.involuntary),
    }
}

/// The status files of a runtime's worker threads (each registers itself on start).
#[derive(Debug, Default)]
pub struct Workers {
    paths: Mutex<Vec<Option<PathBuf>>>,
}

impl Workers {
    /// Called on each worker thread as it starts.
    pub fn register_current(&self) {
        self.paths.lock().expect("workers").push(current_thread());
    }

    /// The workers' counts added up (workers start at zero: they are new threads).
    pub fn total(&self) -> Switches {
        let paths = self.paths.lock().expect("workers");
        paths.iter().map(switches).fold(Switches::default(), |a, s| Switches {
            voluntary: a.voluntary + s.voluntary,
            involuntary: a.involuntary + s.involuntary,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_thread_switches_voluntarily() {
        let path = current_thread();
        if path.is_none() {
            return; // not Linux
        }
        let before = switches(&path);
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let d = since(switches(&path), before);
        assert!(d.voluntary >= 5, "{d:?}");
    }
}
