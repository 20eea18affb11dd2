//! The fixed seed sets. Every seed must pass every checker. A failing seed prints its
//! report; reproduce it with `carmine sim --seed N [--faults all]`.
//!
//! - 200 seeds with the network faults (latency and reordering, session resets, slow
//!   links, client partitions), including the seeds that once hit a misrouted
//!   `PgLogRequest` to a stray (13, 68, 179, 215, 235, 258, 277).
//! - 120 seeds with every fault class: OSD crashes and restarts (stores kept), OSD
//!   partitions (one-way and both ways), OSD↔monitor session resets, on top of the
//!   network faults; LogStore seeds also get bits of data at rest flipped, which must
//!   be found and repaired. These exercise peering, recovery and the monitor's failure
//!   detection.
//!
//! - 120 seeds with every fault class and the snapshot workload (`--snapshots`): clients
//!   take self-managed snapshots and write under snapshot contexts they learn of late,
//!   a third of their reads go to a snapshot, and the checkers follow the clones.
//!
//! A seed chooses 1, 3 or 5 monitors (2:2:1), and half the seeds BUGGIFY the OSDs,
//! the PG log shrunk to 8–64 entries included. The default classes include monitor
//! crashes and monitor partitions.
//!
//! - 80 seeds with every fault class and disk errors (`--faults all,disk-errors`): a
//!   LogStore device fails its writes and the OSD must stop and restart.
//! - 40 seeds with every fault class and an operator moving data (`--faults
//!   all,remaps`): OSDs marked out, reweighted, their primary affinity changed, a
//!   size-3 pool down to two copies; 27 more with full stores as well.
//! - 40 seeds with every fault class and new OSDs joining the running cluster
//!   (`--faults all,expansion`), and 20 with remaps as well.
//! - 40 seeds with every fault class and disks replaced by empty ones (`--faults
//!   all,replacements`), and 40 with an OSD retired for good (`--faults
//!   all,decommission`).
//!
//! Seeds that fail today live in `tests/known_gaps.rs`.

use carmine_sim::{
    format_report, run, run_config, run_with_faults, run_with_snap_trim, run_with_snapshots,
    FaultClasses, SimConfig, SimReport,
};

fn check(reports: &[SimReport], faults_min: u64, acked_min: u64) {
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.ok)
        .map(format_report)
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let faults: u64 = reports.iter().map(|r| r.faults).sum();
    let acked: u64 = reports.iter().map(|r| r.ops_acked).sum();
    assert!(faults > faults_min, "only {faults} faults injected");
    assert!(acked > acked_min, "only {acked} ops acknowledged");
}

#[test]
fn fixed_seeds_pass_with_the_network_faults() {
    let reports: Vec<SimReport> = (0..200).map(run).collect();
    check(&reports, 500, 50_000);
}

/// The disk-error class (`--faults all,disk-errors`, not yet part of `all`): an OSD
/// shard's device fails its writes, the store puts itself out of service, and the OSD
/// must stop (and restart later) rather than hold its PGs' writes forever. Without the
/// stop, 82 of seeds 0..200 failed (stalled PGs, copies that differ).
#[test]
fn fixed_seeds_pass_with_disk_errors() {
    let classes = FaultClasses {
        disk_errors: true,
        ..FaultClasses::ALL
    };
    let reports: Vec<SimReport> = (2000..2080)
        .map(|seed| run_with_faults(seed, classes))
        .collect();
    check(&reports, 300, 10_000);
    let armed: u64 = reports.iter().map(|r| r.disk_errors).sum();
    let stops: u64 = reports.iter().map(|r| r.store_failure_stops).sum();
    assert!(armed > 60, "only {armed} disk errors armed");
    assert!(stops > 30, "only {stops} OSDs stopped on a failed store");
}

/// Seeds 173 and 1356 of `--faults all,disk-errors`: a primary activated its replicas
/// with a log whose newest write it had not yet synced, and then stopped on a disk
/// error (its flush failed). The write was gone from every store, but a replica had
/// adopted its log entry and peering trusted it: the object stayed unfound, and a
/// resend of the write was answered from the log. An activation now leaves only once
/// the primary's own log is durable (`Pg::send_once_durable`). Seed 1356's run changed
/// with the fix; what it first showed (a replica whose copy had decayed holding the
/// only record of two unacknowledged writes, which came by `RepOp`, not by an
/// activation) may still be reachable, and it is kept as a disk-error seed that once
/// failed.
#[test]
fn regression_an_activation_waits_for_the_primarys_log_to_be_durable() {
    let classes = FaultClasses {
        disk_errors: true,
        ..FaultClasses::ALL
    };
    check(
        &[173, 1356].map(|seed| run_with_faults(seed, classes)),
        5,
        50,
    );
}

/// Seed 2892 of `--faults all,disk-errors`: a replica copy tampered with at the
/// read-back stayed different for good, because its PG's primary never compared: a
/// backfill target with nothing to push stayed named among the PG's backfills, and
/// the comparison waited for none to be left.
#[test]
fn regression_a_done_backfill_does_not_stop_scrub_comparisons() {
    let classes = FaultClasses {
        disk_errors: true,
        ..FaultClasses::ALL
    };
    let report = run_with_faults(2892, classes);
    assert!(report.tampered > 0, "{}", format_report(&report));
    check(&[report], 3, 100);
}

