//! The remap fault class: an operator moves data while the other faults go on. Now and
//! then one OSD is marked out (`ceph osd out`), reweighted to 0.25–0.9 (`ceph osd
//! reweight`) or given a primary affinity of 0 or 0.5 (`ceph osd primary-affinity`),
//! or a size-3 pool goes down to two copies (`ceph osd pool set NAME size 2`; its
//! min_size stays), for half a second to 6 s, then set back. Each change is a new interval for the PGs
//! it moves: new members are backfilled (with a pg_temp while they catch up), old ones
//! become strays, and primaries change. Nothing acknowledged may be lost, and the run
//! must converge once every setting is back.
//!
//! The operator is a reconciler, as a careful one is: it holds the settings it wants
//! and sends the command (on the monitor session of a client) for each OSD whose
//! setting in the newest map differs, again every [`RESEND_AFTER`] until the map
//! shows it. A command lost with a monitor, or one applied late, is so corrected; the
//! replies are only traced. At the heal every setting goes back to its default.
//!
//! Changes run on their own schedule and random stream (a fork of the seed), so seeds
//! without the class run exactly as before. The class is not part of `--faults all`:
//! `--faults all,remaps` adds it.

use crate::events::Event;
use crate::rng::Rng;
use crate::sim::{Phase, Sim};
use crate::time::{Nanos, MILLISECOND, SECOND};
use carmine_clustermap::{OsdInfo, OsdMap, WEIGHT_IN};
use carmine_proto::{Command, MonCommand, MonCommandReply, Msg};
use carmine_types::{OsdId, PoolId};
use std::collections::BTreeMap;

/// Mean time between changes.
pub const CHANGE_INTERVAL_MEAN: Nanos = 3 * SECOND / 2;
/// How long the operator waits for the map to show a setting before sending it again.
pub const RESEND_AFTER: Nanos = SECOND;
/// The operator's command tids start here (snapshot removals use lower ones).
pub const TID_BASE: u64 = 1 << 41;

/// What the operator changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setting {
    /// An OSD's reweight: 0 is out.
    Weight(OsdId),
    PrimaryAffinity(OsdId),
    /// The pool's size (3 to 2 and back; its min_size stays).
    PoolSize,
}

impl Setting {
    fn default_value(self, config_pool_size: u8) -> u32 {
        match self {
            Setting::Weight(_) => WEIGHT_IN,
            Setting::PrimaryAffinity(_) => OsdInfo::PRIMARY_AFFINITY_DEFAULT,
            Setting::PoolSize => u32::from(config_pool_size),
        }
    }

    fn in_map(self, map: &OsdMap, pool: PoolId) -> Option<u32> {
        Some(match self {
            Setting::Weight(osd) => map.osd(osd)?.weight,
            Setting::PrimaryAffinity(osd) => map.osd(osd)?.primary_affinity,
            Setting::PoolSize => u32::from(map.pools.get(&pool)?.size),
        })
    }

    fn command(self, value: u32, pool_name: &str) -> Command {
        match (self, value) {
            (Setting::Weight(osd), 0) => Command::OsdOut(osd),
            (Setting::Weight(osd), WEIGHT_IN) => Command::OsdIn(osd),
            (Setting::Weight(osd), weight) => Command::OsdReweight(osd, weight),
            (Setting::PrimaryAffinity(osd), affinity) => Command::OsdPrimaryAffinity(osd, affinity),
            (Setting::PoolSize, size) => Command::PoolSet {
                name: pool_name.to_string(),
                key: "size".into(),
                value: size.to_string(),
            },
        }
    }

    /// The value in words (a 16.16 weight or affinity, or a size).
    fn words(self, value: u32) -> String {
        match self {
            Setting::PoolSize => value.to_string(),
            _ => format!("{:.2}", f64::from(value) / f64::from(WEIGHT_IN)),
        }
    }
}

#[derive(Debug)]
pub struct RemapState {
    rng: Rng,
    /// The settings the operator wants that differ from the defaults.
    wanted: BTreeMap<Setting, u32>,
    /// When the command for each setting last went out.
    sent: BTreeMap<Setting, Nanos>,
    next_tid: u64,
    pub changes: u64,
}

impl RemapState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x5245_4d41), // "REMA"
            wanted: BTreeMap::new(),
            sent: BTreeMap::new(),
            next_tid: TID_BASE,
            changes: 0,
        }
    }
}

impl Sim {
    /// At the start of the workload: schedule the first change.
    pub(crate) fn start_remaps(&mut self) {
        if self.config.faults.remaps {
            let first = self.remaps.rng.exponential(CHANGE_INTERVAL_MEAN);
            self.schedule(first, Event::Remap);
        }
    }

