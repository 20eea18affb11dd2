//! A shard's recovery scheduler: when recovery may start its next push, so that it
//! shares the shard with client IO by cost, in the style of Ceph's mClock (dmClock's
//! reservation, weight and limit tags; `osd_mclock_*`).
//!
//! Client ops run to completion as they arrive (they are never queued here); each is
//! charged its cost as it runs. Recovery pushes are the work the scheduler holds back:
//! a PG pushes only while the shard grants it ([`RecoverySched::grant`]). The cost of an
//! op is its bytes plus a fixed cost per op ([`MclockSettings::op_cost_bytes`]), so a
//! 1 MiB push weighs about as much as sixteen small writes. A push may start when:
//!
//! 1. fewer than `recovery_max_active` pushes are in flight over the shard's PGs (the
//!    count cap, Ceph's `osd_recovery_max_active`; it bounds every background push,
//!    whichever rule below let it start), and either
//! 2. the **reservation** tag is due: recovery always gets `reservation_bytes_per_s`, even
//!    under full client load and even while the limit tag is ahead (the floor that keeps
//!    it progressing; as in dmClock it is checked before the limit, and it is never
//!    above the limit), or the **limit** tag is not ahead of now (recovery never runs
//!    above `limit_bytes_per_s`: each push moves the tag by its cost over the limit)
//!    and one of
//! 3. the client class is idle: it sent no op for [`CLIENT_BUSY_WINDOW`], or spent less
//!    than `client_idle_below_bytes_per_s` lately (as Ceph's mClock serves the
//!    background class whenever the client queue is empty), so recovery may run up to
//!    the limit;
//! 4. the **proportional** tags say recovery is behind its weighted share: recovery's
//!    tag advances by cost / `recovery_weight`, the client's by cost / `client_weight`,
//!    and recovery goes while its tag is not ahead of the client's. Recovery's tag is
//!    kept within [`PROPORTIONAL_CREDIT_BYTES`] (over its weight) of the client's on
//!    either side before each push is added, so it neither banks credit while clients
//!    run alone nor carries a debt from running alone; the client class banks none
//!    while it was idle (dmClock's adjustment of an idle client's tag when it comes
//!    back).
//!
//! Each grant lets a PG start at most one background push (the tags are asked again
//! once its cost is charged); a push completing does not by itself let the next one
//! start. Nothing banks a burst: the reservation and limit tags restart from now
//! after an idle spell, the limit tag never runs more than a minute ahead, one charge
//! moves a tag by at most a minute's worth, and the proportional tags are kept small.
//!
//! All of it is pure arithmetic on the driver's clock. A shard that is given no clock
//! (the test harnesses that do not model time) keeps only the count cap.
//!
//! ```text
//!   recovery bytes/s
//!   limit       ─────────────  client idle: up to here
//!   weight share  ·  ·  ·  ·   client busy: cost share recovery_weight : client_weight
//!   reservation ─────────────  always at least this
//! ```

use crate::pg::Pg;
use carmine_clustermap::settings::{
    SettingsReader, OSD_MCLOCK_CLIENT_IDLE_BELOW, OSD_MCLOCK_CLIENT_WGT, OSD_MCLOCK_COST_PER_IO,
    OSD_MCLOCK_RECOVERY_LIM, OSD_MCLOCK_RECOVERY_RES, OSD_MCLOCK_RECOVERY_WGT,
};
use carmine_types::PgId;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// The most a class may fall behind the other in proportional tags, in bytes of its own
/// cost: what it may catch up in a burst after running less than its share.
pub const PROPORTIONAL_CREDIT_BYTES: u64 = 2 << 20;

/// How far ahead of now the client's busy tag may run (the memory of the estimate of
/// whether the client class is idle), and how long after its last op the client class
/// is idle whatever the settings.
pub const CLIENT_BUSY_WINDOW: Duration = Duration::from_millis(200);
/// The client class counts as busy while its busy tag is this far ahead of now: it
/// spent more than `client_idle_below_bytes_per_s` for a while, not in one burst.
pub const CLIENT_BUSY_THRESHOLD: Duration = Duration::from_millis(50);
const _: () = assert!(CLIENT_BUSY_THRESHOLD.as_nanos() < CLIENT_BUSY_WINDOW.as_nanos());

