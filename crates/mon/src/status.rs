//! `carmine status`: the cluster summarised from the map and the OSDs' latest reports.

use crate::Monitor;
use carmine_clustermap::Fullness;
use carmine_proto::{ClusterStatus, OsdUsage, PgStat, PgState, PoolStatus};
use carmine_types::PgId;
use std::collections::BTreeMap;
use std::time::Instant;

/// PGs that `status` names one by one with why they cannot serve; the rest are counted.
pub const INACTIVE_PG_CHECKS_MAX: usize = 16;

/// Health checks that make the cluster `HEALTH_ERR` rather than `HEALTH_WARN`.
const ERROR_CHECKS: [&str; 3] = ["OSD_FULL", "POOL_FULL", "PG_DAMAGED"];

impl Monitor {
    /// The cluster at a glance, with health checks as `ceph -s` words them.
    pub fn status(&self, now: Instant) -> ClusterStatus {
        let map = &self.map;
        let mut status = ClusterStatus {
            fsid: map.fsid,
            epoch: map.epoch,
            mon_count: self.ranks.len() as u32,
            mon_leader: self.known_leader,
            mon_quorum: self.quorum(now),
            osd_count: map.osds.len() as u32,
            osds_up: map.up_count() as u32,
            osds_in: map.in_count() as u32,
            ..ClusterStatus::default()
        };
        let pg_stats = self.current_pg_stats();
        self.summarise_pools(&pg_stats, &mut status);
        self.summarise_osds(now, &mut status);
        status.health_checks = self.health_checks(&status, &pg_stats);
        // As Ceph grades them: a full OSD or pool stops writes, an error.
        let is_error = |check: &String| {
            ERROR_CHECKS
                .iter()
                .any(|code| check.starts_with(&format!("{code}:")))
        };
        status.health = if status.health_checks.is_empty() {
            "HEALTH_OK".into()
        } else if status.health_checks.iter().any(is_error) {
            "HEALTH_ERR".into()
        } else {
            "HEALTH_WARN".into()
        };
        status
    }

    /// This monitor and the peers it heard from within two election timeouts, when it
    /// leads (followers hear only from the leader, so they report just the two).
    pub fn quorum(&self, now: Instant) -> Vec<u64> {
        let window = self.config.raft_tick * (2 * self.config.election_ticks) as u32;
        let mut quorum: Vec<u64> = self
            .peer_heard
            .iter()
            .filter(|(_, &at)| now.duration_since(at) <= window)
            .map(|(&rank, _)| rank)
            .collect();
        quorum.push(self.rank);
        quorum.sort_unstable();
        quorum
    }

    /// Whether this leader may answer a read that must not be stale (`osd
    /// safe-to-destroy`): it heard from a majority of the monitors (itself included)
    /// within half an election timeout. Raft runs with check_quorum and pre-vote, so
    /// a monitor that heard from the leader within an election timeout votes for no
    /// one: no newer leader can have been elected, nor newer maps committed, in the
    /// meantime. A leader cut off from the others answers from a map the majority may
    /// have moved past (Ceph's monitors serve reads under a lease for the same reason).
    pub(crate) fn holds_read_lease(&self, now: Instant) -> bool {
        let window = self.config.raft_tick * (self.config.election_ticks as u32) / 2;
        let heard = (self.peer_heard.iter())
            .filter(|(&rank, &at)| rank != self.rank && now.duration_since(at) <= window)
            .count();
        heard + 1 > self.ranks.len() / 2
    }