    /// One change: an OSD out, reweighted, or less wanted as a primary, or a size-3
    /// pool down to two copies, for a while.
    pub(crate) fn remap(&mut self) {
        if self.phase != Phase::Faults {
            return;
        }
        let next = self.remaps.rng.exponential(CHANGE_INTERVAL_MEAN);
        self.schedule(next, Event::Remap);
        let osds: Vec<OsdId> = self.osds.keys().copied().collect();
        let osd = osds[self.remaps.rng.index(osds.len())];
        let retiring = self.decommissioned() == Some(osd);
        let rng = &mut self.remaps.rng;
        let (setting, value) = match rng.below(6) {
            0 | 1 => (Setting::Weight(osd), 0),
            2 | 3 => {
                let weight = rng.between(u64::from(WEIGHT_IN / 4), u64::from(WEIGHT_IN * 9 / 10));
                (Setting::Weight(osd), weight as u32)
            }
            4 => (
                Setting::PrimaryAffinity(osd),
                [0, WEIGHT_IN / 2][rng.index(2)],
            ),
            _ => (Setting::PoolSize, 2),
        };
        let lasts = rng.between(SECOND / 2, 6 * SECOND);
        let pool_of_two = setting == Setting::PoolSize && self.config.pool_size < 3;
        let of_retiring = retiring && setting != Setting::PoolSize;
        if pool_of_two || of_retiring || self.remaps.wanted.contains_key(&setting) {
            return;
        }
        self.remaps.wanted.insert(setting, value);
        self.remaps.changes += 1;
        self.schedule(lasts, Event::RemapRestore(setting));
        self.record_side_fault(format!(
            "operator: {setting:?} to {} for {}ms",
            setting.words(value),
            lasts / MILLISECOND
        ));
        self.send_remaps_now();
    }

    /// The operator sets `setting` back to its default.
    pub(crate) fn remap_restore(&mut self, setting: Setting) {
        if self.remaps.wanted.remove(&setting).is_none() {
            return;
        }
        self.record_side_fault(format!("operator: {setting:?} back to default"));
        self.send_remaps_now();
    }

    /// The faults end: every setting goes back to its default.
    pub(crate) fn restore_all_remaps(&mut self) {
        let wanted: Vec<Setting> = self.remaps.wanted.keys().copied().collect();
        for setting in wanted {
            self.remap_restore(setting);
        }
    }

    /// Sends what differs at once, on the first client with a monitor session.
    fn send_remaps_now(&mut self) {
        let client =
            (0..self.config.client_count).find(|&c| self.clients[c as usize].mon_session.is_some());
        if let Some(client) = client {
            self.remaps.sent.clear();
            self.send_remaps(client);
        }
    }

    /// The settings whose value in the newest map differs from what the operator
    /// wants, with that value.
    fn remaps_differing(&self) -> Vec<(Setting, u32)> {
        let map = &self.newest_map;
        let mut settings = vec![Setting::PoolSize];
        // The decommission class's operator owns the weight of the OSD it retires.
        for &osd in self.osds.keys() {
            if self.decommissioned() != Some(osd) {
                settings.extend([Setting::Weight(osd), Setting::PrimaryAffinity(osd)]);
            }
        }
        let pool_size = self.config.pool_size;
        (settings.into_iter())
            .filter_map(|setting| {
                let wanted = (self.remaps.wanted.get(&setting).copied())
                    .unwrap_or(setting.default_value(pool_size));
                let shown = setting.in_map(map, self.pool)?;
                (shown != wanted).then_some((setting, wanted))
            })
            .collect()
    }

    /// Client `index`'s tick: sends, on its monitor session, each setting the newest
    /// map does not show and that was not sent within [`RESEND_AFTER`].
    pub(crate) fn send_remaps(&mut self, index: u32) {
        if !self.config.faults.remaps {
            return;
        }
        let Some(session) = self.clients[index as usize].mon_session else {
            return;
        };
        let now = self.clock.now();
        let pool_name = self.newest_map.pools[&self.pool].name.clone();
        for (setting, value) in self.remaps_differing() {
            let due = (self.remaps.sent.get(&setting)).is_none_or(|&at| now >= at + RESEND_AFTER);
            if !due {
                continue;
            }
            self.remaps.sent.insert(setting, now);
            let tid = self.remaps.next_tid;
            self.remaps.next_tid += 1;
            let command = setting.command(value, &pool_name);
            self.trace.note(now, || {
                format!("client{index} (operator) sends {command:?}")
            });
            let msg = Msg::MonCommand(MonCommand { tid, command });
            self.send_session(session, crate::network::Endpoint::Client(index), msg);
        }
    }

    /// The monitor's answer to an operator command: traced only (the operator watches
    /// the maps instead).
    pub(crate) fn remap_answered(&mut self, index: u32, reply: MonCommandReply) {
        self.trace.note(self.now(), || {
            format!(
                "client{index}: the monitor answers operator command {}: {:?}",
                reply.tid, reply.result
            )
        });
    }

    /// A setting the newest map does not show yet (convergence waits for it).
    pub(crate) fn remap_problem(&self) -> Option<String> {
        if !self.config.faults.remaps {
            return None;
        }
        let (setting, value) = *self.remaps_differing().first()?;
        Some(format!(
            "the map does not show {setting:?} {} yet",
            setting.words(value)
        ))
    }
}