/// The scheduler's settings (`OsdTuning::mclock`; the map's `osd_mclock_*` config keys
/// override them). Rates are of cost: bytes plus `op_cost_bytes` per op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MclockSettings {
    /// Recovery's floor (`osd_mclock_recovery_res`); 0: none.
    pub reservation_bytes_per_s: u64,
    /// Recovery's ceiling (`osd_mclock_recovery_lim`); 0: none.
    pub limit_bytes_per_s: u64,
    /// Shares between floor and ceiling while clients are busy
    /// (`osd_mclock_client_wgt`, `osd_mclock_recovery_wgt`).
    pub client_weight: u32,
    pub recovery_weight: u32,
    /// Clients spending less than this count as idle (`osd_mclock_client_idle_below`);
    /// 0: clients count as busy until they have sent no op for `CLIENT_BUSY_WINDOW`.
    pub client_idle_below_bytes_per_s: u64,
    /// The fixed cost of one op or one pushed object (`osd_mclock_cost_per_io`).
    pub op_cost_bytes: u64,
}

/// Default recovery reservation per shard: 8 MiB/s.
pub const RECOVERY_RESERVATION_BYTES_PER_S: u64 = 8 << 20;
/// Default recovery limit per shard: 64 MiB/s.
pub const RECOVERY_LIMIT_BYTES_PER_S: u64 = 64 << 20;
/// Default weights: recovery gets an eighth of what clients get while both are busy
/// (a client op is charged once, at its primary, though its replicas work too).
pub const CLIENT_WEIGHT: u32 = 8;
pub const RECOVERY_WEIGHT: u32 = 1;
/// Default rate under which the client class counts as idle: 16 MiB/s (about 250
/// small ops a second with the default op cost).
pub const CLIENT_IDLE_BELOW_BYTES_PER_S: u64 = 16 << 20;
/// Default fixed cost per op: 64 KiB (Ceph derives about 57 KiB for an SSD from
/// `osd_mclock_max_sequential_bandwidth_ssd` over `osd_mclock_max_capacity_iops_ssd`).
pub const OP_COST_BYTES: u64 = 64 << 10;
/// The largest weight accepted.
pub const WEIGHT_MAX: u32 = 1_000;

impl Default for MclockSettings {
    fn default() -> Self {
        Self {
            reservation_bytes_per_s: RECOVERY_RESERVATION_BYTES_PER_S,
            limit_bytes_per_s: RECOVERY_LIMIT_BYTES_PER_S,
            client_weight: CLIENT_WEIGHT,
            recovery_weight: RECOVERY_WEIGHT,
            client_idle_below_bytes_per_s: CLIENT_IDLE_BELOW_BYTES_PER_S,
            op_cost_bytes: OP_COST_BYTES,
        }
    }
}

impl MclockSettings {
    /// No reservation, no limit, and clients always idle: only the count cap holds
    /// recovery back (test harnesses whose time stands still).
    pub const UNTHROTTLED: MclockSettings = MclockSettings {
        reservation_bytes_per_s: 0,
        limit_bytes_per_s: 0,
        client_weight: 1,
        recovery_weight: 1,
        client_idle_below_bytes_per_s: u64::MAX,
        op_cost_bytes: 0,
    };

    /// Weights within 1..=`WEIGHT_MAX`, and a reservation no higher than the limit.
    pub fn sanitized(self) -> Self {
        let limit = self.limit_bytes_per_s;
        Self {
            reservation_bytes_per_s: match limit {
                0 => self.reservation_bytes_per_s,
                _ => self.reservation_bytes_per_s.min(limit),
            },
            client_weight: self.client_weight.clamp(1, WEIGHT_MAX),
            recovery_weight: self.recovery_weight.clamp(1, WEIGHT_MAX),
            ..self
        }
    }

    /// The cost of `ops` ops (or pushed objects) moving `bytes` bytes.
    pub fn cost(&self, ops: u64, bytes: u64) -> u64 {
        ops.saturating_mul(self.op_cost_bytes).saturating_add(bytes)
    }
}

/// Which rule let a push start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Reservation,
    ClientIdle,
    Weight,
}

/// dmClock's tags for the two classes of one shard.
#[derive(Debug, Clone)]
pub struct MclockTags {
    settings: MclockSettings,
    /// Recovery may push under its reservation from this time (`None`: at once).
    reservation: Option<Instant>,
    /// Recovery may push at all from this time.
    limit: Option<Instant>,
    /// Proportional tags, in bytes of cost over weight.
    recovery_share: f64,
    client_share: f64,
    /// Where the client's spending at the idle rate would have caught up.
    client_busy: Option<Instant>,
    /// The last client op.
    client_last: Option<Instant>,
}

