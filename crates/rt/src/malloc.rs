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

    /// The settings are accepted by this C library (glibc rejects an mmap threshold
    /// above its maximum) and freed large blocks are then reused, not faulted in again.
    #[test]
    #[cfg(target_os = "linux")]
    fn thresholds_are_accepted_and_large_blocks_reused() {
        let setup = keep_freed_memory();
        if setup != MallocSetup::Applied {
            return;
        }
        let faults_before = minor_faults();
        for round in 0..20u8 {
            let block = vec![round; 4 * 1024 * 1024];
            assert_eq!(block[block.len() - 1], round);
            drop(std::hint::black_box(block));
        }
        let faults = minor_faults() - faults_before;
        // One 4 MiB block is 1,024 pages: faulting it in once is fine, twenty times is not.
        assert!(
            faults < 5 * 1024,
            "{faults} page faults for 20 reused 4 MiB blocks"
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
