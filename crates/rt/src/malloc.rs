//! Daemon-wide malloc settings: keep freed memory instead of returning it to the kernel.
//!
//! glibc's malloc gives memory back to the kernel in two ways: a block of at least
//! `M_MMAP_THRESHOLD` bytes gets its own `mmap` and is unmapped when freed, and free
//! memory at the top of a heap beyond `M_TRIM_THRESHOLD` is released (`brk` shrink or
//! `MADV_DONTNEED`). By default the mmap threshold starts at 128 KiB and rises to the
//! size of the largest mmapped block freed so far, and the trim threshold is twice that.
//! An OSD receiving 4 MiB writes therefore released and faulted in every payload buffer
//! again: 3,330 page faults per size-3 4 MiB overwrite across three OSDs, against 166
//! pages of real growth (BENCHMARKS.md, "Page faults per write"). On this project's VMs
//! a page fault costs 2 to 48 µs; the fix cut OSD CPU per 4 MiB overwrite by 23–38%.
//!
//! [`keep_freed_memory`] fixes both thresholds: blocks below 32 MiB (glibc's largest
//! mmap threshold on 64-bit) come from the heap, and up to 64 MiB of free memory at the
//! top of a heap stays in the process. Peak memory does not change (what a daemon
//! keeps, it held at its peak), and memory beyond 64 MiB per heap is still returned.

/// Blocks at least this large get their own mapping. glibc accepts at most
/// `HEAP_MAX_SIZE / 2`, 32 MiB on 64-bit targets; a 4 MiB write's buffers stay below it.
pub const MMAP_THRESHOLD_BYTES: usize = 32 * 1024 * 1024;
/// Free memory at the top of a heap kept for reuse; beyond it, the rest is released.
pub const TRIM_THRESHOLD_BYTES: usize = 64 * 1024 * 1024;
const _: () = assert!(MMAP_THRESHOLD_BYTES <= i32::MAX as usize);
const _: () = assert!(TRIM_THRESHOLD_BYTES <= i32::MAX as usize);
const _: () = assert!(TRIM_THRESHOLD_BYTES >= MMAP_THRESHOLD_BYTES);

/// Environment variables through which an operator already chose malloc settings; if
/// any is set, [`keep_freed_memory`] leaves malloc alone (so experiments can still
/// compare settings without a rebuild).
const OPERATOR_SETTINGS: [&str; 3] = [
    "GLIBC_TUNABLES",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
];

/// What [`keep_freed_memory`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MallocSetup {
    Applied,
    /// The operator's environment already chose malloc settings.
    LeftToEnvironment,
    /// The C library is not glibc.
    Unsupported,
    /// glibc refused a value (a 32-bit target accepts a smaller mmap threshold); the
    /// defaults stay, which is slower for large writes but correct.
    Rejected,
}

/// Sets the thresholds above, once, before the daemon's threads start. Returns what it
/// did; a daemon logs it.
pub fn keep_freed_memory() -> MallocSetup {
    let operator_chose = OPERATOR_SETTINGS.iter().any(|name| {
        std::env::var_os(name).is_some_and(|value| {
            *name != "GLIBC_TUNABLES" || value.to_string_lossy().contains("glibc.malloc.")
        })
    });
    if operator_chose {
        return MallocSetup::LeftToEnvironment;
    }
    set_thresholds()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_thresholds() -> MallocSetup {
    // The mmap threshold first: glibc changes nothing when it refuses it, while any
    // accepted setting turns the dynamic thresholds off for good (a fixed 128 KiB mmap
    // threshold would map and unmap every receive buffer).
    let settings = [
        (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
    ];
    for (parameter, bytes) in settings {
        let value = libc::c_int::try_from(bytes).expect("checked at compile time");
        // SAFETY: mallopt only changes malloc's own parameters, takes no pointers, and
        // is safe to call at any time (glibc takes its arena lock).
        if unsafe { libc::mallopt(parameter, value) } != 1 {
            return MallocSetup::Rejected;
        }
    }
    MallocSetup::Applied
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() -> MallocSetup {
    MallocSetup::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings are accepted by this C library (glibc refuses an mmap threshold
    /// above its maximum), and a burst of large blocks freed together is kept for the
    /// next burst. With glibc's defaults the 16 MiB freed at once exceed the trim
    /// threshold (twice the largest mmapped block freed, 4 MiB here), go back to the
    /// kernel and are faulted in again every round: about 4,100 faults per round.
    #[test]
    #[cfg(target_os = "linux")]
    fn thresholds_are_accepted_and_freed_bursts_reused() {
        const BLOCK_BYTES: usize = 4 * 1024 * 1024;
        const BLOCKS: usize = 4;
        const ROUNDS: u8 = 10;
        if keep_freed_memory() != MallocSetup::Applied {
            return;
        }
        let faults_before = minor_faults();
        for round in 0..ROUNDS {
            let blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|_| vec![round + 1; BLOCK_BYTES]).collect();
            assert!(blocks
                .iter()
                .all(|block| block[BLOCK_BYTES - 1] == round + 1));
            drop(std::hint::black_box(blocks));
        }
        let faults = minor_faults() - faults_before;
        // Faulting the burst in once is expected (1,024 pages per block); every round is not.
        let pages_per_burst = (BLOCKS * BLOCK_BYTES / 4096) as u64;
        assert!(
            faults < 2 * pages_per_burst,
            "{faults} page faults for {ROUNDS} bursts of {pages_per_burst} pages"
        );
    }

    #[cfg(target_os = "linux")]
    fn minor_faults() -> u64 {
        // This thread's own count: tests run in parallel in one process.
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("procfs");
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .expect("comm")
            .1
            .split_whitespace()
            .collect();
        fields[7].parse().expect("minflt")
    }
}