/// The most one charge moves a tag: a cost that would take longer at its rate (a
/// read of a huge length) counts as this much. It is also the furthest the limit tag
/// may run ahead of now, so pushes charged outside the tags (those clients wait on)
/// leave a debt of at most this much, not one that grows for as long as they come.
const TAG_STEP_MAX: Duration = Duration::from_secs(60);

/// The most cost one charge adds to a proportional tag (1 TiB): a read of a huge
/// length counts as this much, so one op cannot push the tags out of `f64`'s exact
/// range.
const CHARGE_COST_MAX: u64 = 1 << 40;

/// `tag` (or `now`, if later) moved on by `cost` at `bytes_per_s`.
fn after(tag: Option<Instant>, now: Instant, cost: u64, bytes_per_s: u64) -> Option<Instant> {
    assert!(bytes_per_s > 0);
    let start = tag.map_or(now, |tag| tag.max(now));
    let seconds = cost as f64 / bytes_per_s as f64;
    let step = Duration::try_from_secs_f64(seconds).map_or(TAG_STEP_MAX, |d| d.min(TAG_STEP_MAX));
    Some(start + step)
}

impl MclockTags {
    pub fn new(settings: MclockSettings) -> Self {
        Self {
            settings: settings.sanitized(),
            reservation: None,
            limit: None,
            recovery_share: 0.0,
            client_share: 0.0,
            client_busy: None,
            client_last: None,
        }
    }

    pub fn settings(&self) -> MclockSettings {
        self.settings
    }

    /// New settings; the tags keep their times.
    pub fn set_settings(&mut self, settings: MclockSettings) {
        self.settings = settings.sanitized();
    }

    /// A client op of `cost` ran at `now`.
    pub fn charge_client(&mut self, now: Instant, cost: u64) {
        let settings = self.settings;
        let returning = self
            .client_last
            .is_none_or(|last| last + CLIENT_BUSY_WINDOW <= now);
        if returning {
            // dmClock's adjustment, for a client class back from idle only: a busy one
            // that is behind is behind because recovery took its reservation.
            let credit = PROPORTIONAL_CREDIT_BYTES as f64 / f64::from(settings.client_weight);
            self.client_share = self.client_share.max(self.recovery_share - credit);
        }
        self.client_share += cost.min(CHARGE_COST_MAX) as f64 / f64::from(settings.client_weight);
        self.normalize_shares();
        self.client_last = Some(now);
        if settings.client_idle_below_bytes_per_s > 0 {
            let busy = after(
                self.client_busy,
                now,
                cost,
                settings.client_idle_below_bytes_per_s,
            );
            self.client_busy = busy.map(|busy| busy.min(now + CLIENT_BUSY_WINDOW));
        }
    }

    /// Recovery sent pushes of `cost` at `now`.
    pub fn charge_recovery(&mut self, now: Instant, cost: u64) {
        let settings = self.settings;
        let weight = f64::from(settings.recovery_weight);
        let credit = PROPORTIONAL_CREDIT_BYTES as f64 / weight;
        // Recovery neither banks credit while clients run alone, nor carries a lead
        // of more than the same amount into its next contest with them: a lead built
        // while clients were idle or light (recovery alone, up to its limit) or
        // through its reservation is no debt to repay once clients are busy. Without
        // the upper bound a long light spell starved the weight phase for as long.
        let client = self.client_share;
        self.recovery_share = self.recovery_share.clamp(client - credit, client + credit)
            + cost.min(CHARGE_COST_MAX) as f64 / weight;
        self.normalize_shares();
        if settings.reservation_bytes_per_s > 0 && self.reservation.is_none_or(|r| r <= now) {
            // The reservation was due, so this push meets it, whatever let it start.
            self.reservation = after(None, now, cost, settings.reservation_bytes_per_s);
        }
        if settings.limit_bytes_per_s > 0 {
            let limit = after(self.limit, now, cost, settings.limit_bytes_per_s);
            self.limit = limit.map(|limit| limit.min(now + TAG_STEP_MAX));
        }
    }

    /// Moves both proportional tags down by the smaller: only their difference
    /// matters, and this keeps them small however long the shard runs.
    fn normalize_shares(&mut self) {
        let floor = self.recovery_share.min(self.client_share);
        self.recovery_share -= floor;
        self.client_share -= floor;
    }