    /// The newest report for each PG, from the OSD the current map names primary.
    /// Every PG of every pool: its primary's last report, or (never reported, or its
    /// primary is down) its state as the map alone tells it, as `ceph pg dump` lists
    /// PGs whose primary went away as stale.
    pub(crate) fn pg_dump(&self) -> Vec<PgStat> {
        let reported = self.current_pg_stats();
        let mut pgs = Vec::new();
        for pool in self.map.pools.values() {
            for seed in 0..pool.pg_num {
                let pgid = PgId {
                    pool: pool.id,
                    seed,
                };
                let stat = reported.get(&pgid).cloned().unwrap_or_else(|| {
                    let acting = self
                        .map
                        .pg_mapping(pgid)
                        .map(|m| m.acting)
                        .unwrap_or_default();
                    PgStat {
                        pgid,
                        state: PgState(PgState::STALE),
                        object_count: 0,
                        data_bytes: 0,
                        last_update: Default::default(),
                        acting,
                        interval_start: Default::default(),
                        want_acting: Vec::new(),
                        reason: self.stale_reason(pgid),
                        want_up_thru: Default::default(),
                        unfound: 0,
                    }
                });
                pgs.push(stat);
            }
        }
        pgs
    }

    /// Why a PG has no current report (listed `stale`).
    fn stale_reason(&self, pgid: PgId) -> String {
        match self.map.pg_mapping(pgid).and_then(|m| m.primary) {
            Some(primary) if self.map.is_up(primary) => {
                format!("stale: no report from its primary {primary} yet")
            }
            Some(primary) => format!("stale: its primary {primary} is down"),
            None => "stale: no OSD is up to serve it".to_string(),
        }
    }

    /// One check per PG that reports why it cannot serve (down, incomplete, peering
    /// or activating), at most [`INACTIVE_PG_CHECKS_MAX`] of them (Ceph's
    /// `PG_AVAILABILITY` detail lines).
    fn inactive_pg_checks(&self, pg_stats: &BTreeMap<PgId, PgStat>) -> Vec<String> {
        let inactive: Vec<&PgStat> = (pg_stats.values())
            .filter(|stat| !stat.reason.is_empty())
            .collect();
        let mut checks: Vec<String> = inactive
            .iter()
            .take(INACTIVE_PG_CHECKS_MAX)
            .map(|stat| format!("PG_AVAILABILITY: pg {} is {}", stat.pgid, stat.reason))
            .collect();
        if inactive.len() > INACTIVE_PG_CHECKS_MAX {
            checks.push(format!(
                "PG_AVAILABILITY: {} more pgs cannot serve",
                inactive.len() - INACTIVE_PG_CHECKS_MAX
            ));
        }
        checks
    }

    fn current_pg_stats(&self) -> BTreeMap<PgId, PgStat> {
        let mut pgs = BTreeMap::new();
        for tracking in self.osds.values() {
            let Some((_, stats)) = &tracking.stats else {
                continue;
            };
            for pg in &stats.pgs {
                let primary = self.map.pg_mapping(pg.pgid).and_then(|m| m.primary);
                if primary == Some(stats.osd) && self.map.is_up(stats.osd) {
                    pgs.insert(pg.pgid, pg.clone());
                }
            }
        }
        pgs
    }

    fn summarise_pools(&self, pg_stats: &BTreeMap<PgId, PgStat>, status: &mut ClusterStatus) {
        for pool in self.map.pools.values() {
            let mut pool_status = PoolStatus {
                name: pool.name.clone(),
                id: pool.id.0,
                size: pool.size,
                min_size: pool.min_size,
                pg_num: pool.pg_num,
                ..PoolStatus::default()
            };
            for seed in 0..pool.pg_num {
                let pgid = PgId {
                    pool: pool.id,
                    seed,
                };
                let state = match pg_stats.get(&pgid) {
                    Some(stat) => {
                        pool_status.object_count += stat.object_count;
                        pool_status.data_bytes += stat.data_bytes;
                        status.raw_used_bytes += stat.data_bytes * stat.acting.len() as u64;
                        stat.state.name()
                    }
                    None => "unknown".to_string(),
                };
                *status.pg_states.entry(state).or_default() += 1;
                status.pg_count += 1;
            }
            status.object_count += pool_status.object_count;
            status.data_bytes += pool_status.data_bytes;
            status.pools.push(pool_status);
        }
    }