#[test]
fn fixed_seeds_pass_with_every_fault_class() {
    let reports: Vec<SimReport> = (1000..1120)
        .map(|seed| run_with_faults(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 500, 30_000);
    // Bit flips (LogStore seeds of 3-copy pools) happened and were repaired.
    let flips: u64 = reports.iter().map(|r| r.bit_flips).sum();
    let repairs: u64 = reports.iter().map(|r| r.repairs).sum();
    assert!(flips > 50, "only {flips} bits flipped");
    assert!(
        repairs > 40,
        "only {repairs} copies repaired of {flips} flips"
    );
}

#[test]
fn fixed_seeds_pass_with_snapshots_and_every_fault_class() {
    let reports: Vec<SimReport> = (5000..5120)
        .map(|seed| run_with_snapshots(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 500, 30_000);
    let snapshots: u64 = reports.iter().map(|r| r.snapshots).sum();
    let reads: u64 = reports.iter().map(|r| r.snapshot_reads).sum();
    let flips: u64 = reports.iter().map(|r| r.bit_flips).sum();
    let repairs: u64 = reports.iter().map(|r| r.repairs).sum();
    assert!(snapshots > 1_000, "only {snapshots} snapshots taken");
    assert!(reads > 5_000, "only {reads} reads at a snapshot answered");
    assert!(
        flips > 50 && repairs > 40,
        "{flips} bits flipped, {repairs} copies repaired"
    );
}

/// The snapshot workload with removals (`--snap-trim`), every fault class: the OSDs
/// trim clones of removed snapshots under faults, and the checkers follow each trim
/// entry of the logs.
#[test]
fn fixed_seeds_pass_with_snapshot_removal_and_every_fault_class() {
    let reports: Vec<SimReport> = (7000..7100)
        .map(|seed| run_with_snap_trim(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 500, 30_000);
    let removed: u64 = reports.iter().map(|r| r.snapshots_removed).sum();
    let trims: u64 = reports.iter().map(|r| r.snap_trims).sum();
    assert!(removed > 400, "only {removed} snapshots removed");
    assert!(trims > 2_000, "only {trims} objects trimmed");
}

/// `--snap-trim` seeds that once failed. 558: a primary trimmed an object whose copy
/// was under repair; the copy pulled before the trim brought the trimmed clone back,
/// and the next pass's trim, removing it again, failed on the replicas, which no longer
/// had it: the PG stopped writing for good. 20896: the simulator judged a flip healed
/// once the flipped head was rewritten, while a clone sharing the flipped data piece
/// was still corrupt, and ended the run with replicas different.
#[test]
fn regression_snap_trim_seeds() {
    let reports: Vec<SimReport> = [558, 20896]
        .into_iter()
        .map(|seed| run_with_snap_trim(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 10, 100);
}

/// Snapshot-workload seeds that once failed with every fault class. 1439: a scrub step
/// that ended on a clone made the next step start after its head, so the head and
/// its clones were never verified there and a corrupt clone stayed on a replica. 303:
/// a replica whose copy rotted again after a push replaced it reported it only 32
/// scrub passes later (the first report was still remembered). 1036: a replica's
/// report lost to a partition waited 32 passes too (reports now back off from one
/// pass). 3 and 4: scrubs checked heads only, never clones. 10032: the simulator
/// itself judged a flipped clone healed by its head, and flipped a second copy of the
/// same clone while the first was still corrupt (at most one unhealed flip per PG
/// keeps a good copy to repair from).
#[test]
fn regression_corrupt_clones_are_found_and_repaired() {
    let reports: Vec<SimReport> = [3, 4, 303, 1036, 1439, 10032]
        .into_iter()
        .map(|seed| run_with_snapshots(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 20, 300);
}

/// Seeds that once failed with every fault class: a primary whose pull was cut short by
/// a new peering round kept lacking an object, became authoritative, and activated
/// without recovering it.
#[test]
fn regression_an_authoritative_primary_recovers_what_it_lacks_first() {
    let reports: Vec<SimReport> = [826, 1240]
        .into_iter()
        .map(|seed| run_with_faults(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 20, 300);
}

/// Seed 49 once failed when BUGGIFY first shrank the PG log: a client resent a write
/// whose log entry had been trimmed, and the primary applied it a second time.
#[test]
fn regression_a_resend_after_its_entry_was_trimmed_is_answered_not_applied_again() {
    let reports = vec![run(49)];
    check(&reports, 5, 500);
}

/// Three and five monitors under monitor faults only: crashes and restarts from the
/// persisted store, a minority or the leader cut off from the other monitors.
#[test]
fn monitor_groups_survive_monitor_crashes_and_partitions() {
    let classes = FaultClasses::parse("mon-crashes,mon-partitions").unwrap();
    let reports: Vec<SimReport> = (0..12)
        .map(|seed| {
            let mut config = SimConfig::from_seed(seed)
                .with_mons(if seed % 2 == 0 { 3 } else { 5 })
                .with_faults(classes);
            config.fault_weights.mon_crash = 1 + seed % 3;
            config.fault_weights.mon_partition = 1 + seed % 4;
            run_config(config)
        })
        .collect();
    check(&reports, 30, 3_000);
    let faults: Vec<&String> = reports.iter().flat_map(|r| &r.fault_log).collect();
    for kind in [
        "crash mon.",
        "(the leader)",
        "(with the leader)",
        "partition monitors",
    ] {
        assert!(
            faults.iter().any(|f| f.contains(kind)),
            "no '{kind}' fault in {faults:?}"
        );
    }
}

/// Seeds that failed with every fault class once seeds ran 3 or 5 monitors with
/// monitor faults and BUGGIFY shrank the PG log:
/// - 6, 233, 685: an OSD restarted while the monitors had no quorum, so no map showed
///   the restart; it lost a RepOp sent while it was down and applied the next one,
///   leaving a hole in its log (a replica now ignores a RepOp that does not follow its
///   log head);
/// - 1820: a primary's backfill pull cut short by a new map left it lacking objects,
///   and it then activated as authoritative (a wiped copy now stays marked incomplete);
/// - 232: a primary kept counting a push of an earlier interval as in flight and
///   stayed recovering (activation now forgets old pushes);
/// - 943: a PgQuery waiting for its map was dropped by a full map-wait queue, and the
///   PG stayed peering (peer messages are no longer dropped there).
#[test]
fn regression_monitor_faults_and_tiny_logs() {
    let reports: Vec<SimReport> = [6, 233, 685, 1820, 232, 943]
        .into_iter()
        .map(|seed| run_with_faults(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 50, 1_000);
}

/// Seed 1082 with a 15-entry PG log (BUGGIFY draws 8–64; a 2–24 trial found it): an
/// OSD applied a write, restarted, and as primary again applied the client's resend a
/// second time, because the requests of trimmed entries ("dups") were kept in memory
/// only. They are now persisted beside the log.
#[test]
fn regression_a_restarted_primary_remembers_requests_of_trimmed_entries() {
    let mut config = SimConfig::from_seed(1082).with_faults(FaultClasses::ALL);
    config.tuning.log_entries_max = 15;
    check(&[run_config(config)], 5, 200);
}

/// Seed 773 (MemStore, size 2, every OSD crashed in turn): a read met an object whose
/// only good copy was on a down OSD and got EIO ("no readable copy on any acting
/// OSD"). The linearizability checker took the error for an observed value; it is
/// unavailability, which the read-back after healing checks instead.
#[test]
fn regression_eio_is_unavailability_not_a_value() {
    check(&[run_with_faults(773, FaultClasses::ALL)], 5, 200);
}

/// Seeds 287 (one monitor) and 852 (three): a primary cut off from the monitors and
/// its peers, but not from a client, served a read of its old data after a new
/// interval elsewhere had acknowledged newer writes (a stale read). Read leases now
/// stop it: it serves only while every other acting member has promised a lease, and
/// the new primary waits until the promises it learns of while peering ran out.
/// Seed 1203 showed the same stale read without leases after stray purge changed the
/// traces, seed 5366 since error entries did, and 8138 since the read-back waits for
/// the cluster to be converged again; `tests/canary.rs` checks that without leases it
/// fails again.
#[test]
fn regression_a_cut_off_primary_serves_no_stale_read() {
    let reports: Vec<SimReport> = [287, 852, 1203, 5366, 8138]
        .into_iter()
        .map(|seed| run_with_faults(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 40, 1_000);
}

/// Seed 1878: once leases changed its timing, an OSD cut off from the monitors held a
/// client write for a map it lacked, skipped the epochs in which another OSD led the
/// PG, and as primary again ran the write after the client had resent it to that
/// other primary and had its answer (a failed write the log then applied). A primary
/// now bounces ops sent before it last became primary. With a 13-entry log the seed
/// failed before leases with a real-time-order violation (pinned in
/// `known_gaps.rs`, never analysed); it passes now, so it is kept here too.
#[test]
fn regression_a_held_op_from_before_a_primary_change_is_bounced() {
    let mut config = SimConfig::from_seed(1878).with_faults(FaultClasses::ALL);
    let report = run_config(config.clone());
    config.tuning.log_entries_max = 13;
    check(&[report, run_config(config)], 10, 300);
}

/// Seeds 2321, 2657 and 3383 once read leases held ops longer (a `laggy` or `wait`
/// PG): a client's resends of one write piled up in the held queue, the first copy
/// failed ('no such object') and a later one, run after another client's write had
/// created the object, applied it. A resend now replaces the held copy, and a resend
/// of a write whose failure is still queued gets that failure.
#[test]
fn regression_resends_of_a_held_write_run_once() {
    let reports: Vec<SimReport> = [2321, 2657, 3383]
        .into_iter()
        .map(|seed| run_with_faults(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 20, 300);
}

/// Seed 1997: an OSD cut off from the monitors restarted and got its first new map in
/// the middle of a PG's interval, so it dated the interval later than the primary did
/// and ignored the primary's activation as stale (after answering its query and log
/// request); nothing resends an activation, and the PG stayed peering. A copy now
/// takes an earlier-dated activation from its primary if the primary sent it from a
/// map no older than the copy's interval and had queried this copy in that interval.
#[test]
fn regression_a_copy_that_came_in_mid_interval_answers_the_activation() {
    check(&[run_with_faults(1997, FaultClasses::ALL)], 20, 20);
}

/// Seed 761, once the fix for seed 1997 changed its timing: a client's resend of a
/// write crossed the primary's answer that it failed ('no such object'); the resend
/// ran again after another client had created the object, and the log applied a write
/// the client saw fail. The primary now remembers the latest failed writes of a PG and
/// answers their resends with the same failure.
#[test]
fn regression_a_resend_that_crossed_a_failure_gets_the_failure() {
    check(&[run_with_faults(761, FaultClasses::ALL)], 10, 300);
}

/// Seed 3267 (LogStore, bit flips), once error entries changed its timing: a replica
/// crashed and restarted within the interval and lost the `RepOp` of a write the
/// primary had applied; a bit flip then made the primary's copy unreadable, and its
/// scrub repaired it by pulling from that replica, whose copy predated the write. The
/// PG's next interval pushed that older copy everywhere and acknowledged the write, and
/// a read returned the state before it (a stale read). A repair now pulls from a
/// replica that has acknowledged the interval's writes to the object, and the primary
/// refuses a pulled copy older than the newest change its log records for it.
#[test]
fn regression_a_repair_takes_no_copy_older_than_an_applied_write() {
    check(&[run_with_faults(3267, FaultClasses::ALL)], 10, 100);
}

/// Seed 4233 once panicked the simulator ("lossless link reordered: 75 after 76"): a
/// message on a lossless OSD link met a cut and was held; the cut healed while a later
/// message, sent before the cut, was still on its way, and the heal scheduled the held
/// one after it (a link's deliveries are FIFO in time), so the later one arrived
/// first. A message now waits behind an earlier held or released one on its link, as
/// the messenger replays unacknowledged messages before new ones.
#[test]
fn regression_a_healed_cut_keeps_a_lossless_link_in_order() {
    check(&[run_with_faults(4233, FaultClasses::ALL)], 10, 100);
}

/// Seed 3176 (LogStore, bit flips): with the monitor down, osd.0 crashed and missed
/// two writes the primary osd.2 and osd.1 applied (never acknowledged). When the
/// monitor came back, osd.0 was the only up member of PG 1.6 for one map: it
/// activated alone, below min_size, and recorded that interval as started. Its older
/// log then outranked osd.2's newer one, so the next peering rolled back the two
/// writes and pulled the objects from osd.0 alone, whose `shared-2` had taken a bit
/// flip; osd.1 was backfilled from the rolled-back log, and no copy of `shared-2` was
/// readable. An acting set below min_size now never records its interval as started
/// (Ceph's `acting_set_writeable`), so osd.2's copy stays authoritative and repairs
/// osd.0's.
#[test]
fn regression_an_interval_below_min_size_does_not_outrank_newer_copies() {
    check(&[run_with_faults(3176, FaultClasses::ALL)], 10, 100);
}

/// Seed 7290 (LogStore, bit flips): the primary applied a write while its replicas
/// were cut off from it (never acknowledged), then a bit flip hit that only copy. Its
/// log stayed the newest at the next interval, the replicas were told they lack the
/// object, nobody could supply it, and the PG stayed degraded for good (the writes
/// behind the carried-over one waited forever too). The primary now rolls back its
/// never-acknowledged writes from the first one whose object it cannot read, and
/// recovers the acknowledged version from a replica. Its PG info still counted the
/// rolled-back write's bytes (6 where the PG held 10; checker 6): it now takes the
/// counts, in the next peering, from a copy that ends where its kept log does.
#[test]
fn regression_an_unacknowledged_write_whose_only_copy_rots_is_rolled_back() {
    check(&[run_with_faults(7290, FaultClasses::ALL)], 10, 50);
}

/// Seed 6236 (LogStore, bit flips): a replica crashed before two writes reached it,
/// came back alone and led the PG by itself, below min_size, recording that interval
/// as activated. The next peering ranked its shorter log first (highest
/// `last_epoch_started`) and rolled the other members' newer copies back onto its
/// own, which a bit flip had hit: the object had no readable copy, clients got EIO,
/// and the replica reported the corrupt copy every 300 ms forever. A PG peered below
/// min_size records no activation now (as in Ceph), and a replica reports a corrupt
/// copy once, and again only after many scrub passes.
#[test]
fn regression_a_pg_peered_below_min_size_does_not_outrank_newer_members() {
    check(&[run_with_faults(6236, FaultClasses::ALL)], 3, 100);
}

/// Seed 4040 (LogStore, bit flips): the primary osd.2 of PG 1.9 applied a write of
/// `shared-1` (v5'44) while cut off from both replicas, so it was never acknowledged;
/// a bit flip then hit that only copy, and osd.2 crashed while the monitor was down,
/// so no interval passed before it came back. After the restart nothing in flight
/// said v5'44 was never acknowledged, so the rollback of seed 7290 did not apply: its
/// log, the newest, was chosen, the replicas (both holding the acknowledged v5'43)
/// were told they lack the object, and no copy could serve it (PG degraded forever,
/// logs and missing sets differing). Peering now rolls back the entries only the
/// primary holds, from the first whose object it cannot read, when a member of the
/// interval that entry was written in answers with an older `last_update` (so the
/// write was never acknowledged), and recovers the acknowledged version. The object
/// and byte counts of the rolled-back write stayed in every member's PG info (105
/// bytes where the PG held 103; checker 6): the rollback now takes them from a copy
/// that ends where the kept log does.
#[test]
fn regression_an_unreadable_unacknowledged_write_is_rolled_back_after_a_restart() {
    check(&[run_with_faults(4040, FaultClasses::ALL)], 10, 100);
}

/// Seed 23448 (LogStore, bit flips, 5 monitors): osd.3, primary of PG 1.1, was cut
/// off from every OSD and monitor (not from the clients) for 7 s and applied writes
/// 6'47..6'55 that no replica got (the replicas stayed at 6'46); a bit flip hit its
/// copy of `client1-0`, and it crashed and came back. The rollback of seed 4040 rolled
/// back from 6'52, the first entry whose object it could not read, which left the
/// objects of the forgotten entries missing at their 6'47..6'51 versions: versions
/// only osd.3 had written, and had since overwritten. No copy could serve them, so PG
/// 1.1 stayed incomplete for good. The rollback point is now lowered until every
/// forgotten object's newest kept version is one another copy holds (here 6'47:
/// those entries are as unacknowledged as 6'52).
#[test]
fn regression_a_rollback_keeps_no_version_only_the_rolled_back_copy_had() {
    check(&[run_with_faults(23448, FaultClasses::ALL)], 10, 100);
}

/// Seed 1132 of `--faults all,expansion,remaps,space --snap-trim` (MemStore, size 2,
/// two OSDs added): a client removed `client0-1` under a snapshot (its head a
/// whiteout, its clone `client0-1@8` the snapshot's data). osd.2, whose store had no
/// room for its backfill, held the PG's newest log but not the object; osd.4, a new
/// OSD, was backfilled from it and took the object for gone because the log ended by
/// removing it, so the PG went on without the clone and the copies ended different.
/// With snapshots in the pool a removal no longer proves an object gone
/// (`Pg::removed_for_good`).
#[test]
fn regression_a_backfill_keeps_a_removed_object_with_clones_missing() {
    check(&[run_config(expansion_remaps_space_trims(1132))], 10, 100);
}

/// Seed 36287 of `--faults all,expansion,remaps,space --snap-trim` (MemStore, size
/// 2): PG 1.2 never went clean. Its primary stayed `backfilling` with three objects
/// missing that it called unfound while osd.1, a stray, held them: every copy with the
/// newest log lacked them (their stores had refused the pushes), and that log named
/// them only in failed writes' entries, the entries with the versions they needed
/// trimmed. A missing set now keeps each object's needed version (`pg/missing.rs`),
/// so the primary asks osd.1 for exactly those.
#[test]
fn regression_a_missing_object_keeps_its_needed_version_past_the_log() {
    check(&[run_config(expansion_remaps_space_trims(36287))], 5, 100);
}

/// Seed 34338 of `--faults all,expansion,remaps,space --snap-trim` (MemStore, size
/// 2, min_size 1): an acknowledged write was lost. osd.0's store had no room for
/// `shared-0`, so osd.2, its primary, acknowledged writes to it with its own data
/// alone (osd.0 logged them without the object); cut off, osd.2 went on as a stale
/// primary and overwrote that only copy with writes nobody acknowledged, which the
/// next peering rolled back, leaving no copy of the acknowledged version. A client
/// write to an object a recovering replica lacks now waits for its push, and is
/// refused for want of space if the replica's store refuses it (`pg/degraded.rs`).
#[test]
fn regression_a_write_the_primary_alone_would_hold_is_refused() {
    check(&[run_config(expansion_remaps_space_trims(34338))], 10, 100);
}

/// Seed 26545 of `--faults all,expansion,remaps,space --snap-trim` (MemStore, 3
/// monitors): the leader sent mon.2 a Raft snapshot just before a partition cut it
/// off, and mon.2's answer was lost. raft-rs sends a follower nothing more while a
/// snapshot to it is outstanding, until the application reports it, and the monitor
/// never did: mon.2 stayed at e16 for a minute while the others reached e58. The
/// leader now reports a snapshot handed to a session as finished
/// (`Monitor::report_snapshot`).
#[test]
fn regression_a_lost_monitor_snapshot_is_sent_again() {
    check(&[run_config(expansion_remaps_space_trims(26545))], 10, 100);
}

/// Seed 9517 of `--faults all,remaps,disk-errors,expansion --snapshots` (LogStore):
/// the simulator flipped a bit in the only good copy of an object. osd.2, cut off
/// from the monitors' maps, still led PG 1.3 as a two-copy interval and applied
/// writes to `client0-0` that nobody acknowledged (the other member had moved on);
/// the flip then hit the other member's copy, the last of the acknowledged version,
/// and no replication survives that. A flip now waits until every acting member has
/// the newest map (`bitflips.rs`), so the PG's clean state is that map's.
#[test]
fn regression_a_flip_waits_for_every_member_to_have_the_newest_map() {
    check(&[run_config(failing_devices_and_new_osds(9517))], 4, 50);
}

/// Seed 5531 of `--faults all,remaps,disk-errors,expansion --snapshots` (LogStore,
/// size 3): osd.2, primary of PG 1.1, applied 8'3 to `client1-0` while cut off from
/// its replicas (never acknowledged) over a copy a bit flip had hit, and rolled it
/// back at the next interval change, but its store failed on that very transaction.
/// It came back with 8'3 in its log; osd.3, a newly added OSD, led the PG, adopted
/// that log as the newest, and no copy could ever serve 8'3 (osd.2's was corrupt,
/// osd.0 and osd.1 held the acknowledged 8'2): the PG stayed degraded. The primary now
/// asks the authoritative copy which objects of its newest entries it cannot read and
/// adopts the log without the writes the other members prove never acknowledged
/// (`Pg::drop_unreadable_tail`). Seed 7859 of the same: the first fix took the
/// copies the new primary pulled from the returning copy as they were, one of them of
/// a left-out write, under an older version; such a copy now stays missing
/// (`Pg::copy_is_ahead_of_log`).
#[test]
fn regression_a_new_primary_drops_an_unreadable_unacknowledged_tail_it_adopts() {
    let reports = [5531, 7859].map(|seed| run_config(failing_devices_and_new_osds(seed)));
    check(&reports, 5, 50);
}

/// Seed 119989 (LogStore, size 2, 5 monitors): osd.1 led PG 1.7 alone (min_size 1)
/// and acknowledged writes 5'40..5'44. osd.0 came back, peered as primary in interval
/// 6, adopted that log, pulled the object, went active and reported the PG clean, so
/// the monitor dropped the intervals before 6. Nothing flushed osd.0's store in that
/// interval (no write reached the PG, and a shard flushes only for work that waits on
/// a commit), so its crash 0.9 s later lost the adopted log and its
/// `last_epoch_started` of 6. Restarted, it answered that it never activated in
/// interval 6, which peering takes as proof the interval took no writes: it activated
/// alone on its 4'39 copy, outranked osd.1 and backfilled it, and the five
/// acknowledged writes were gone. A primary now goes active only once its own
/// activation record is durable (`Pg::activation_record`).
#[test]
fn regression_a_primary_goes_active_only_on_a_durable_activation() {
    check(&[run_with_faults(119989, FaultClasses::ALL)], 10, 100);
}

/// Seed 112006 (LogStore, 3 monitors): osd.3 crashed and came back while the monitors
/// were split and restarting, and sent its boot to mon.1, which had restarted at e6.
/// mon.1 then caught up on e7 and e8, which still showed osd.3's previous instance up
/// at the same addresses, took the boot for done and dropped it; e9 marked osd.3 down.
/// osd.3 already held e9, so nothing made it boot again: it stayed down, and a PG
/// whose past interval only osd.3 could vouch for stayed down after every fault had
/// healed. A monitor now keeps a boot until a map shows that instance up.
#[test]
fn regression_a_boot_outlives_old_maps_of_the_previous_instance() {
    check(&[run_with_faults(112006, FaultClasses::ALL)], 10, 100);
}

/// Seed 138596 (LogStore, size 2, 5 monitors): osd.2, alone in PG 1.1's interval
/// e10, acknowledged writes 10'17 and 10'18 (`last_epoch_started` 10), then crashed.
/// Restarted, it asked a lagging monitor for maps and got e6 onwards, which still
/// showed its previous instance up: it peered alone as primary of the closed interval
/// e7 and recorded that activation, lowering its `last_epoch_started` to 7. At e13
/// osd.1, with older writes but `last_epoch_started` 9, outranked it, and five
/// acknowledged writes were lost. A process now acts on a map that shows its previous
/// instance up as one that shows it down (`carmine_osd::map_for_instance`).
#[test]
fn regression_a_restarted_osd_does_not_act_as_its_previous_instance() {
    check(&[run_with_faults(138596, FaultClasses::ALL)], 10, 100);
}

/// Seed 102790 (LogStore, size 3, 5 monitors): PG 1.6's primary osd.2, cut off
/// outbound, applied a write of `shared-0` (v4'83, 15 to 30 bytes) that no replica got;
/// a bit flip then hit that copy. Peering rolled v4'83 back (seed 7290's rollback), but
/// no other copy ended at the kept v4'82, so the counts stayed those of osd.2's content,
/// v4'83 included. The repair then replaced `shared-0` with osd.1's 15-byte copy
/// without touching them, and every member's PG info over-counted 15 bytes for good
/// (checker 6). Counts such a rollback cannot settle from another copy are now held in
/// doubt (`PgInfo::stats_invalid`) and counted from the store once the copy holds
/// every object of its history (`Pg::recount_stats_if_complete`).
#[test]
fn regression_counts_left_unsure_by_a_rollback_follow_the_repairs() {
    check(&[run_with_faults(102790, FaultClasses::ALL)], 5, 100);
}

/// Seed 211550 (LogStore, size 3, 5 monitors): PG 1.9 wrote `shared-1` at 4'23 on
/// osd.2 (primary) and osd.0. osd.2 was cut off, osd.0's copy took a bit flip, the next
/// interval's writes to `shared-1` failed with "no readable copy" (error entries only),
/// and the log moved past 4'23. osd.2 came back behind the new log's tail and was
/// backfilled: its activation emptied its copy of the PG, the only intact `shared-1`
/// with it, and the object stayed unfound. A backfill now replaces each object only
/// when the primary's copy arrives, and a primary repairing its copy asks for the exact
/// version its object info names, which a copy still waiting to be backfilled may send
/// (`PgPull::exact`).
#[test]
fn regression_a_backfill_target_supplies_the_last_intact_copy() {
    check(&[run_with_faults(211550, FaultClasses::ALL)], 10, 100);
}

/// Seed 382 with `--snapshots` (LogStore, size 3, 5 monitors): PG 1.3's primary osd.1
/// rolled back 4'16, a write never acknowledged whose object had rotted, and found no
/// copy ending at the kept 4'15 to take its counts from, so they stayed unsure (30
/// bytes too many) and followed its content. It activated osd.2 with them; at the next
/// interval osd.2, now ending at 4'15, "settled" them with those same numbers, the
/// counts stopped following content, and the pull that replaced the rotted object no
/// longer corrected them: the PG info said 231 bytes for 201 for good. The doubt now
/// travels with the counts (`PgInfo::stats_invalid`), so a copy that got them from us
/// cannot settle them, and every copy counts its own once it lacks nothing.
#[test]
fn regression_unsure_counts_are_not_settled_by_a_copy_that_got_them_from_us() {
    check(&[run_with_snapshots(382, FaultClasses::ALL)], 10, 100);
}

/// Seed 382 of the remap class with snapshots (`--faults all,remaps --snapshots`;
/// LogStore, size 3, 5 monitors): PG 1.3's primary osd.1 rolled back 9'16, a write
/// never acknowledged whose clone had a flipped bit, and no copy ended at the kept
/// 9'15, so its counts stayed those of its content (247 bytes). After the operator's
/// reweights osd.2 led the PG, adopted osd.1's log with those counts as if they were
/// sure, and the PG reported 30 bytes more than it held for good. An info now says
/// when its counts are in doubt; whoever adopts it adopts the doubt, and a copy
/// holding every object counts them from its store.
#[test]
fn regression_doubtful_counts_are_not_adopted_as_sure() {
    let classes = FaultClasses {
        remaps: true,
        ..FaultClasses::ALL
    };
    check(&[run_with_snapshots(382, classes)], 10, 100);
}

/// The space fault class (`--faults all,space --disk mem`): MemStores squeezed to
/// little more than they hold for a while. Seeds 0..40 run in the default tests, with
/// these seeds of its first swarm, which failed before:
/// - 10, 58, 69, 97, 191, 239, 285, 348, 364 and 397: a store with no room refused a
///   PG its own metadata (log, info and missing keys), and copies ended up different
///   from what their logs said (replicas' logs differed, a read-back waited for
///   good). A PG's metadata objects may now go past the capacity
///   (`Transaction::keeps_books_only`).
/// - 141: a primary whose store refused the copy it pulled while peering forgot the
///   object was missing, served its stale copy and wrote on it: acknowledged xattrs
///   were lost. The object now stays missing until recovered.
/// - 2046 and 2450: a client took an old primary's `NoSpace` refusal of a write it had
///   already resent to the new primary, which applied it. The objecter now takes only
///   the answer of the OSD it last sent the op to.
/// - 1514, 1822 and 2346: a replica took the push of an object ahead of a write and
///   refused the write itself for space; the push's answer completed the write, which
///   was acknowledged while that copy lacked it, and every later write to the PG
///   stalled (the replica ignored them as not following). A push's answer now covers
///   only the writes logged before it went out.
#[test]
fn fixed_seeds_pass_with_space_faults() {
    let classes = FaultClasses {
        space: true,
        ..FaultClasses::ALL
    };
    let seeds = (0..40).chain([
        58, 69, 97, 141, 191, 239, 285, 348, 364, 397, 1514, 1822, 2046, 2346, 2450,
    ]);
    let reports: Vec<SimReport> = seeds.map(|seed| run_on_memstores(seed, classes)).collect();
    check(&reports, 100, 5_000);
    let squeezes: u64 = reports.iter().map(|r| r.space_squeezes).sum();
    assert!(squeezes > 60, "only {squeezes} stores squeezed");
}

/// The remap class (`--faults all,remaps`): an operator marks OSDs out, reweights them
/// and changes their primary affinity for a while, on top of every other fault, so
/// PGs move to new members (backfilled under a pg_temp) and back. Seeds 0..40 run in
/// the default tests.
#[test]
fn fixed_seeds_pass_with_remaps() {
    let classes = FaultClasses {
        remaps: true,
        ..FaultClasses::ALL
    };
    let reports: Vec<SimReport> = (0..40)
        .map(|seed| run_config(SimConfig::from_seed(seed).with_faults(classes)))
        .collect();
    check(&reports, 100, 5_000);
    let changes: u64 = reports.iter().map(|r| r.remaps).sum();
    assert!(changes > 80, "only {changes} operator changes");
    let backfills: u64 = reports.iter().map(|r| r.backfills).sum();
    assert!(backfills > 40, "only {backfills} backfills");
}

/// Disk replacements (`--faults all,replacements`): while the cluster has converged,
/// an OSD's disks die and are replaced by empty ones, and the OSD starts again under
/// the same id, as it is or after the operator marked it lost or purged it. The empty copies
/// must never stand in for the history the old disks held, and must be backfilled;
/// a purged OSD joins again as a new one.
/// Seeds 0..40 run in the default tests.
#[test]
fn fixed_seeds_pass_with_disk_replacements() {
    let classes = FaultClasses {
        replacements: true,
        ..FaultClasses::ALL
    };
    let reports: Vec<SimReport> = (0..40)
        .map(|seed| run_config(SimConfig::from_seed(seed).with_faults(classes)))
        .collect();
    check(&reports, 40, 5_000);
    let replaced: u64 = reports.iter().map(|r| r.disks_replaced).sum();
    let lost: u64 = reports.iter().map(|r| r.replaced_marked_lost).sum();
    assert!(replaced > 30, "only {replaced} disks replaced");
    assert!(lost > 3, "only {lost} replaced OSDs marked lost first");
    let purged: u64 = reports.iter().map(|r| r.replaced_purged).sum();
    assert!(purged > 2, "only {purged} replaced OSDs purged first");
    let backfills: u64 = reports.iter().map(|r| r.backfills).sum();
    assert!(backfills > 15, "only {backfills} backfills");
}

/// Decommissions (`--faults all,decommission`): an operator retires one OSD for good,
/// out, `osd safe-to-destroy` until the monitor says yes, stop, `osd purge` (not
/// forced), while the other faults go on. The retired OSD's disks are gone, so a wrong
/// yes would lose acknowledged writes; the cluster shrinks and must converge without
/// it. Seeds 0..40 run in the default tests.
#[test]
fn fixed_seeds_pass_with_an_osd_retired() {
    let classes = FaultClasses {
        decommission: true,
        ..FaultClasses::ALL
    };
    let reports: Vec<SimReport> = (0..40)
        .map(|seed| run_config(SimConfig::from_seed(seed).with_faults(classes)))
        .collect();
    check(&reports, 40, 5_000);
    let retired: u64 = reports.iter().map(|r| r.osds_retired).sum();
    assert!(retired > 25, "only {retired} OSDs retired");
    let refusals: u64 = reports.iter().map(|r| r.retirement_refusals).sum();
    assert!(
        refusals > 40,
        "the monitor said not yet only {refusals} times"
    );
}

/// Seed 204 of `--faults all,decommission,expansion,replacements,remaps,space
/// --snap-trim --disk mem`: the monitor leader, cut off from the other two, answered
/// `safe-to-destroy` yes from a map that still showed the OSD out, while the commands
/// marking it in again waited for a quorum; the OSD was stopped for good and the run
/// never converged (it was in again, down, and its PGs undersized). The leader now
/// answers only under a read lease, and the operator marks a stopped OSD out again.
#[test]
fn regression_a_cut_off_leader_does_not_say_safe_to_destroy() {
    let classes = FaultClasses {
        decommission: true,
        expansion: true,
        replacements: true,
        remaps: true,
        space: true,
        ..FaultClasses::ALL
    };
    let config = SimConfig::from_seed(204)
        .with_faults(classes)
        .with_snap_trim(true)
        .with_disk(carmine_sim::disk::DiskKind::Mem);
    let report = run_config(config);
    assert_eq!(report.osds_retired, 1, "{}", format_report(&report));
    check(&[report], 3, 100);
}

/// The remap and space classes together (`--faults all,remaps,space --disk mem`):
/// copies move to OSDs with no room for them. Seeds 0..20 and these of their first
/// swarm, which failed before:
/// - 157 and 95: a new primary whose store refused its pull went active without the
///   object, whose only copies were on strays; only acting members were asked for it,
///   so it stayed unfound (and reads at the repaired copy raced pulls that went round
///   while the store was full). Strays of the interval's peering are asked now, and a
///   repair the store has no room for waits for the recovery tick.
/// - 517: the only copy was on an OSD that came back after peering; its announcement
///   now makes it a source.
/// - 302 and 668: a full store refused the creation of a PG the map made it a member
///   of, which then never existed there; 1103: it refused a copy adopting the
///   primary's log (with removals), which kept an object its log said was gone; 499:
///   a store past its capacity refused even what grew nothing. A full MemStore takes
///   what only keeps PGs' books (`Transaction::keeps_books_only`) and what grows
///   nothing now.
/// - 2630: a primary refused a write for space, then ran another copy of it that it
///   held while peering once there was room; the client had taken the refusal. Every
///   copy of a refused request gets the same answer now.
/// - 1437: what the authoritative copy lacked was taken as lacking on a copy that held
///   it current (the fix for taking it as absent went too far); only a backfill takes
///   on the source's missing objects.
/// - 3984: a primary pulled a removal with a copy that added data; its full store
///   refused the one transaction, and the removed object stayed missing with no
///   version anyone could supply. Removals are applied apart now.
/// - 7278 and 7708: a replica refused a write for space and ignored the RepOps after
///   it; a push then brought it the primary's copy with writes its log lacked, and
///   its reply completed those writes as if logged. The resent writes landed on the
///   newer copy (one found its object removed and failed; the PG peered again and
///   again, and reads waited for good). Nothing is pushed to a replica that owes a
///   refused write, it refuses pushes while behind, and a push completes only writes
///   it logged.
/// - 1437 again (session 41): a probe's answer that the source held another version
///   was taken as not sent, and an object whose newest change was a removal as
///   absent, while a stale copy stayed stored and was served.
/// - 7404: once client writes to an object a full replica lacks were refused instead
///   of pushing it ahead, nothing resumed the pushes held back while that replica
///   owed a refused write: the PG stayed recovering with its reservation held. The
///   pushes resume when the refused write lands.
#[test]
fn fixed_seeds_pass_with_remaps_and_space() {
    let classes = FaultClasses {
        remaps: true,
        space: true,
        ..FaultClasses::ALL
    };
    let seeds = (0..20).chain([
        95, 157, 302, 499, 517, 668, 1103, 1437, 2630, 3984, 7278, 7404, 7708,
    ]);
    let reports: Vec<SimReport> = seeds.map(|seed| run_on_memstores(seed, classes)).collect();
    check(&reports, 50, 2_000);
}

/// Seed `seed` with `classes` on MemStore OSDs (the space class squeezes only those).
/// `--faults all,expansion,remaps,space --snap-trim --disk mem` for `seed`.
fn expansion_remaps_space_trims(seed: u64) -> SimConfig {
    let classes = FaultClasses {
        expansion: true,
        remaps: true,
        space: true,
        ..FaultClasses::ALL
    };
    SimConfig::from_seed(seed)
        .with_faults(classes)
        .with_snap_trim(true)
        .with_disk(carmine_sim::disk::DiskKind::Mem)
}

/// `--faults all,remaps,disk-errors,expansion --snapshots --disk log` for `seed`.
fn failing_devices_and_new_osds(seed: u64) -> SimConfig {
    let classes = FaultClasses {
        remaps: true,
        disk_errors: true,
        expansion: true,
        ..FaultClasses::ALL
    };
    SimConfig::from_seed(seed)
        .with_faults(classes)
        .with_snapshots(true)
        .with_disk(carmine_sim::disk::DiskKind::Log)
}

fn run_on_memstores(seed: u64, classes: FaultClasses) -> SimReport {
    run_config(
        SimConfig::from_seed(seed)
            .with_faults(classes)
            .with_disk(carmine_sim::disk::DiskKind::Mem),
    )
}

/// The expansion class (`--faults all,expansion`): one or two new OSDs, in no map at
/// the start, start with empty stores during the faults, boot, and the monitor places
/// them in the CRUSH map; the PGs CRUSH moves to them are recovered or backfilled there,
/// under every other fault. Seeds 0..40, and 0..20 with the remap class as well.
#[test]
fn fixed_seeds_pass_with_new_osds_joining() {
    let expansion = FaultClasses {
        expansion: true,
        ..FaultClasses::ALL
    };
    let with_remaps = FaultClasses {
        remaps: true,
        ..expansion
    };
    let reports: Vec<SimReport> = (0..40)
        .map(|seed| run_config(SimConfig::from_seed(seed).with_faults(expansion)))
        .chain((0..20).map(|seed| run_config(SimConfig::from_seed(seed).with_faults(with_remaps))))
        .collect();
    check(&reports, 100, 5_000);
    let added: u64 = reports.iter().map(|r| r.osds_added).sum();
    assert!(added >= 60, "only {added} OSDs added");
    // Data moved to them: most PG copies of a run of 4..16 PGs on 4..7 OSDs.
    let copies: u64 = reports.iter().map(|r| r.pgs_on_added_osds).sum();
    assert!(copies > 200, "the new OSDs act for only {copies} PG copies");
}

/// Seed 17 of `--faults all,remaps,disk-errors,expansion --snapshots --disk log`: the
/// simulator tampered with a copy that was a replica only under a pg_temp entry (a
/// backfill just done); the monitor then handed the PG to it, its scrub comparison
/// kept its own copy as the PG's, and pushed it over the intact one. The simulator
/// tampers only with copies that stay replicas now. (Scrub keeps the primary's copy;
/// with no per-object digest nothing tells it which of two intact copies is right.)
#[test]
fn regression_a_copy_about_to_lead_is_not_tampered_with() {
    let report = run_config(failing_devices_and_new_osds(17));
    assert!(report.ok, "{}", format_report(&report));
}

/// The remap class with snapshots (`--faults all,remaps --snapshots`) and, on
/// MemStores, with full stores and snapshot trims as well (`--faults
/// all,remaps,space --snap-trim --disk mem`): seeds 0..10 of each, and these of their
/// first swarms, which failed before:
/// - 1116 (`--snapshots`, and `--snap-trim`): a copy lost an object's head behind the
///   store's back and then led the PG; holding a clone of it, its scrub comparison
///   took the replica's head for a clone it lacked and pushed "ours", which removed
///   the replica's head and clones. A head the primary lacks is lost now.
/// - 95, 1447, 1995, 2531, 4495, 4860, 5297, 5332 (`--snap-trim`, space): an object
///   whose newest change was a removal under a snapshot, or a snapshot trim, was
///   unfound while a stray held it: a new primary's pull found no room, later acting
///   members lacked it, and strays are asked only for an exact version, which neither
///   entry had. A source whose log ends by that entry now vouches for its copy.
/// - 10963 (`--snap-trim`, space): a full replica logged two writes without their
///   data, and a primary that led while the old one was cut off from the monitor
///   adopted that log. When the old primary, which held both objects, led again, its
///   log reached the authoritative one's newest entries but started before its tail:
///   the entries only it still held were taken for divergent, its current copies
///   were marked missing, and the PG went incomplete. Entries up to the common point
///   are shared history now.
/// - 21752 (`--snap-trim`, space): a full primary refused two writes for space and
///   remembered it alone; its copy of the PG was then deleted as a stray and made
///   again, and copies of the requests the client had resent ran once there was room,
///   applying writes the client had been told failed. The refusal is logged now.
/// - 16262 (`--snap-trim`, space): a primary with the newest log lacked an object
///   (its only other copy's store had refused it) and went incomplete, though a copy
///   whose log had diverged on another object held exactly the version needed; only
///   copies whose last update our log holds were counted. The primary now asks the
///   answering copies for the exact versions before it goes incomplete.
/// - 28576 (`--snap-trim`, space): a write acknowledged with the primary's copy alone
///   (a full replica logged it only, min_size 1) was overwritten there by a write
///   nobody acknowledged, and the primary died. The next interval went active without
///   it, with the object unfound; when the primary led again, its later write was
///   rolled back as divergent, and no copy of the acknowledged version was left. A
///   primary whose log continues the latest interval's history keeps its log now.
/// - 15189 (`--snap-trim`, space): a primary led with an object missing (its store
///   had no room for the pull), and its short log trimmed past the entry naming the
///   object's needed version; the copy that held that version then fell before the
///   log's tail, nothing showed it held it, and the PG stayed incomplete. A primary's
///   trim keeps the entries naming objects a member lacks now, as Ceph trims no
///   further than every copy's `last_complete`.
#[test]
fn fixed_seeds_pass_with_remaps_and_snapshots() {
    let remaps = FaultClasses {
        remaps: true,
        ..FaultClasses::ALL
    };
    let with_space = FaultClasses {
        space: true,
        ..remaps
    };
    let snapshots = (0..10)
        .chain([1116])
        .map(|seed| run_with_snapshots(seed, remaps));
    let trims = [1116].map(|seed| run_with_snap_trim(seed, remaps));
    let full = (0..10)
        .chain([
            95, 1447, 1995, 2531, 4495, 4860, 5297, 5332, 10963, 15189, 16262, 21752, 28576,
        ])
        .map(|seed| {
            run_config(
                SimConfig::from_seed(seed)
                    .with_faults(with_space)
                    .with_snap_trim(true)
                    .with_disk(carmine_sim::disk::DiskKind::Mem),
            )
        });
    let reports: Vec<SimReport> = snapshots.chain(trims).chain(full).collect();
    check(&reports, 50, 2_000);
}