    /// Whether the client class is idle: no op for [`CLIENT_BUSY_WINDOW`], or
    /// spending under the idle rate.
    fn client_idle(&self, now: Instant) -> bool {
        let quiet = self
            .client_last
            .is_none_or(|last| last + CLIENT_BUSY_WINDOW <= now);
        let light = self.settings.client_idle_below_bytes_per_s > 0
            && self
                .client_busy
                .is_none_or(|busy| busy <= now + CLIENT_BUSY_THRESHOLD);
        quiet || light
    }

    /// When the client class will be idle if no client op comes.
    fn client_idle_at(&self, now: Instant) -> Instant {
        let quiet = self
            .client_last
            .map_or(now, |last| last + CLIENT_BUSY_WINDOW);
        if self.settings.client_idle_below_bytes_per_s == 0 {
            return quiet.max(now);
        }
        let light = self
            .client_busy
            .and_then(|busy| busy.checked_sub(CLIENT_BUSY_THRESHOLD))
            .unwrap_or(now);
        quiet.min(light).max(now)
    }

    /// Whether recovery may start a push at `now`, and by which rule. The reservation
    /// comes before the limit, as in dmClock: pushes clients waited on are charged
    /// without asking, and may put the limit tag far ahead; the floor must hold even
    /// then (it is never above the limit, so it alone cannot exceed it).
    pub fn may_push(&self, now: Instant) -> Option<Phase> {
        let reserved = self.settings.reservation_bytes_per_s > 0;
        if reserved && self.reservation.is_none_or(|r| r <= now) {
            return Some(Phase::Reservation);
        }
        if self.limit.is_some_and(|limit| limit > now) {
            return None;
        }
        if self.client_idle(now) {
            return Some(Phase::ClientIdle);
        }
        if self.recovery_share <= self.client_share {
            return Some(Phase::Weight);
        }
        None
    }

    /// When the passing of time alone lets recovery push again, from `now` on (`now`
    /// itself if it may push now). Client ops may let it earlier (the weight phase).
    pub fn next_eligible(&self, now: Instant) -> Instant {
        let not_before = self.limit.map_or(now, |limit| limit.max(now));
        let unreserved = match self.recovery_share <= self.client_share {
            true => now,
            false => self.client_idle_at(now),
        };
        let mut due = unreserved.max(not_before);
        if self.settings.reservation_bytes_per_s > 0 {
            due = due.min(self.reservation.map_or(now, |r| r.max(now)));
        }
        due
    }
}

/// The settings in force: `default` (the tuning's) with the map's `osd_mclock_*`
/// config keys over it.
pub(crate) fn read_settings(
    reader: &mut SettingsReader,
    config: &BTreeMap<String, String>,
    default: MclockSettings,
) -> MclockSettings {
    MclockSettings {
        reservation_bytes_per_s: reader.bytes(
            config,
            OSD_MCLOCK_RECOVERY_RES,
            default.reservation_bytes_per_s,
        ),
        limit_bytes_per_s: reader.bytes(config, OSD_MCLOCK_RECOVERY_LIM, default.limit_bytes_per_s),
        client_weight: reader.count(config, OSD_MCLOCK_CLIENT_WGT, default.client_weight),
        recovery_weight: reader.count(config, OSD_MCLOCK_RECOVERY_WGT, default.recovery_weight),
        client_idle_below_bytes_per_s: reader.bytes(
            config,
            OSD_MCLOCK_CLIENT_IDLE_BELOW,
            default.client_idle_below_bytes_per_s,
        ),
        op_cost_bytes: reader.bytes(config, OSD_MCLOCK_COST_PER_IO, default.op_cost_bytes),
    }
    .sanitized()
}

/// The shard's side: pushes in flight, the tags, and the PGs waiting for a grant. The
/// shard wraps every call into a PG with [`RecoverySched::grant`] and
/// [`RecoverySched::settle`] (the PG is already in hand, so this costs no lookup); PGs
/// that stop short of work for lack of a grant are resumed in turn when pushes
/// complete, when client ops move the tags, and from the shard's tick and wakeup
/// ([`RecoverySched::wakeup`]).
#[derive(Debug)]
pub(crate) struct RecoverySched {
    /// Pushes in flight over all PGs of the shard.
    in_flight: usize,
    /// PGs held back, in the order they were.
    starved: VecDeque<PgId>,
    /// A PG has news for the monitor (a pg_temp request): report before the period.
    report_urgent: bool,
    tags: MclockTags,
}

impl Default for RecoverySched {
    fn default() -> Self {
        Self {
            in_flight: 0,
            starved: VecDeque::new(),
            report_urgent: false,
            tags: MclockTags::new(MclockSettings::default()),
        }
    }
}