    fn summarise_osds(&self, now: Instant, status: &mut ClusterStatus) {
        for osd in self.map.osds.values() {
            let mut usage = OsdUsage {
                osd: osd.id,
                up: osd.up,
                weight: osd.weight,
                shard_count: osd.shard_count(),
                ..OsdUsage::default()
            };
            let tracking = self.osds.get(&osd.id);
            if let Some((at, stats)) = tracking.and_then(|t| t.stats.as_ref()) {
                usage.object_count = stats.object_count;
                usage.data_bytes = stats.data_bytes;
                usage.capacity_bytes = stats.capacity_bytes;
                usage.pg_count = stats.pgs.len() as u32;
                usage.ops_total = stats.ops_total;
                usage.wrong_shard_total = stats.wrong_shard_total;
                let fresh = now.duration_since(*at).as_secs_f64() < 10.0;
                if let (true, Some((before_at, before))) = (
                    fresh && osd.up,
                    tracking.and_then(|t| t.previous_stats.as_ref()),
                ) {
                    let seconds = at.duration_since(*before_at).as_secs_f64();
                    if seconds > 0.0 {
                        let rate = |a: u64, b: u64| (a.saturating_sub(b) as f64 / seconds) as u64;
                        status.client_ops_per_second += rate(stats.ops_total, before.ops_total);
                        status.client_write_bytes_per_second +=
                            rate(stats.write_bytes_total, before.write_bytes_total);
                        status.client_read_bytes_per_second +=
                            rate(stats.read_bytes_total, before.read_bytes_total);
                    }
                }
            }
            status.osds.push(usage);
        }
    }

    fn health_checks(
        &self,
        status: &ClusterStatus,
        pg_stats: &BTreeMap<PgId, PgStat>,
    ) -> Vec<String> {
        let mut checks = Vec::new();
        let down = status.osd_count - status.osds_up;
        if down > 0 {
            let names: Vec<String> = self
                .map
                .osds
                .values()
                .filter(|osd| !osd.up)
                .map(|osd| osd.id.to_string())
                .collect();
            checks.push(format!("OSD_DOWN: {down} osds down ({})", names.join(", ")));
        }
        if status.osd_count == 0 {
            checks.push("OSD_COUNT: no OSDs have booted".into());
        }
        // Copies found corrupt and not (yet) replaced, from each up OSD's latest report.
        let (found, repaired) = self
            .osds
            .iter()
            .filter(|(id, _)| self.map.is_up(**id))
            .filter_map(|(_, tracking)| tracking.stats.as_ref())
            .fold((0u64, 0u64), |(f, r), (_, stats)| {
                (
                    f + stats.corrupt_copies_found_total,
                    r + stats.copies_repaired_total,
                )
            });
        if found > repaired {
            checks.push(format!(
                "OSD_SCRUB_ERRORS: {} corrupt or inconsistent object copies found and not yet repaired \
                 ({found} found, {repaired} repaired)",
                found - repaired
            ));
        }
        let flags = self.map.flags.names();
        if !flags.is_empty() {
            checks.push(format!("OSDMAP_FLAGS: {} flag(s) set", flags.join(",")));
        }
        let not_clean: u32 = status
            .pg_states
            .iter()
            .filter(|(state, _)| !clean_state(state))
            .map(|(_, count)| *count)
            .sum();
        if not_clean > 0 {
            let detail: Vec<String> = status
                .pg_states
                .iter()
                .filter(|(state, _)| !clean_state(state))
                .map(|(state, count)| format!("{count} {state}"))
                .collect();
            checks.push(format!(
                "PG_NOT_CLEAN: {not_clean} pgs not active+clean ({})",
                detail.join(", ")
            ));
        }
        checks.extend(Self::unfound_checks(pg_stats));
        checks.extend(self.fullness_checks());
        checks.extend(self.inactive_pg_checks(pg_stats));
        checks
    }

