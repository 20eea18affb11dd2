//! Failure reports from the OSDs' heartbeats, collected at the leader (Ceph's
//! `OSDMonitor::prepare_failure` and `check_failure`).
//!
//! Each target keeps at most one report per reporter: the newest, with when it
//! arrived. A target is due to be marked down when at least `min_reporters` distinct
//! reporters hold a report younger than the grace (OSDs repeat their reports while the
//! silence lasts, so an old report means the reporter stopped complaining or stopped
//! talking). A cancellation (`alive`) withdraws its reporter. Reports are ignored from
//! a reporter the map shows down, about a target that is down or unknown, and when made
//! under a map older than the target's `up_from` (they judged an earlier incarnation).

use carmine_clustermap::OsdMap;
use carmine_proto::OsdFailure;
use carmine_types::{Epoch, OsdId};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A report the leader holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldReport {
    pub received_at: Instant,
    pub epoch: Epoch,
    pub silent_for: Duration,
}

/// Why a report was not recorded (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ignored {
    SelfReport,
    ReporterDown,
    TargetNotUp,
    StaleEpoch,
}

/// What recording a report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// A reporter not holding a report on this target before.
    New,
    /// A repeat of a report already held.
    Refreshed,
    /// A cancellation that withdrew a held report.
    Withdrawn,
    /// A cancellation with nothing to withdraw.
    Nothing,
}

/// The leader's failure reports, by target then reporter.
#[derive(Debug, Default, Clone)]
pub(crate) struct FailureReports {
    targets: BTreeMap<OsdId, BTreeMap<OsdId, HeldReport>>,
}

impl FailureReports {
    /// Records `report` (whose sender the caller has checked is its reporter).
    pub fn record(
        &mut self,
        now: Instant,
        map: &OsdMap,
        report: &OsdFailure,
    ) -> Result<Recorded, Ignored> {
        if report.reporter == report.target {
            return Err(Ignored::SelfReport);
        }
        if !map.is_up(report.reporter) {
            return Err(Ignored::ReporterDown);
        }
        let Some(target) = map.osd(report.target).filter(|info| info.up) else {
            return Err(Ignored::TargetNotUp);
        };
        if report.epoch < target.up_from {
            return Err(Ignored::StaleEpoch);
        }
        if report.alive {
            let Some(reporters) = self.targets.get_mut(&report.target) else {
                return Ok(Recorded::Nothing);
            };
            let withdrawn = reporters.remove(&report.reporter).is_some();
            if reporters.is_empty() {
                self.targets.remove(&report.target);
            }
            return Ok(if withdrawn {
                Recorded::Withdrawn
            } else {
                Recorded::Nothing
            });
        }
        let held = HeldReport {
            received_at: now,
            epoch: report.epoch,
            silent_for: Duration::from_millis(report.silent_for_ms),
        };
        let previous = self
            .targets
            .entry(report.target)
            .or_default()
            .insert(report.reporter, held);
        Ok(if previous.is_some() {
            Recorded::Refreshed
        } else {
            Recorded::New
        })
    }

    /// Targets that enough distinct, up reporters hold failed now, each with its fresh
    /// reports.
    pub fn due(
        &self,
        now: Instant,
        map: &OsdMap,
        grace: Duration,
        min_reporters: u32,
    ) -> Vec<(OsdId, Vec<(OsdId, HeldReport)>)> {
        let mut due = Vec::new();
        for (&target, reporters) in &self.targets {
            let Some(info) = map.osd(target).filter(|info| info.up) else {
                continue;
            };
            let fresh: Vec<(OsdId, HeldReport)> = reporters
                .iter()
                .filter(|(&reporter, held)| {
                    map.is_up(reporter)
                        && held.epoch >= info.up_from
                        && now.saturating_duration_since(held.received_at) < grace
                })
                .map(|(&reporter, &held)| (reporter, held))
                .collect();
            if fresh.len() >= min_reporters.max(1) as usize {
                due.push((target, fresh));
            }
        }
        due
    }

    /// Drops what a new map makes moot: reports on targets now down or restarted since,
    /// and reports by reporters now down.
    pub fn prune(&mut self, map: &OsdMap) {
        self.targets.retain(|&target, reporters| {
            let Some(info) = map.osd(target).filter(|info| info.up) else {
                return false;
            };
            reporters.retain(|&reporter, held| map.is_up(reporter) && held.epoch >= info.up_from);
            !reporters.is_empty()
        });
    }

