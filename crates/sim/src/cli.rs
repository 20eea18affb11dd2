//! `carmine sim`: argument parsing and report printing, for the CLI crate to call.
//!
//! ```text
//! carmine sim --seed 42 [--format json] [--faults handled|all|resets,crashes,...] [--disk mem|log]
//!     [--mons 1|3|5] [--canary | --canary-disk | --canary-mon | --canary-no-scrub | --canary-no-leases] [--trace]
//!     [--snapshots | --snap-trim]
//! carmine sim --seeds 0..200 [--faults ...]
//! ```
//! Exits 0 when every run passed, 1 when some run failed, 2 on bad arguments.

use crate::disk::DiskKind;
use crate::{Canary, FaultClasses, SimConfig, SimReport};

/// The run `args` ask for, of `seed`.
fn config_for(args: &Args, seed: u64) -> SimConfig {
    let mut config = SimConfig::from_seed(seed).with_faults(args.faults);
    if let Some(disk) = args.disk {
        config = config.with_disk(disk);
    }
    if let Some(count) = args.mons {
        config = config.with_mons(count);
    }
    if let Some(canary) = args.canary {
        config = config.with_canary(canary);
    }
    config.full_trace = args.full_trace;
    if args.full_trace {
        config.daemon_log = std::env::var("CARMINE_LOG").ok();
    }
    config
        .with_snapshots(args.snapshots)
        .with_snap_trim(args.snap_trim)
}

#[derive(Debug, PartialEq, Eq)]
struct Args {
    seeds: std::ops::Range<u64>,
    json: bool,
    faults: FaultClasses,
    canary: Option<Canary>,
    disk: Option<DiskKind>,
    mons: Option<u64>,
    full_trace: bool,
    snapshots: bool,
    snap_trim: bool,
}

fn parse_seeds(text: &str) -> Result<std::ops::Range<u64>, String> {
    let number = |t: &str| {
        t.parse::<u64>()
            .map_err(|_| format!("'{t}' is not a seed (a non-negative integer)"))
    };
    match text.split_once("..") {
        Some((low, high)) => {
            let (low, high) = (number(low)?, number(high)?);
            if low >= high {
                return Err(format!("the seed range {text} is empty"));
            }
            Ok(low..high)
        }
        None => {
            let seed = number(text)?;
            Ok(seed..seed + 1)
        }
    }
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        seeds: 0..1,
        json: false,
        faults: FaultClasses::default(),
        canary: None,
        disk: None,
        mons: None,
        full_trace: false,
        snapshots: false,
        snap_trim: false,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--seed" | "--seeds" => parsed.seeds = parse_seeds(&value(arg)?)?,
            "--format" => match value(arg)?.as_str() {
                "json" => parsed.json = true,
                "text" => parsed.json = false,
                other => return Err(format!("unknown format '{other}'; use text or json")),
            },
            "--faults" => parsed.faults = FaultClasses::parse(&value(arg)?)?,
            "--canary" => parsed.canary = Some(Canary::ForgedReplicaAck),
            "--canary-disk" => parsed.canary = Some(Canary::AckBeforeSync),
            "--canary-mon" => parsed.canary = Some(Canary::MonLocalEpoch),
            "--canary-no-scrub" => parsed.canary = Some(Canary::NoScrub),
            "--canary-no-leases" => parsed.canary = Some(Canary::NoLeases),
            "--mons" => {
                parsed.mons = Some(match value(arg)?.as_str() {
                    "1" => 1,
                    "3" => 3,
                    "5" => 5,
                    other => return Err(format!("--mons {other}: use 1, 3 or 5")),
                })
            }
            "--disk" => {
                parsed.disk = Some(match value(arg)?.as_str() {
                    "mem" => DiskKind::Mem,
                    "log" => DiskKind::Log,
                    other => return Err(format!("unknown disk '{other}'; use mem or log")),
                })
            }
            "--trace" => parsed.full_trace = true,
            "--snapshots" => parsed.snapshots = true,
            "--snap-trim" => parsed.snap_trim = true,
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(parsed)
}