    /// `OBJECT_UNFOUND` (a warning) with the PGs holding unfound objects, at most
    /// [`INACTIVE_PG_CHECKS_MAX`] named, and `PG_DAMAGED` (an error) counting those
    /// PGs, worded as Ceph words them: until an OSD holding the objects returns, ops on
    /// them fail (or an operator gives them up: `pg mark_unfound_lost`).
    fn unfound_checks(stats: &BTreeMap<PgId, PgStat>) -> Vec<String> {
        let damaged: Vec<&PgStat> = stats.values().filter(|stat| stat.unfound > 0).collect();
        if damaged.is_empty() {
            return Vec::new();
        }
        let unfound: u64 = damaged.iter().map(|stat| stat.unfound).sum();
        let objects: u64 = stats.values().map(|stat| stat.object_count).sum();
        let objects = objects.max(unfound);
        let mut pgs: Vec<String> = (damaged.iter())
            .take(INACTIVE_PG_CHECKS_MAX)
            .map(|stat| format!("pg {} has {} unfound objects", stat.pgid, stat.unfound))
            .collect();
        if damaged.len() > INACTIVE_PG_CHECKS_MAX {
            pgs.push(format!(
                "{} more pgs",
                damaged.len() - INACTIVE_PG_CHECKS_MAX
            ));
        }
        vec![
            format!(
                "OBJECT_UNFOUND: {unfound}/{objects} objects unfound ({:.3}%) ({}); \
                 `carmine pg list_unfound PGID` names them, and once no OSD holding them \
                 can return, `carmine pg mark_unfound_lost PGID delete` gives them up",
                unfound as f64 * 100.0 / objects as f64,
                pgs.join(", ")
            ),
            format!(
                "PG_DAMAGED: Possible data damage: {} pgs recovery_unfound",
                damaged.len()
            ),
        ]
    }

    /// `OSD_FULL`, `OSD_BACKFILLFULL`, `OSD_NEARFULL` from the states the map
    /// publishes, `POOL_FULL` for pools with a PG on a full OSD (their writes that add
    /// data are refused), and `OSD_OUT_OF_ORDER_FULL` when the ratios do not ascend,
    /// worded as Ceph words them.
    fn fullness_checks(&self) -> Vec<String> {
        let mut checks = Vec::new();
        let ratios = self.map.full_ratios();
        for (state, code) in [
            (Fullness::Full, "OSD_FULL"),
            (Fullness::BackfillFull, "OSD_BACKFILLFULL"),
            (Fullness::NearFull, "OSD_NEARFULL"),
        ] {
            let names: Vec<String> = self
                .map
                .osds
                .values()
                .filter(|osd| osd.fullness == state)
                .map(|osd| osd.id.to_string())
                .collect();
            if !names.is_empty() {
                checks.push(format!(
                    "{code}: {} {}{} ({}); full ratio {}, backfillfull {}, nearfull {}",
                    names.len(),
                    state.name(),
                    if names.len() == 1 { " osd" } else { " osds" },
                    names.join(", "),
                    ratios.full,
                    ratios.backfillfull,
                    ratios.nearfull
                ));
            }
        }
        let full_pools: Vec<String> = self
            .map
            .pools
            .values()
            .filter(|pool| {
                (0..pool.pg_num).any(|seed| {
                    let pgid = PgId {
                        pool: pool.id,
                        seed,
                    };
                    self.map.pg_mapping(pgid).is_some_and(|mapping| {
                        mapping
                            .acting
                            .iter()
                            .any(|&osd| self.map.fullness(osd) == Fullness::Full)
                    })
                })
            })
            .map(|pool| format!("'{}'", pool.name))
            .collect();
        if !full_pools.is_empty() {
            checks.push(format!(
                "POOL_FULL: {} pool(s) full ({}): writes that add data get NoSpace; \
                 delete objects or add OSDs, or raise the ratio with \
                 `carmine osd set-full-ratio`",
                full_pools.len(),
                full_pools.join(", ")
            ));
        }
        if !ratios.in_order() {
            checks.push(format!(
                "OSD_OUT_OF_ORDER_FULL: full ratio(s) out of order: nearfull {} <= \
                 backfillfull {} <= full {} <= failsafe {} does not hold",
                ratios.nearfull, ratios.backfillfull, ratios.full, ratios.failsafe
            ));
        }
        checks
    }
}