impl RecoverySched {
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn settings(&self) -> MclockSettings {
        self.tags.settings()
    }

    pub(crate) fn set_settings(&mut self, settings: MclockSettings) {
        self.tags.set_settings(settings);
    }

    pub(crate) fn take_report_urgent(&mut self) -> bool {
        std::mem::take(&mut self.report_urgent)
    }

    /// Room under the count cap: how many more pushes may be in flight over the shard.
    fn count_room(&self, limit: usize) -> usize {
        limit.saturating_sub(self.in_flight)
    }

    /// How many background pushes may start before the tags are asked again: with a
    /// clock at most one (its cost moves the tags before another is granted), without
    /// one as many as the count cap allows.
    fn rate_room(&self, now: Option<Instant>) -> usize {
        match now {
            None => usize::MAX,
            Some(now) if self.tags.may_push(now).is_some() => 1,
            Some(_) => 0,
        }
    }

    /// Before calling into `pg`: lets it start the pushes the scheduler allows now;
    /// returns its pushes in flight, for [`Self::settle`].
    pub(crate) fn grant(&self, limit: usize, now: Option<Instant>, pg: &mut Pg) -> usize {
        let before = pg.pushes_in_flight();
        pg.set_push_allowance(before + self.count_room(limit), self.rate_room(now));
        before
    }

    /// After calling into `pg`: accounts its pushes, charges what it sent, and collects
    /// its requests.
    pub(crate) fn settle(&mut self, now: Option<Instant>, pg: &mut Pg, before: usize) {
        self.in_flight = (self.in_flight + pg.pushes_in_flight()).saturating_sub(before);
        // What was granted is spent or lapses: a later call into the PG that is not
        // wrapped in a grant must not start pushes the tags never allowed.
        pg.set_push_allowance(pg.pushes_in_flight(), 0);
        let (objects, bytes) = pg.take_recovery_sent();
        if let Some(now) = now.filter(|_| objects > 0) {
            let cost = self.tags.settings().cost(objects, bytes);
            self.tags.charge_recovery(now, cost);
        }
        let pgid = pg.pgid();
        if pg.take_recovery_starved() && !self.starved.contains(&pgid) {
            self.starved.push_back(pgid);
        }
        if pg.take_report_urgent() {
            self.report_urgent = true;
        }
    }

    /// A client op of `ops` ops moving `bytes` bytes ran.
    pub(crate) fn charge_client(&mut self, now: Instant, ops: u64, bytes: u64) {
        let cost = self.tags.settings().cost(ops, bytes);
        self.tags.charge_client(now, cost);
    }

    /// `pg` is gone (its pool was deleted): its pushes no longer count.
    pub(crate) fn forget(&mut self, pg: &Pg) {
        self.in_flight = self.in_flight.saturating_sub(pg.pushes_in_flight());
        let pgid = pg.pgid();
        self.starved.retain(|&starved| starved != pgid);
    }

    pub(crate) fn has_starved(&self) -> bool {
        !self.starved.is_empty()
    }

    /// The next PG to resume, while the scheduler allows a push (each resumed PG is
    /// settled before the next is asked for).
    pub(crate) fn next_starved(&mut self, limit: usize, now: Option<Instant>) -> Option<PgId> {
        if self.count_room(limit) == 0 || self.rate_room(now) == 0 {
            return None;
        }
        self.starved.pop_front()
    }

    pub(crate) fn starved_count(&self) -> usize {
        self.starved.len()
    }

