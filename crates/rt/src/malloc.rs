//! The memory allocator of every Carmine process, and the daemon-wide settings that keep
//! freed memory for reuse instead of returning it to the kernel at once.
//!
//! **mimalloc, not glibc's malloc.** Ceph's OSD links tcmalloc for the same reason: a
//! small write allocates and frees about a hundred small blocks on its way through
//! three OSDs (message fronts, decoded ops, transaction ops, object names, PG-log
//! entries, map nodes). Under glibc's malloc those calls were a quarter of the OSD side's
//! instructions per size-3 write (`crates/osd/examples/replicated_bench.rs` under
//! callgrind: 94.6 K instructions per write, 25% of them in `malloc`/`free` and their
//! bin management); mimalloc's per-thread free lists cut the whole write to 78.8 K
//! (BENCHMARKS.md, "The allocator"). mimalloc's thread-local heaps also fit the
//! shard-per-core design: a shard allocates and frees on its own thread without atomics,
//! and a block freed on another thread goes back through a lock-free list.
//!
//! **Keeping freed memory.** mimalloc returns ("purges") free pages to the kernel 10 ms
//! after they become free by default. An OSD storing 4 MiB overwrites frees the old
//! data's buffer as each new one arrives, and pages freed that way went back to the
//! kernel and were faulted in again: with glibc's defaults 3,330 faults per size-3
//! 4 MiB overwrite against 166 pages of real growth (BENCHMARKS.md, "Page faults per
//! write"), and on this project's VMs a fault costs 2 to 48 µs. Under mimalloc with a
//! 1 s delay, 350–570 pages per write were still faulted in again; [`PURGE_DELAY_MS`]
//! (10 s) leaves 15–20, the same as never purging. mimalloc purges only as a thread
//! goes on allocating, so an OSD shard that has gone idle asks for it
//! ([`return_freed_memory`]).

/// The allocator the `carmine` binary installs with `#[global_allocator]`.
pub use mimalloc::MiMalloc as Allocator;

/// How long free memory stays in the process before mimalloc returns it to the kernel.
/// Arenas (large reservations) wait ten times as long (`arena_purge_mult`).
pub const PURGE_DELAY_MS: i64 = 10_000;

/// Environment variables through which an operator already chose mimalloc's settings;
/// [`keep_freed_memory`] leaves each setting an operator chose alone (so experiments
/// can compare settings without a rebuild).
const PURGE_DELAY_SETTINGS: [&str; 2] = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"];
const HUGE_PAGE_SETTINGS: [&str; 1] = ["MIMALLOC_ALLOW_THP"];

/// What [`keep_freed_memory`] did, per setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MallocSetup {
    pub purge_delay: Setting,
    pub huge_pages_off: Setting,
}

/// One setting's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Applied,
    /// The operator's environment already chose it.
    LeftToEnvironment,
    /// The kernel refused it; the default stays (slower, still correct).
    Refused,
}

