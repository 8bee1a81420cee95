//! The binary's heap policy: memory freed after a burst of work goes back to the kernel.
//!
//! A listing of 10,000 records allocates tens of MiB for a second and frees it all, but glibc
//! keeps freed memory inside its arenas (one per thread that allocated, up to eight a core)
//! unless it sits at an arena's very top, so the registry used to stay at its peak (121 MiB at
//! 9,000 records while it holds about 20). Invariant kept here: after any burst, within about
//! [`TRIM_EVERY`], the resident set is what the heap holds plus what glibc cannot give back
//! (partly used pages), never every arena's past peak. Nothing here on other C libraries.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use std::ffi::c_int;
    use std::time::Duration;

    unsafe extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
        fn malloc_trim(pad: usize) -> c_int;
    }

    /// `M_MMAP_THRESHOLD` from glibc's `malloc.h`.
    const M_MMAP_THRESHOLD: c_int = -3;
    /// `M_ARENA_MAX` from glibc's `malloc.h`.
    const M_ARENA_MAX: c_int = -8;

    /// Blocks this large or larger are mapped on their own and unmapped when freed. Setting it
    /// also stops glibc raising it after each such free (up to 32 MiB), which would otherwise
    /// put a listing's multi-MiB vectors and JSON body inside an arena, where they stay.
    const MMAP_THRESHOLD: c_int = 256 * 1024;
    /// Two arenas for two runtime workers and the blocking pool: each arena keeps its own past
    /// peak, so fewer arenas hold less; contention stays low since most work is on the workers.
    const ARENA_MAX: c_int = 2;
    /// How often the resident set is looked at.
    pub const TRIM_EVERY: Duration = Duration::from_secs(1);
    /// Growth of the resident set since the last trim that is worth a trim (which walks every
    /// arena's free chunks): below it, what is free is not worth the walk.
    const TRIM_ABOVE_KIB: u64 = 4 * 1024;

    pub fn return_freed_memory() {
        // SAFETY: mallopt only sets allocator parameters; called before any other thread
        // exists, so no allocation races with the change.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            mallopt(M_ARENA_MAX, ARENA_MAX);
        }
        let trimmer = std::thread::Builder::new()
            .name("heap-trim".to_owned())
            .stack_size(64 * 1024)
            .spawn(trim_after_bursts);
        if let Err(error) = trimmer {
            eprintln!("warning: freed memory will stay with the allocator: {error}");
        }
    }

    /// Forever: when the resident set grew by [`TRIM_ABOVE_KIB`] since the last look that
    /// trimmed, give every free page of every arena back.
    fn trim_after_bursts() {
        let mut settled = resident_kib();
        loop {
            std::thread::sleep(TRIM_EVERY);
            let now = resident_kib();
            if now > settled + TRIM_ABOVE_KIB {
                // SAFETY: malloc_trim takes each arena's lock itself; any thread may call it.
                unsafe { malloc_trim(0) };
                settled = resident_kib();
            } else {
                settled = settled.min(now);
            }
        }
    }

    /// `VmRSS` of this process, in KiB; 0 when it cannot be read (then nothing is trimmed on
    /// account of it).
    fn resident_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status.lines().find_map(|line| {
                    line.strip_prefix("VmRSS:")
                        .and_then(|kib| kib.trim().trim_end_matches(" kB").parse().ok())
                })
            })
            .unwrap_or(0)
    }
}

/// Set the allocator up to give freed memory back, and start the thread that trims it.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::return_freed_memory();
}