    /// Forgets everything (this monitor stopped leading; the OSDs re-send to the next).
    pub fn clear(&mut self) {
        self.targets.clear();
    }

    /// Reporters held for `target` (for tests and status).
    #[cfg(test)]
    pub fn reporters(&self, target: OsdId) -> Vec<OsdId> {
        self.targets
            .get(&target)
            .map(|r| r.keys().copied().collect())
            .unwrap_or_default()
    }
}

impl crate::Monitor {
    /// An OSD's failure report or cancellation: recorded at the leader, forwarded by a
    /// follower (like stats).
    pub(crate) fn handle_failure(
        &mut self,
        now: Instant,
        from: carmine_types::EntityName,
        report: OsdFailure,
        out: &mut Vec<crate::MonOutput>,
    ) {
        if from != carmine_types::EntityName::osd(report.reporter) {
            tracing::warn!(
                "mon.{}: {from} sent a failure report as {}; ignored",
                self.rank,
                report.reporter
            );
            return;
        }
        if self.is_leader() {
            self.record_failure(now, report);
        } else if self.known_leader.is_some() {
            let inner = carmine_proto::Msg::OsdFailure(report);
            let forward = carmine_proto::MonForward {
                origin_rank: self.rank,
                token: 0,
                sender: from,
                inner_type: inner.msg_type(),
                inner: inner.encode_front(),
            };
            self.route(now, forward, out);
        }
    }

    /// The leader's side: hold the report; the next failure check acts on it.
    pub(crate) fn record_failure(&mut self, now: Instant, report: OsdFailure) {
        let map = self.map.clone();
        let (target, reporter) = (report.target, report.reporter);
        match self.failures.record(now, &map, &report) {
            Ok(Recorded::New) => tracing::info!(
                "mon.{}: {reporter} reports {target} silent for {:.1} s (e{}; {} reporter(s) needed)",
                self.rank,
                report.silent_for_ms as f64 / 1000.0,
                report.epoch.0,
                self.failure_settings.min_down_reporters
            ),
            Ok(Recorded::Withdrawn) => tracing::info!(
                "mon.{}: {reporter} hears {target} again; report withdrawn",
                self.rank
            ),
            Ok(Recorded::Refreshed | Recorded::Nothing) => {}
            Err(why) => tracing::debug!(
                "mon.{}: failure report on {target} by {reporter} ignored: {why:?}",
                self.rank
            ),
        }
    }

    /// Re-reads the failure settings from the applied map's config keys, logging each
    /// value that does not parse once.
    pub(crate) fn read_settings(&mut self) {
        use carmine_clustermap::settings::{
            MON_OSD_DOWN_OUT_INTERVAL, MON_OSD_MIN_DOWN_REPORTERS, OSD_HEARTBEAT_GRACE,
        };
        let config = &self.map.config;
        let reader = &mut self.settings_reader;
        let heartbeat_grace =
            reader.seconds(config, OSD_HEARTBEAT_GRACE, self.config.osd_heartbeat_grace);
        let min_down_reporters = reader.count(
            config,
            MON_OSD_MIN_DOWN_REPORTERS,
            self.config.min_down_reporters.max(1),
        );
        let down_out = reader.seconds(
            config,
            MON_OSD_DOWN_OUT_INTERVAL,
            self.config.osd_down_out_interval,
        );
        for warning in reader.take_warnings() {
            tracing::warn!("mon.{}: config: {warning}", self.rank);
        }
        self.failure_settings = crate::FailureSettings {
            heartbeat_grace,
            min_down_reporters,
            down_out_interval: (!down_out.is_zero()).then_some(down_out),
        };
    }

    /// Targets to mark down on the strength of their peers' reports, each with a
    /// sentence for the log.
    pub(crate) fn reported_down(&self, now: Instant) -> Vec<(OsdId, String)> {
        let settings = self.failure_settings;
        self.failures
            .due(
                now,
                &self.map,
                settings.heartbeat_grace,
                settings.min_down_reporters,
            )
            .into_iter()
            .map(|(target, reports)| {
                let by: Vec<String> = reports
                    .iter()
                    .map(|(reporter, held)| {
                        format!("{reporter} ({:.1} s)", held.silent_for.as_secs_f64())
                    })
                    .collect();
                (target, format!("reported failed by {}", by.join(", ")))
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "failure_tests.rs"]
mod tests;