/// A report as text: one summary line, then violations, faults and the trace tail
/// when the run failed.
pub fn format_report(report: &SimReport) -> String {
    let mut text = format!(
        "seed {} {} trace_hash {:016x} events {} virtual {}ms acked {} failed {} faults {} backfills {} ({})\n",
        report.seed,
        if report.ok { "ok" } else { "FAILED" },
        report.trace_hash,
        report.events,
        report.virtual_ms,
        report.ops_acked,
        report.ops_failed,
        report.faults,
        report.backfills,
        report.shape
    );
    if report.bit_flips > 0 || report.repairs > 0 {
        text.push_str(&format!(
            "  bit flips {}, copies repaired {}\n",
            report.bit_flips, report.repairs
        ));
    }
    if report.scrub_differing > 0 || report.tampered > 0 {
        text.push_str(&format!(
            "  scrub comparisons: {} objects compared, {} copies found different ({} tampered)\n",
            report.scrub_compared, report.scrub_differing, report.tampered
        ));
    }
    if report.disk_errors > 0 {
        text.push_str(&format!(
            "  disk errors {}, OSDs stopped on a failed store {}\n",
            report.disk_errors, report.store_failure_stops
        ));
    }
    if report.remaps > 0 {
        text.push_str(&format!("  operator changes {}\n", report.remaps));
    }
    if report.osds_added > 0 {
        text.push_str(&format!(
            "  OSDs added {}, acting for {} PG copies at the end\n",
            report.osds_added, report.pgs_on_added_osds
        ));
    }
    if report.disks_replaced > 0 {
        text.push_str(&format!(
            "  disks replaced {}, marked lost first {}, purged first {}\n",
            report.disks_replaced, report.replaced_marked_lost, report.replaced_purged
        ));
    }
    if report.osds_retired > 0 || report.retirement_refusals > 0 {
        text.push_str(&format!(
            "  OSDs retired {} (the monitor said not yet {} times)\n",
            report.osds_retired, report.retirement_refusals
        ));
    }
    if report.space_squeezes > 0 {
        text.push_str(&format!("  space squeezes {}\n", report.space_squeezes));
    }
    if report.snapshots > 0 {
        text.push_str(&format!(
            "  snapshots {}, removed {}, objects trimmed {}, reads at a snapshot {}\n",
            report.snapshots, report.snapshots_removed, report.snap_trims, report.snapshot_reads
        ));
    }
    if !report.ok {
        for violation in &report.violations {
            text.push_str(&format!("  violation: {violation}\n"));
        }
        for fault in &report.fault_log {
            text.push_str(&format!("  fault: {fault}\n"));
        }
        for event in &report.trace_tail {
            text.push_str(&format!("  event: {event}\n"));
        }
        text.push_str(&format!("  reproduce: {}\n", reproduce_command(report)));
    }
    text
}

/// The command line that runs `report`'s seed again. The shape is the seed's own
/// except for what the flags set, so the flags are all it needs: the disk and the
/// monitor count are named where they are not the seed's own (a canary run says
/// which canary in its shape).
pub fn reproduce_command(report: &SimReport) -> String {
    let mut command = format!("carmine sim --seed {}", report.seed);
    if report.fault_classes != FaultClasses::default() {
        command.push_str(&format!(" --faults {}", report.fault_classes.to_arg()));
    }
    let own = SimConfig::from_seed(report.seed);
    if report.disk != own.disk {
        command.push_str(match report.disk {
            DiskKind::Mem => " --disk mem",
            DiskKind::Log => " --disk log",
        });
    }
    if report.mon_count != own.mon_count {
        command.push_str(&format!(" --mons {}", report.mon_count));
    }
    if report.shape.ends_with(crate::config::SHAPE_SNAP_TRIM) {
        command.push_str(" --snap-trim");
    } else if report.shape.ends_with(crate::config::SHAPE_SNAPSHOTS) {
        command.push_str(" --snapshots");
    }
    command
}