    /// When the driver should resume held-back PGs if nothing else happens first:
    /// `None` when none waits on the tags (none waits, or the count cap holds them,
    /// and completions resume them).
    pub(crate) fn wakeup(&self, limit: usize, now: Instant) -> Option<Instant> {
        if self.starved.is_empty() || self.in_flight >= limit {
            return None;
        }
        Some(self.tags.next_eligible(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn settings() -> MclockSettings {
        MclockSettings {
            reservation_bytes_per_s: 4 * MIB,
            limit_bytes_per_s: 32 * MIB,
            client_weight: 4,
            recovery_weight: 1,
            client_idle_below_bytes_per_s: 8 * MIB,
            op_cost_bytes: 64 << 10,
        }
    }

    /// Runs `seconds` of a shard: clients send an op of `client_cost` every
    /// `client_every` (none with `None`), and recovery pushes `push_cost` whenever the
    /// tags let it, checked every millisecond and at every client op. Returns the
    /// recovery bytes of cost per second, and the pushes by phase.
    fn run(
        settings: MclockSettings,
        seconds: u64,
        client_every: Option<Duration>,
        client_cost: u64,
        push_cost: u64,
    ) -> (f64, [u64; 3]) {
        let mut tags = MclockTags::new(settings);
        let start = Instant::now();
        let end = start + Duration::from_secs(seconds);
        let step = Duration::from_millis(1);
        let mut now = start;
        let mut next_client = start;
        let mut recovered = 0u64;
        let mut phases = [0u64; 3];
        let mut window: VecDeque<(Instant, u64)> = VecDeque::new();
        while now < end {
            if let Some(every) = client_every {
                while next_client <= now {
                    tags.charge_client(next_client, client_cost);
                    next_client += every;
                }
            }
            while let Some(phase) = tags.may_push(now) {
                tags.charge_recovery(now, push_cost);
                recovered += push_cost;
                phases[phase as usize] += 1;
                // The limit holds over every second (one push of slack: cost is paid
                // after the push).
                window.push_back((now, push_cost));
                while window
                    .front()
                    .is_some_and(|(t, _)| *t + Duration::from_secs(1) <= now)
                {
                    window.pop_front();
                }
                let in_window: u64 = window.iter().map(|(_, c)| c).sum();
                let limit = settings.limit_bytes_per_s;
                if limit > 0 {
                    assert!(in_window <= limit + push_cost, "{in_window} in a second");
                }
            }
            let wake = tags.next_eligible(now);
            assert!(wake >= now);
            now += step;
        }
        (recovered as f64 / seconds as f64, phases)
    }

    const PUSH: u64 = MIB + (64 << 10);

    #[test]
    fn the_reservation_is_met_under_full_client_load() {
        // Clients spend far more than recovery's share could reach (weight 1 against
        // 1000): only the reservation lets recovery through.
        let settings = MclockSettings {
            client_weight: WEIGHT_MAX,
            ..settings()
        };
        let (rate, phases) = run(
            settings,
            10,
            Some(Duration::from_micros(50)),
            68 << 10,
            PUSH,
        );
        let reservation = settings.reservation_bytes_per_s as f64;
        assert!(rate >= reservation * 0.95, "{rate} bytes/s");
        assert!(rate <= reservation * 1.2, "{rate} bytes/s");
        assert!(phases[Phase::Reservation as usize] > 0);
        assert_eq!(phases[Phase::ClientIdle as usize], 0);
    }

    #[test]
    fn the_limit_is_never_exceeded_with_idle_clients() {
        let (rate, phases) = run(settings(), 10, None, 0, PUSH);
        let limit = settings().limit_bytes_per_s as f64;
        assert!(rate <= limit * 1.01, "{rate} bytes/s");
        assert!(
            rate >= limit * 0.95,
            "idle clients let recovery reach its limit: {rate}"
        );
        assert!(phases[Phase::ClientIdle as usize] > 0);
    }

    #[test]
    fn a_light_client_leaves_recovery_at_its_limit() {
        // 100 small ops a second (6.8 MiB/s of cost): under the idle rate.
        let (rate, _) = run(
            settings(),
            10,
            Some(Duration::from_millis(10)),
            68 << 10,
            PUSH,
        );
        let limit = settings().limit_bytes_per_s as f64;
        assert!(rate >= limit * 0.95, "{rate} bytes/s");
        assert!(rate <= limit * 1.01, "{rate} bytes/s");
    }

    #[test]
    fn busy_clients_and_recovery_share_by_weight() {
        // Clients spend 68 KiB every 0.5 ms: 130 MiB/s of cost. With weights 4:1
        // recovery gets a quarter of that (33 MiB/s) but the limit (32) caps it; with
        // a limit of 256 MiB/s it gets its quarter.
        let wide = MclockSettings {
            limit_bytes_per_s: 256 * MIB,
            ..settings()
        };
        let client_rate = (68u64 << 10) as f64 * 2000.0;
        let (rate, phases) = run(wide, 10, Some(Duration::from_micros(500)), 68 << 10, PUSH);
        let share = client_rate / 4.0;
        assert!(rate >= share * 0.95, "{rate} bytes/s against {share}");
        assert!(
            rate <= share * 1.05 + 4.0 * MIB as f64,
            "{rate} against {share}"
        );
        assert!(phases[Phase::Weight as usize] > phases[Phase::Reservation as usize]);

        let (capped, _) = run(
            settings(),
            10,
            Some(Duration::from_micros(500)),
            68 << 10,
            PUSH,
        );
        assert!(capped <= 32.0 * MIB as f64 * 1.01, "{capped}");
    }

    #[test]
    fn weights_change_the_share() {
        let wide = MclockSettings {
            limit_bytes_per_s: 1 << 30,
            reservation_bytes_per_s: 0,
            ..settings()
        };
        let every = Some(Duration::from_micros(500));
        let (quarter, _) = run(wide, 5, every, 68 << 10, PUSH);
        let even = MclockSettings {
            client_weight: 1,
            ..wide
        };
        let (half, _) = run(even, 5, every, 68 << 10, PUSH);
        let ratio = half / quarter;
        assert!((3.5..4.5).contains(&ratio), "{half} against {quarter}");
    }

    #[test]
    fn a_held_back_push_is_due_at_the_wakeup() {
        let mut tags = MclockTags::new(MclockSettings {
            client_idle_below_bytes_per_s: 0,
            client_weight: WEIGHT_MAX,
            ..settings()
        });
        let start = Instant::now();
        tags.charge_client(start, 100 * MIB);
        assert_eq!(tags.may_push(start), Some(Phase::Reservation));
        tags.charge_recovery(start, 4 * MIB);
        assert_eq!(tags.may_push(start), None);
        // With no more client ops, the clients are idle after the busy window.
        assert_eq!(tags.next_eligible(start), start + CLIENT_BUSY_WINDOW);
        // Clients keep sending: the reservation is next due, 4 MiB at 4 MiB/s later.
        let mut now = start;
        for _ in 0..9 {
            now += Duration::from_millis(100);
            tags.charge_client(now, 100 * MIB);
            assert_eq!(tags.may_push(now), None, "{:?}", now - start);
            assert!(tags.next_eligible(now) <= start + Duration::from_secs(1));
        }
        let wake = tags.next_eligible(now);
        assert_eq!(wake, start + Duration::from_secs(1));
        assert_eq!(tags.may_push(wake), Some(Phase::Reservation));
    }

    #[test]
    fn an_idle_class_banks_little_credit() {
        let mut tags = MclockTags::new(MclockSettings {
            reservation_bytes_per_s: 0,
            limit_bytes_per_s: 0,
            client_idle_below_bytes_per_s: 0,
            ..settings()
        });
        let now = Instant::now();
        // Clients ran alone for a long time: recovery may catch up only its credit.
        for _ in 0..1_000 {
            tags.charge_client(now, MIB);
        }
        let mut pushes = 0;
        while tags.may_push(now).is_some() {
            tags.charge_recovery(now, MIB);
            pushes += 1;
        }
        assert_eq!(
            pushes, 3,
            "2 MiB of credit, and the push that spends the last of it"
        );
        // And after recovery ran alone, clients back from idle hold it off only until
        // they have spent their credit.
        for _ in 0..1_000 {
            tags.charge_recovery(now, MIB);
        }
        let later = now + CLIENT_BUSY_WINDOW;
        tags.charge_client(later, 4 * MIB);
        assert!(tags.may_push(later).is_some());
    }

    #[test]
    fn recovery_that_ran_beside_a_light_client_gets_its_share_once_clients_are_busy() {
        // A minute of a light client (6.8 MiB/s of cost, under the idle rate) while
        // recovery runs at its limit: recovery's proportional tag runs far ahead of
        // the client's. When clients turn busy it must still get its weight share (no
        // reservation here to fall back on), not wait for clients to catch up.
        let settings = MclockSettings {
            reservation_bytes_per_s: 0,
            limit_bytes_per_s: 256 * MIB,
            ..settings()
        };
        let mut tags = MclockTags::new(settings);
        let start = Instant::now();
        let mut now = start;
        let light_end = start + Duration::from_secs(60);
        let mut next_client = start;
        while now < light_end {
            while next_client <= now {
                tags.charge_client(next_client, 68 << 10);
                next_client += Duration::from_millis(10);
            }
            while tags.may_push(now).is_some() {
                tags.charge_recovery(now, PUSH);
            }
            now += Duration::from_millis(1);
        }
        // Then 2 s of clients at 130 MiB/s of cost: weights 4:1 give recovery a quarter.
        let busy_end = now + Duration::from_secs(2);
        let mut recovered = 0u64;
        while now < busy_end {
            while next_client <= now {
                tags.charge_client(next_client, 68 << 10);
                next_client += Duration::from_micros(500);
            }
            while tags.may_push(now).is_some() {
                tags.charge_recovery(now, PUSH);
                recovered += PUSH;
            }
            now += Duration::from_millis(1);
        }
        let rate = recovered as f64 / 2.0;
        let share = (68u64 << 10) as f64 * 2000.0 / 4.0;
        assert!(
            rate >= share * 0.8,
            "{rate} bytes/s against a share of {share}"
        );
    }

    #[test]
    fn the_reservation_holds_after_recovery_went_over_its_limit() {
        // Pushes that clients wait on go outside the tags but are charged: a burst of
        // them puts the limit tag far ahead. Under full client load the reservation
        // must still let background pushes through at its rate.
        let settings = MclockSettings {
            client_weight: WEIGHT_MAX,
            client_idle_below_bytes_per_s: 0,
            ..settings()
        };
        let mut tags = MclockTags::new(settings);
        let start = Instant::now();
        tags.charge_client(start, 68 << 10);
        // 30 s worth of the limit at once.
        for _ in 0..960 {
            tags.charge_recovery(start, MIB);
        }
        let mut now = start;
        let mut pushes = 0u64;
        while now < start + Duration::from_secs(10) {
            tags.charge_client(now, 68 << 10);
            while tags.may_push(now).is_some() {
                tags.charge_recovery(now, PUSH);
                pushes += 1;
            }
            assert!(tags.next_eligible(now) >= now);
            now += Duration::from_millis(1);
        }
        // 4 MiB/s of 1.06 MiB pushes for 10 s, less the first reservation period
        // that the burst itself met.
        assert!(pushes >= 25, "{pushes} pushes in 10 s");
        assert!(pushes <= 40, "{pushes} pushes in 10 s");
    }

    #[test]
    fn time_going_back_and_huge_gaps_neither_panic_nor_stall() {
        let mut tags = MclockTags::new(settings());
        let start = Instant::now();
        let later = start + Duration::from_secs(3_600);
        tags.charge_client(later, 68 << 10);
        tags.charge_recovery(later, u64::MAX);
        tags.charge_client(later, u64::MAX);
        // A reading earlier than the tags: nothing may start, and the wakeup is not
        // before that reading.
        assert!(tags.next_eligible(start) >= start);
        tags.charge_client(start, 68 << 10);
        tags.charge_recovery(start, PUSH);
        assert!(tags.next_eligible(start) >= start);
        // A huge cost moves a tag a bounded step, so a day later recovery may push.
        let day = later + Duration::from_secs(86_400);
        assert!(tags.may_push(day).is_some());
        assert_eq!(tags.next_eligible(day), day);
        // The proportional tags stay finite and near each other.
        assert!(tags.recovery_share.is_finite() && tags.client_share.is_finite());
        for _ in 0..100_000 {
            tags.charge_client(day, u64::MAX);
            tags.charge_recovery(day, u64::MAX);
        }
        assert!(tags.recovery_share.is_finite() && tags.client_share.is_finite());
        assert!(tags.recovery_share.abs() < 1e15, "{}", tags.recovery_share);
        assert!(tags.client_share.abs() < 1e15, "{}", tags.client_share);
    }

    #[test]
    fn a_long_idle_spell_banks_no_burst() {
        let mut tags = MclockTags::new(settings());
        let start = Instant::now();
        tags.charge_client(start, 68 << 10);
        tags.charge_recovery(start, PUSH);
        // An hour with nothing: one push may start (the reservation, due since long
        // ago), and then the limit holds the next for its cost.
        let later = start + Duration::from_secs(3_600);
        let mut pushes = 0;
        while tags.may_push(later).is_some() {
            tags.charge_recovery(later, PUSH);
            pushes += 1;
            assert!(pushes < 100, "a burst");
        }
        assert_eq!(pushes, 1);
        let limit = settings().limit_bytes_per_s;
        let wait = Duration::from_secs_f64(PUSH as f64 / limit as f64);
        assert!(tags.next_eligible(later) >= later + wait - Duration::from_micros(1));
    }

    #[test]
    fn settings_are_sanitized() {
        let odd = MclockSettings {
            reservation_bytes_per_s: 100 * MIB,
            limit_bytes_per_s: 10 * MIB,
            client_weight: 0,
            recovery_weight: 1_000_000,
            ..settings()
        }
        .sanitized();
        assert_eq!(odd.reservation_bytes_per_s, 10 * MIB);
        assert_eq!(odd.client_weight, 1);
        assert_eq!(odd.recovery_weight, WEIGHT_MAX);
    }
}