/// Configures the allocator at the start of `main`, before other threads start (calling
/// it again changes nothing):
///
/// - frees are purged after [`PURGE_DELAY_MS`], not 10 ms;
/// - transparent huge pages are off for the process. mimalloc asks for them on its
///   segments (`MADV_HUGEPAGE`); a 4 KiB write of a new object then faults in and
///   zeroes 2 MiB at a time, which on this project's VMs halved new-object write
///   throughput and raised p99 latency from about 2 to 17 ms (BENCHMARKS.md, "The
///   allocator"). glibc's malloc never asked for them, so this keeps the old behaviour.
///
/// Returns what it did; a daemon logs it. Without it (or in a process that does not
/// install [`Allocator`]) everything still works.
pub fn keep_freed_memory() -> MallocSetup {
    let chosen = |names: &[&str]| names.iter().any(|name| std::env::var_os(name).is_some());
    let purge_delay = if chosen(&PURGE_DELAY_SETTINGS) {
        Setting::LeftToEnvironment
    } else {
        set_purge_delay(PURGE_DELAY_MS);
        Setting::Applied
    };
    let huge_pages_off = if chosen(&HUGE_PAGE_SETTINGS) {
        Setting::LeftToEnvironment
    } else {
        disable_huge_pages()
    };
    MallocSetup {
        purge_delay,
        huge_pages_off,
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn disable_huge_pages() -> Setting {
    // What mimalloc itself does at start-up when `MIMALLOC_ALLOW_THP=0`; the flag is the
    // process's and is checked at every fault, so regions madvised earlier are covered.
    // SAFETY: prctl with integer arguments changes a flag of this process only.
    let done = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } == 0;
    if done {
        Setting::Applied
    } else {
        Setting::Refused
    }
}

#[cfg(not(target_os = "linux"))]
fn disable_huge_pages() -> Setting {
    Setting::Refused
}

/// Returns to the kernel all the memory this thread's heap holds free, now (mimalloc's
/// `mi_collect(true)`). mimalloc purges freed pages only as the thread goes on
/// allocating, so an OSD that went idle after a pool deletion kept its peak memory for
/// good: 1.17 GB per OSD two minutes later (1.47 GB under glibc's malloc), against
/// 16.6 MB once collected. Purging a gigabyte takes up to about 50 ms, and it undoes
/// [`PURGE_DELAY_MS`]; a shard calls it only after a second without client ops or
/// replicated writes.
#[allow(unsafe_code)]
pub fn return_freed_memory() {
    // SAFETY: mi_collect works on the calling thread's own heap and takes no pointers.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// `mi_option_purge_delay` in mimalloc 2.x's `mi_option_t` (`include/mimalloc.h`: the
/// sixteenth option, after `eager_commit_delay` = 14 which `libmimalloc-sys` names);
/// the crate does not name it. The test below fails if it stops meaning the delay.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const _: () = assert!(MI_OPTION_PURGE_DELAY == libmimalloc_sys::mi_option_eager_commit_delay + 1);

#[allow(unsafe_code)]
fn set_purge_delay(milliseconds: i64) {
    // SAFETY: mi_option_set stores an integer in mimalloc's option table; it takes no
    // pointers and may be called at any time (options are read when memory is purged).
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, milliseconds as _) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary runs on the allocator the daemons use, so that the test below
    /// measures mimalloc's behaviour, not glibc's.
    #[global_allocator]
    static GLOBAL: Allocator = Allocator;

    /// The tests measure the process's memory and `return_freed_memory` purges
    /// mimalloc's shared arenas too: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A burst of large blocks freed together is kept for the next burst, even with a
    /// pause between bursts longer than mimalloc's default purge delay (10 ms). With the
    /// default the freed 16 MiB is purged after each pause and faulted in again: about
    /// 3,400 faults per round.
    #[test]
    #[cfg(target_os = "linux")]
    fn freed_bursts_are_reused_across_pauses() {
        const BLOCK_BYTES: usize = 4 * 1024 * 1024;
        const BLOCKS: usize = 4;
        const ROUNDS: u8 = 6;
        let _alone = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        assert_eq!(keep_freed_memory().purge_delay, Setting::Applied);
        let faults_before = minor_faults();
        for round in 0..ROUNDS {
            let blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|_| vec![round + 1; BLOCK_BYTES]).collect();
            assert!(blocks
                .iter()
                .all(|block| block[BLOCK_BYTES - 1] == round + 1));
            drop(std::hint::black_box(blocks));
            // Longer than the default purge delay, far shorter than ours.
            std::thread::sleep(std::time::Duration::from_millis(30));
            // Small allocations meanwhile, as a daemon makes: they are what runs
            // mimalloc's delayed purges (with the default delay, about 20,000 faults).
            for i in 0..20_000usize {
                std::hint::black_box(vec![i as u8; 64 + i % 2_000]);
            }
        }
        let faults = minor_faults() - faults_before;
        // Faulting the burst in once is expected (1,024 pages per block); every round is not.
        let pages_per_burst = (BLOCKS * BLOCK_BYTES / 4096) as u64;
        assert!(
            faults < 2 * pages_per_burst,
            "{faults} page faults for {ROUNDS} bursts of {pages_per_burst} pages"
        );
    }

    /// Memory freed by a thread that then stops allocating goes back to the kernel
    /// when asked, not only after more allocations.
    #[test]
    #[cfg(target_os = "linux")]
    fn freed_memory_is_returned_when_asked() {
        const BLOCK_BYTES: usize = 4 * 1024 * 1024;
        const BLOCKS: usize = 64;
        let _alone = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        keep_freed_memory();
        let blocks: Vec<Vec<u8>> = (0..BLOCKS)
            .map(|i| vec![i as u8 + 1; BLOCK_BYTES])
            .collect();
        let held = resident_kib();
        drop(std::hint::black_box(blocks));
        return_freed_memory();
        let after = resident_kib();
        // 256 MiB were freed.
        assert!(
            held.saturating_sub(after) > 200 * 1024,
            "resident {held} KiB holding the blocks, {after} KiB after returning them"
        );
    }

    #[cfg(target_os = "linux")]
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .expect("VmRSS")
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
