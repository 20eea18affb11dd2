//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
//!
//! Known today: none. Add a failing seed here as a test that calls
//! `carmine_sim::run_config` and asserts the report is `ok` (see `tests/seeds.rs` for
//! the config builders), with what its trace shows. The stale reads of seeds 287 and 852 (read leases), seed 1878
//! (an op held across a primary change), the unreadable object of seed 3176 (an
//! interval below min_size recorded as started), the incomplete PG of seed 23448 (a
//! rollback that kept versions only the rolled-back copy had), the PG counts of seeds
//! 102790 (a rollback no copy could settle) and 382 with `--snapshots` (unsure counts
//! settled from a copy that had them from us), seed 382 of the remap class with
//! snapshots (doubtful counts adopted as sure by a later primary), the unfound object of seed 211550 (the
//! last intact copy on a returning backfill target), seeds 173 and 1356 of the
//! disk-error class (an activation that left before the primary's log was durable),
//! seeds 1514, 1822 and 2346 of the space class (a push's answer taken for a
//! write's), the incomplete PGs of seeds 10963 (entries the authoritative log had
//! trimmed taken for divergent), 16262 (a diverged copy holding the needed version
//! never asked) and 15189 (the entry naming a missing object's needed version
//! trimmed), and the unfound object of seed 28576 (a later write rolled back over the
//! only copy of an acknowledged one) of remaps, space and snapshot trims, and the
//! degraded PG of seed 5531 of remaps, disk errors and expansion with snapshots (an
//! adopted log naming a write no copy could serve) and the clone on one copy only of
//! seed 1132 of expansion, remaps, space and snapshot trims (a removed object a
//! backfill source lacked taken for gone), seed 36287 of the same class (a
//! missing object's needed version gone with the log entries naming it) and seed
//! 34338 of the same class (an acknowledged write resting on the primary's data
//! alone, lost when a stale primary overwrote it) are regression seeds now.

#![cfg(feature = "known-gaps")]