/// Whether a PG state name counts as clean for `PG_NOT_CLEAN`: `active+clean`, also
/// while it trims snapshots in the background (`active+clean+snaptrim`), which Ceph's
/// health does not warn about either.
fn clean_state(name: &str) -> bool {
    let mut parts: Vec<&str> = name.split('+').filter(|part| *part != "snaptrim").collect();
    parts.sort_unstable();
    parts == ["active", "clean"]
}

impl Monitor {
    /// `osd safe-to-destroy`: whether the cluster keeps all its data without `osd`.
    /// Yes (the answer in words) when no PG maps to it and every PG's primary reports
    /// it active+clean: each PG then holds all its data on its acting set, which does
    /// not include `osd`. A copy `osd` still holds is then a stray's, which the PG
    /// no longer needs. No (why not) otherwise, as Ceph's check refuses while PGs map
    /// to the OSD or are not all active+clean.
    pub(crate) fn safe_to_destroy(&self, osd: carmine_types::OsdId) -> Result<String, String> {
        if self.map.osd(osd).is_none() {
            return Err(format!("{osd} does not exist"));
        }
        let pg_stats = self.current_pg_stats();
        let (mut mapped, mut unclean, mut unreported) = (0u64, 0u64, 0u64);
        for pool in self.map.pools.values() {
            for seed in 0..pool.pg_num {
                let pgid = PgId {
                    pool: pool.id,
                    seed,
                };
                let mapping = self.map.pg_mapping(pgid);
                let mapped_now = (mapping.as_ref())
                    .is_some_and(|m| m.up.contains(&osd) || m.acting.contains(&osd));
                let reported = pg_stats.get(&pgid);
                // A report counts for the acting set it names: one from before the
                // map moved the PG says nothing about its new members.
                let stat = reported
                    .filter(|stat| mapping.as_ref().is_some_and(|m| m.acting == stat.acting));
                if mapped_now || reported.is_some_and(|stat| stat.acting.contains(&osd)) {
                    mapped += 1;
                } else if let Some(stat) = stat {
                    let clean =
                        stat.state.contains(PgState::ACTIVE) && stat.state.contains(PgState::CLEAN);
                    unclean += u64::from(!clean);
                } else {
                    unreported += 1;
                }
            }
        }
        let mut why = Vec::new();
        if mapped > 0 {
            why.push(format!(
                "{mapped} pgs are mapped to it (mark it out and let its data move first)"
            ));
        }
        if unclean > 0 {
            why.push(format!(
                "{unclean} pgs are not active+clean (it may hold a copy they need)"
            ));
        }
        if unreported > 0 {
            why.push(format!(
                "{unreported} pgs have no report from their primary for their current \
                 acting set (their state is unknown)"
            ));
        }
        if why.is_empty() {
            Ok(format!(
                "{osd} is safe to destroy without reducing data durability"
            ))
        } else {
            Err(format!("{osd} is not safe to destroy: {}", why.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::clean_state;

    #[test]
    fn snapshot_trimming_is_clean_for_health_but_waiting_to_trim_is_not() {
        assert!(clean_state("active+clean"));
        assert!(clean_state("active+clean+snaptrim"));
        assert!(!clean_state("active+degraded+undersized+snaptrim_wait"));
        assert!(!clean_state("active+undersized+degraded"));
        assert!(!clean_state("active"));
        assert!(!clean_state("snaptrim"));
    }
}