/// Runs the command; returns the process exit code.
pub fn main_cli(args: &[String]) -> i32 {
    let args = match parse(args) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("carmine sim: {error}");
            return 2;
        }
    };
    let reports: Vec<SimReport> = args
        .seeds
        .clone()
        .map(|seed| crate::run_config(config_for(&args, seed)))
        .collect();
    for report in &reports {
        if args.json {
            println!(
                "{}",
                serde_json::to_string(report).expect("reports serialize")
            );
        } else {
            print!("{}", format_report(report));
            // A failed run's report ends with its trace; `--trace` asks for a passing
            // run's too (to see what a fix did).
            if report.ok && args.full_trace {
                for event in &report.trace_tail {
                    println!("  event: {event}");
                }
            }
        }
    }
    let failed: Vec<u64> = reports.iter().filter(|r| !r.ok).map(|r| r.seed).collect();
    if failed.is_empty() {
        0
    } else {
        eprintln!(
            "carmine sim: {} of {} seeds failed: {failed:?}",
            failed.len(),
            reports.len()
        );
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn parses_seeds_formats_and_faults() {
        let args = parse(&strings(&[
            "--seeds", "3..9", "--format", "json", "--faults", "all",
        ]))
        .unwrap();
        assert_eq!(args.seeds, 3..9);
        assert!(args.json);
        assert_eq!(args.faults, FaultClasses::ALL);
        assert_eq!(parse(&strings(&["--seed", "5"])).unwrap().seeds, 5..6);
        assert!(parse(&strings(&["--seeds", "9..3"])).is_err());
        assert!(parse(&strings(&["--faults", "meteor"])).is_err());
        assert_eq!(parse(&strings(&["--mons", "3"])).unwrap().mons, Some(3));
        assert!(parse(&strings(&["--mons", "4"])).is_err());
        assert!(parse(&strings(&["--snap-trim"])).unwrap().snap_trim);
    }

    #[test]
    fn fault_classes_print_as_an_argument_that_parses_back() {
        for text in [
            "all",
            "handled",
            "none",
            "crashes,bit-flips",
            "delays,mon-partitions",
            "crashes,disk-errors",
            "all,disk-errors",
            "all,remaps,replacements",
            "all,decommission,expansion",
        ] {
            let classes = FaultClasses::parse(text).unwrap();
            assert_eq!(FaultClasses::parse(&classes.to_arg()).unwrap(), classes);
        }
        assert_eq!(FaultClasses::ALL.to_arg(), "all");
    }

    /// A failure report's command line runs the same seed again, the disk and the
    /// monitor count included where the command overrode the seed's own (it once
    /// left `--disk mem` out, and the run it gave was another).
    #[test]
    fn the_reproduce_command_runs_the_same_run_again() {
        for seed in 0..3 {
            let own = SimConfig::from_seed(seed);
            let disk = match own.disk {
                DiskKind::Mem => DiskKind::Log,
                DiskKind::Log => DiskKind::Mem,
            };
            let mons = if own.mon_count == 3 { 1 } else { 3 };
            let config = SimConfig::from_seed(seed)
                .with_faults(FaultClasses::NONE)
                .with_disk(disk)
                .with_mons(mons)
                .with_snap_trim(true);
            let report = crate::run_config(config);
            let command = reproduce_command(&report);
            let words: Vec<String> = command.split(' ').skip(2).map(String::from).collect();
            let args = parse(&words).unwrap_or_else(|e| panic!("{command}: {e}"));
            let again = crate::run_config(config_for(&args, seed));
            assert_eq!(again.trace_hash, report.trace_hash, "{command}");
        }
    }
}
