//! The runner's own threads as the OS sees them: context-switch counts per thread, so that a
//! stage whose sends were late can say whether the runner lost the CPU.
//!
//! Linux keeps `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` per thread in
//! `/proc/<pid>/task/<tid>/status`. A thread notes its own path when it starts
//! (`/proc/thread-self` points at it), and anyone can read it later, even after the thread has
//! gone idle. Elsewhere every count is zero.
//!
//! Also where the runner's threads run: the dispatcher's priority (`raise_priority`) and the
//! CPUs of the I/O threads (`pin_current_thread`).

use std::io;
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
    let Some(text) = status
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
    else {
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

/// The CPUs the calling thread may run on (empty where that is unknown, or not Linux).
pub fn current_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    // SAFETY: a zeroed cpu_set_t is the empty set, which sched_getaffinity fills; CPU_ISSET is
    // asked only about indexes below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}

/// Restrict the calling thread to `cpus` (an empty list leaves it as it is). Threads inherit
/// the CPU set of the thread that creates them.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is plain data, zeroed is the empty set; CPU_SET is given indexes
        // below CPU_SETSIZE (checked); pid 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in cpus {
                if cpu >= libc::CPU_SETSIZE as usize {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("cpu {cpu} is out of range"),
                    ));
                }
                libc::CPU_SET(cpu, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "pinning threads to CPUs is only done on Linux",
        ))
    }
}

/// Run the calling thread ahead of ordinary threads where the OS allows it: the real-time
/// policy `SCHED_FIFO` at the lowest priority (it then preempts ordinary threads the moment it
/// wakes) when the thread may run on at least two CPUs, else `nice -10` (a real-time thread
/// that spins would starve the runner's own I/O worker on a single CPU); both need root or
/// CAP_SYS_NICE. Without them, the shortest scheduler slice Linux (6.12 and later, EEVDF) lets
/// any thread ask for, [`SHORT_SLICE_NS`], with no timer slack: a waking thread with a shorter
/// slice than the running one preempts it, where an ordinary one may wait out the running
/// thread's slice (a few ms). Returns what was applied: "fifo", "nice", "slice" or "normal".
/// `REPLAY_DISPATCHER_PRIORITY=normal|slice|nice` caps it (for comparisons: "slice" is what a
/// user without privilege gets).
pub fn raise_priority() -> &'static str {
    let cap = std::env::var("REPLAY_DISPATCHER_PRIORITY").unwrap_or_default();
    #[cfg(target_os = "linux")]
    {
        if cap == "normal" {
            return "normal";
        }
        // SAFETY: plain syscalls on the calling thread with a valid, initialized sched_param
        // and a zeroed (empty) cpu_set_t that sched_getaffinity fills.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let cpus = if libc::sched_getaffinity(
                0,
                std::mem::size_of::<libc::cpu_set_t>(),
                &mut set,
            ) == 0
            {
                libc::CPU_COUNT(&set)
            } else {
                1
            };
            if cap != "nice" && cap != "slice" && cpus >= 2 {
                let param = libc::sched_param { sched_priority: 1 };
                if libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0
                {
                    return "fifo";
                }
            }
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            if cap != "slice" && libc::setpriority(libc::PRIO_PROCESS, tid, -10) == 0 {
                return "nice";
            }
            if set_slice(SHORT_SLICE_NS) {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
                return "slice";
            }
        }
        "normal"
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cap;
        "normal"
    }
}

/// Lower the calling thread's CPU priority, for an engine started beside the runner; threads it
/// starts afterwards inherit it. `"idle"`: the policy `SCHED_IDLE`, which any waking ordinary
/// thread preempts at once (and a CPU running only such threads counts as idle when the kernel
/// places a waking thread); `"nice"`: niceness 10, which only shares the CPU out by weight (an
/// ordinary thread that wakes may wait out the running one's slice, a few ms); `"normal"`:
/// nothing. Lowering one's own priority needs no privilege, where `raise_priority` needs root or
/// CAP_SYS_NICE. Returns what was applied ("normal" where the OS refused, or not Linux).
pub fn lower_priority(how: &str) -> &'static str {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread, with a valid, initialized sched_param.
    unsafe {
        match how {
            "idle" => {
                let param = libc::sched_param { sched_priority: 0 };
                if libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_IDLE, &param) == 0
                {
                    return "idle";
                }
                "normal"
            }
            "nice" => {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                if libc::setpriority(libc::PRIO_PROCESS, tid, 10) == 0 {
                    return "nice";
                }
                "normal"
            }
            _ => "normal",
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = how;
        "normal"
    }
}

