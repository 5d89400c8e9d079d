//! Pinning threads to CPUs, so that the embedded engine and the runner that drives it do not
//! share a core.
//!
//! Threads inherit the CPU set of the thread that creates them, so pinning the thread that
//! starts a runtime pins the runtime's workers too. On Linux this is `sched_setaffinity`; on
//! other systems pinning is not done (and the call says so).

use std::io;

/// Restrict the calling thread to `cpus` (an empty list leaves it as it is).
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
