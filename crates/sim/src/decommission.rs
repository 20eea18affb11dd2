//! The decommission fault class: an operator retires one OSD for good while the other
//! faults go on, as one retires a disk or a host in Ceph: `osd out N`, then `osd
//! safe-to-destroy N` asked again and again until the monitor says yes, then the OSD
//! is stopped and `osd purge N --yes-i-really-mean-it` (not forced) sent until the map
//! no longer has it. The OSD never returns and its disks are gone, so the class tests
//! the monitor's safety check: had it said yes while some PG still needed the OSD's
//! copy, acknowledged writes would be lost and the checkers would say so. The cluster
//! also shrinks (CRUSH moves the PGs that chose the retired OSD's host once more), and
//! peering must go on without the purged member of past intervals.
//!
//! One OSD at most per run, chosen at a random time of the fault phase's first half,
//! and only where the OSDs left are at least the pool's size. The retirement goes on
//! through the heal; convergence waits for the purge. The operator is a reconciler
//! like the remap class's: it sends what the newest map does not show yet, again every
//! [`RESEND_AFTER`], on the monitor session of a client, and reads the monitor's
//! answers to `safe-to-destroy` (tids from [`TID_BASE`]). Its own random stream (a fork
//! of the seed), so seeds without the class run exactly as before. Not part of
//! `--faults all`: `--faults all,decommission` adds it.

use crate::events::Event;
use crate::rng::Rng;
use crate::sim::{Phase, Sim};
use crate::time::{Nanos, MILLISECOND, SECOND};
use carmine_proto::{Command, CommandOutput, MonCommandReply};
use carmine_types::OsdId;

/// How often the operator looks at the map and asks the monitor again.
pub const STEP: Nanos = 250 * MILLISECOND;
/// How long the operator waits for the map to show a command before sending it again.
pub const RESEND_AFTER: Nanos = SECOND;
/// The operator's command tids for decommissions start here (above the other
/// operator classes').
pub const TID_BASE: u64 = 1 << 43;

/// Where the retirement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Marked out (or to be); waiting for `safe-to-destroy` to say yes.
    Draining,
    /// Stopped for good; waiting for the map to show it down, then purged.
    Stopped,
    Done,
}

#[derive(Debug)]
pub struct DecommissionState {
    rng: Rng,
    target: Option<OsdId>,
    stage: Stage,
    sent_at: Option<Nanos>,
    next_tid: u64,
    /// OSDs retired (0 or 1), `safe-to-destroy` answers that said no, and purges the
    /// monitor refused.
    pub retired: u64,
    pub refused: u64,
}

impl DecommissionState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x4445_434f), // "DECO"
            target: None,
            stage: Stage::Done,
            sent_at: None,
            next_tid: TID_BASE,
            retired: 0,
            refused: 0,
        }
    }
}

impl Sim {
    /// At the start of the workload: when the operator starts the retirement.
    pub(crate) fn start_decommission(&mut self) {
        if self.config.faults.decommission {
            let at = (self.decommission.rng).between(SECOND / 2, self.config.fault_phase / 2);
            self.schedule(at, Event::Decommission);
        }
    }

    /// The operator picks the OSD to retire, if the OSDs left would still hold a whole
    /// acting set, and starts draining it.
    pub(crate) fn decommission(&mut self) {
        if self.phase != Phase::Faults || self.decommission.target.is_some() {
            return;
        }
        if self.osds.len() <= usize::from(self.config.pool_size) {
            return;
        }
        let osds: Vec<OsdId> = self.osds.keys().copied().collect();
        let osd = osds[self.decommission.rng.index(osds.len())];
        self.decommission.target = Some(osd);
        self.decommission.stage = Stage::Draining;
        self.record_side_fault(format!("operator: retires {osd} (out, then purge)"));
        self.schedule(0, Event::DecommissionStep);
    }

    /// The OSD being retired or retired, if any (the other operator classes leave it
    /// alone).
    pub(crate) fn decommissioned(&self) -> Option<OsdId> {
        self.decommission.target
    }

    /// Whether `osd` was stopped for good (never restarted).
    pub(crate) fn is_retired(&self, osd: OsdId) -> bool {
        self.decommission.target == Some(osd) && self.decommission.stage != Stage::Draining
    }

    /// One look: send what the map does not show yet, or ask whether it is safe.
    pub(crate) fn decommission_step(&mut self) {
        let Some(osd) = self.decommission.target else {
            return;
        };
        if self.phase == Phase::Done || self.decommission.stage == Stage::Done {
            return;
        }
        self.schedule(STEP, Event::DecommissionStep);
        let info = self.newest_map.osd(osd).cloned();
        let command = match (self.decommission.stage, info) {
            (Stage::Draining, Some(info)) if info.is_in() => Command::OsdOut(osd),
            (Stage::Draining, _) => Command::OsdSafeToDestroy(osd),
            // A command sent before (another operator's, or one a monitor applied
            // late) may have marked it in again: out first, as a careful operator.
            (Stage::Stopped, Some(info)) if info.is_in() => Command::OsdOut(osd),
            (Stage::Stopped, Some(info)) if info.up => Command::OsdDown(osd),
            (Stage::Stopped, Some(_)) => Command::OsdPurge {
                osd,
                confirm: true,
                force: false,
            },
            (Stage::Stopped, None) | (Stage::Done, _) => {
                self.decommission.stage = Stage::Done;
                self.decommission.retired += 1;
                self.record_side_fault(format!("operator: {osd} is purged from the map"));
                return;
            }
        };
        let now = self.now();
        let asking = matches!(command, Command::OsdSafeToDestroy(_));
        let due = asking || (self.decommission.sent_at).is_none_or(|at| now >= at + RESEND_AFTER);
        let tid = self.decommission.next_tid;
        if due && self.send_operator_command(tid, command) {
            self.decommission.next_tid += 1;
            self.decommission.sent_at = Some(now);
        }
    }

    /// The monitor's answer to one of the operator's commands. A yes to
    /// `safe-to-destroy` while draining stops the OSD for good; refusals are counted.
    pub(crate) fn decommission_answered(&mut self, index: u32, reply: MonCommandReply) {
        self.trace.note(self.now(), || {
            format!(
                "client{index}: the monitor answers decommission command {}: {:?}",
                reply.tid, reply.result
            )
        });
        let Some(osd) = self.decommission.target else {
            return;
        };
        match reply.result {
            Ok(CommandOutput::Done { message, .. })
                if message.contains("is safe to destroy")
                    && self.decommission.stage == Stage::Draining =>
            {
                self.decommission.stage = Stage::Stopped;
                self.decommission.sent_at = None;
                self.record_side_fault(format!(
                    "operator: {osd} is safe to destroy; stopped for good"
                ));
                self.crash_osd(osd);
            }
            Ok(_) => {}
            Err(_) => self.decommission.refused += 1,
        }
    }

    /// A retirement the map does not show finished yet (convergence waits for it).
    pub(crate) fn decommission_problem(&self) -> Option<String> {
        let osd = self.decommission.target?;
        (self.decommission.stage != Stage::Done)
            .then(|| format!("{osd} is being retired ({:?})", self.decommission.stage))
    }
}