/// Put the calling thread back to the ordinary policy (after `raise_priority`), with the default
/// timer slack.
pub fn restore_priority(applied: &str) {
    #[cfg(target_os = "linux")]
    // SAFETY: as in raise_priority.
    unsafe {
        match applied {
            "fifo" => {
                let param = libc::sched_param { sched_priority: 0 };
                libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_OTHER, &param);
                libc::prctl(libc::PR_SET_TIMERSLACK, 0 as libc::c_ulong);
            }
            "nice" => {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, 0);
            }
            "slice" => {
                set_slice(0);
                libc::prctl(libc::PR_SET_TIMERSLACK, 0 as libc::c_ulong);
            }
            _ => {}
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = applied;
}

/// The scheduler slice the dispatcher asks for where it may not run real-time: 0.1 ms, the
/// shortest Linux grants an ordinary thread.
pub const SHORT_SLICE_NS: u64 = 100_000;

/// `struct sched_attr` of sched_setattr(2) (its first version, 48 bytes).
#[cfg(target_os = "linux")]
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Ask for a scheduler slice of `ns` for the calling thread, keeping the ordinary policy and its
/// niceness (0: the default slice back). A kernel before 6.12 accepts and ignores it; false where
/// it refuses.
#[cfg(target_os = "linux")]
fn set_slice(ns: u64) -> bool {
    // SAFETY: plain syscalls on the calling thread; `attr` is a valid, initialized sched_attr
    // whose size field says how much of it the kernel may read.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        if nice == -1 && *libc::__errno_location() != 0 {
            return false;
        }
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            runtime: ns,
            deadline: 0,
            period: 0,
        };
        libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) == 0
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
        paths
            .iter()
            .map(switches)
            .fold(Switches::default(), |a, s| Switches {
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

    /// The calling thread's policy and scheduler slice (sched_getattr(2)).
    #[cfg(target_os = "linux")]
    fn policy_and_slice() -> (u32, u64) {
        let mut attr = std::mem::MaybeUninit::<SchedAttr>::zeroed();
        // SAFETY: the kernel writes at most `size` bytes into the zeroed buffer.
        unsafe {
            let size = std::mem::size_of::<SchedAttr>() as libc::c_uint;
            let r = libc::syscall(libc::SYS_sched_getattr, 0, attr.as_mut_ptr(), size, 0);
            assert_eq!(r, 0, "sched_getattr: {}", std::io::Error::last_os_error());
            let attr = attr.assume_init();
            (attr.policy, attr.runtime)
        }
    }

    /// Kernels from 6.12 keep an ordinary thread's own slice (EEVDF's custom slices).
    #[cfg(target_os = "linux")]
    fn keeps_custom_slices() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (major, minor) >= (6, 12)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_short_slice_is_set_and_given_back() {
        // on a thread of its own: the slice and the timer slack are per thread
        std::thread::spawn(|| {
            let (policy, default_slice) = policy_and_slice();
            assert_eq!(policy, libc::SCHED_OTHER as u32);
            assert!(set_slice(SHORT_SLICE_NS));
            if keeps_custom_slices() {
                assert_eq!(
                    policy_and_slice(),
                    (libc::SCHED_OTHER as u32, SHORT_SLICE_NS)
                );
            }
            restore_priority("slice");
            let (_, slice) = policy_and_slice();
            assert_eq!(slice, default_slice);
        })
        .join()
        .unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_idle_engine_thread_runs_under_sched_idle() {
        std::thread::spawn(|| {
            assert_eq!(lower_priority("idle"), "idle");
            assert_eq!(policy_and_slice().0, libc::SCHED_IDLE as u32);
            // the threads it starts inherit it
            let child = std::thread::spawn(|| policy_and_slice().0).join().unwrap();
            assert_eq!(child, libc::SCHED_IDLE as u32);
        })
        .join()
        .unwrap();
    }
}
