//! OSD↔OSD heartbeats, as a pure state machine: whom to ping, when, and when to tell
//! the monitor that a peer has gone silent (Ceph's `OSD::heartbeat_check` and
//! `send_failures`).
//!
//! The tracker pings every OSD it shares a PG with (the up and acting sets of every PG
//! it is in) plus the next up OSDs by id, wrapping, until it has `min_peers` (Ceph's
//! `osd_heartbeat_min_peers`), so that even an OSD with no PGs is watched by someone.
//! Pings go out every `interval` and carry a stamp (the driver's `now`, opaque to the
//! peer), which the peer echoes. A peer is *silent* from the send time of the newest
//! ping it answered — or from when the tracker began judging it: when it started, when
//! the peer came up, or when the tracker resumed after a stall — and after `grace` of
//! silence it is reported failed to the monitor, and the report is repeated every
//! `interval` while the silence lasts (so a report lost with a monitor leader is sent
//! again, and the monitor sees it fresh). Once the peer answers a ping sent within the
//! grace, the report is withdrawn (`alive`). Peers that are down in the tracker's map
//! are not pinged, and nothing is reported while this OSD itself is not up.
//!
//! A tracker whose ticks stop (its process was stopped, its thread starved) cannot tell
//! silent peers from its own absence. The driver ticks it at least every interval
//! ([`HeartbeatTracker::poll_timeout`]), so a tick arriving more than one and a half
//! intervals after the previous one restarts every peer's judgement instead of
//! reporting them all.
//!
//! ```
//! use carmine_osd::heartbeat::{HeartbeatAction, HeartbeatConfig, HeartbeatTracker};
//! use carmine_types::OsdId;
//! use std::time::Instant;
//!
//! let now = Instant::now();
//! let mut tracker = HeartbeatTracker::new(OsdId(0), HeartbeatConfig::default(), now);
//! // No map yet: nobody to ping.
//! assert!(tracker.handle_tick(now).is_empty());
//! ```

use carmine_clustermap::settings::{SettingsReader, OSD_HEARTBEAT_GRACE, OSD_HEARTBEAT_INTERVAL};
use carmine_clustermap::OsdMap;
use carmine_proto::{OsdFailure, OsdPing, PingOp};
use carmine_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most peers one OSD pings (a bound on per-tick work and messages).
pub const HEARTBEAT_PEERS_MAX: usize = 1024;

/// Heartbeat timing. The daemon's flags give these; the map's config keys
/// `osd_heartbeat_interval` and `osd_heartbeat_grace` override them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// Between two pings to the same peer (Ceph: 6 s; Carmine's fast default: 1 s).
    pub interval: Duration,
    /// Silence after which a peer is reported (Ceph: 20 s; Carmine: 3 s). At least two
    /// intervals are used, so that one late reply never reports a peer.
    pub grace: Duration,
    /// Peers pinged at least, when there are that many up OSDs (Ceph: 10).
    pub min_peers: usize,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            grace: Duration::from_secs(3),
            min_peers: 10,
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatAction {
    /// Send this ping to shard 0 of the OSD.
    Ping(OsdId, OsdPing),
    /// Send this report (or cancellation) to the monitor.
    Report(OsdFailure),
}

#[derive(Debug, Clone)]
struct Peer {
    /// The `up_from` of the peer when the tracker began judging it: a new one means the
    /// peer restarted and is judged afresh.
    up_from: Epoch,
    /// Silence is counted from no earlier than this.
    judge_from: Instant,
    /// Send time of the newest ping the peer answered.
    last_answered: Option<Instant>,
    /// When the last failure report for it went to the monitor; `Some` while the
    /// tracker holds the peer failed.
    reported_at: Option<Instant>,
}

impl Peer {
    fn silent_for(&self, now: Instant) -> Duration {
        let since = self
            .last_answered
            .map_or(self.judge_from, |at| at.max(self.judge_from));
        now.saturating_duration_since(since)
    }
}

/// One OSD's heartbeat state (lives with the OSD-global work, on shard 0).
#[derive(Debug)]
pub struct HeartbeatTracker {
    whoami: OsdId,
    defaults: HeartbeatConfig,
    config: HeartbeatConfig,
    settings: SettingsReader,
    /// Stamps are nanoseconds since this instant.
    origin: Instant,
    map: Option<Arc<OsdMap>>,
    peers: BTreeMap<OsdId, Peer>,
    next_ping_at: Instant,
    last_tick: Instant,
}

impl HeartbeatTracker {
    pub fn new(whoami: OsdId, defaults: HeartbeatConfig, now: Instant) -> Self {
        let config = sanitize(defaults);
        Self {
            whoami,
            defaults: config,
            config,
            settings: SettingsReader::default(),
            origin: now,
            map: None,
            peers: BTreeMap::new(),
            next_ping_at: now,
            last_tick: now,
        }
    }

    /// The timing in force (the defaults overridden by the map's config keys).
    pub fn config(&self) -> HeartbeatConfig {
        self.config
    }

    /// Config values that did not parse, each once, for the driver to log.
    pub fn take_warnings(&mut self) -> Vec<String> {
        self.settings.take_warnings()
    }

    /// The OSDs pinged now.
    pub fn peers(&self) -> Vec<OsdId> {
        self.peers.keys().copied().collect()
    }

    /// Whether the tracker holds `osd` failed (reported and not withdrawn).
    pub fn is_reported(&self, osd: OsdId) -> bool {
        self.peers
            .get(&osd)
            .is_some_and(|peer| peer.reported_at.is_some())
    }

    /// When [`Self::handle_tick`] next has work: the next ping round.
    pub fn poll_timeout(&self) -> Instant {
        self.next_ping_at
    }

    /// A new map: re-reads the timing, re-chooses the peers, withdraws reports of peers
    /// it no longer watches, and judges restarted peers afresh.
    pub fn handle_map(&mut self, now: Instant, map: Arc<OsdMap>) -> Vec<HeartbeatAction> {
        if self.map.as_ref().is_some_and(|m| m.epoch >= map.epoch) {
            return Vec::new();
        }
        let interval =
            self.settings
                .seconds(&map.config, OSD_HEARTBEAT_INTERVAL, self.defaults.interval);
        let grace = self
            .settings
            .seconds(&map.config, OSD_HEARTBEAT_GRACE, self.defaults.grace);
        self.config = sanitize(HeartbeatConfig {
            interval,
            grace,
            ..self.defaults
        });
        self.next_ping_at = self.next_ping_at.min(now + self.config.interval);
        let wanted = if map.is_up(self.whoami) {
            choose_peers(&map, self.whoami, self.config.min_peers)
        } else {
            BTreeSet::new()
        };
        let mut actions = Vec::new();
        let epoch = map.epoch;
        let whoami = self.whoami;
        self.peers.retain(|&osd, peer| {
            let keep = wanted.contains(&osd);
            // A peer still up that we stop watching must not stay reported by us.
            if !keep && peer.reported_at.is_some() && map.is_up(osd) && map.is_up(whoami) {
                actions.push(HeartbeatAction::Report(cancellation(osd, whoami, epoch)));
            }
            keep
        });
        for &osd in &wanted {
            let up_from = map.osd(osd).map_or(Epoch(0), |info| info.up_from);
            let fresh = Peer {
                up_from,
                judge_from: now,
                last_answered: None,
                reported_at: None,
            };
            let peer = self.peers.entry(osd).or_insert_with(|| fresh.clone());
            if peer.up_from != up_from {
                *peer = fresh;
            }
        }
        self.map = Some(map);
        actions
    }

    /// A reply from `from` to one of our pings.
    pub fn handle_reply(
        &mut self,
        now: Instant,
        from: OsdId,
        reply: &OsdPing,
    ) -> Vec<HeartbeatAction> {
        if reply.op != PingOp::Reply {
            return Vec::new();
        }
        let Some(sent) = self.origin.checked_add(Duration::from_nanos(reply.stamp)) else {
            return Vec::new();
        };
        if sent > now {
            // Not a stamp we handed out.
            return Vec::new();
        }
        let grace = self.config.grace;
        let Some(peer) = self.peers.get_mut(&from) else {
            return Vec::new();
        };
        peer.last_answered = Some(peer.last_answered.map_or(sent, |at| at.max(sent)));
        if peer.reported_at.is_none() || peer.silent_for(now) >= grace {
            return Vec::new();
        }
        peer.reported_at = None;
        match &self.map {
            Some(map) if map.is_up(self.whoami) => {
                let cancel = cancellation(from, self.whoami, map.epoch);
                vec![HeartbeatAction::Report(cancel)]
            }
            _ => Vec::new(),
        }
    }

    /// Sends the pings that are due and reports peers silent past the grace.
    pub fn handle_tick(&mut self, now: Instant) -> Vec<HeartbeatAction> {
        let late = now.saturating_duration_since(self.last_tick);
        self.last_tick = now;
        if late > self.config.interval * 3 / 2 {
            // We were not running: nothing was sent or heard, so silence proves nothing.
            for peer in self.peers.values_mut() {
                peer.judge_from = peer.judge_from.max(now);
            }
        }
        // Advanced even when there is nothing to do, so that a driver sleeping until
        // `poll_timeout` never spins.
        let ping_due = now >= self.next_ping_at;
        if ping_due {
            self.next_ping_at = now + self.config.interval;
        }
        let Some(map) = self.map.clone() else {
            return Vec::new();
        };
        if !map.is_up(self.whoami) {
            return Vec::new();
        }
        let mut actions = Vec::new();
        if ping_due {
            let ping = OsdPing {
                op: PingOp::Ping,
                epoch: map.epoch,
                stamp: stamp(self.origin, now),
            };
            for &osd in self.peers.keys() {
                actions.push(HeartbeatAction::Ping(osd, ping.clone()));
            }
        }
        for (&osd, peer) in &mut self.peers {
            let silent_for = peer.silent_for(now);
            if silent_for < self.config.grace {
                continue;
            }
            let due = match peer.reported_at {
                None => true,
                Some(at) => now.saturating_duration_since(at) >= self.config.interval,
            };
            if !due {
                continue;
            }
            peer.reported_at = Some(now);
            actions.push(HeartbeatAction::Report(OsdFailure {
                target: osd,
                reporter: self.whoami,
                epoch: map.epoch,
                silent_for_ms: u64::try_from(silent_for.as_millis()).unwrap_or(u64::MAX),
                alive: false,
            }));
        }
        actions
    }
}

/// The answer to a ping (`None` for anything else): the stamp echoed, our epoch.
pub fn reply_to(ping: &OsdPing, epoch: Epoch) -> Option<OsdPing> {
    (ping.op == PingOp::Ping).then_some(OsdPing {
        op: PingOp::Reply,
        epoch,
        stamp: ping.stamp,
    })
}

/// The OSDs `whoami` pings under `map`: its PG peers that are up, the next up OSD by
/// id (wrapping), then more in that order up to `min_peers`.
pub fn choose_peers(map: &OsdMap, whoami: OsdId, min_peers: usize) -> BTreeSet<OsdId> {
    let mut peers = BTreeSet::new();
    for pg in map.all_pgs() {
        let Some(mapping) = map.pg_mapping(pg) else {
            continue;
        };
        if mapping.up.contains(&whoami) || mapping.acting.contains(&whoami) {
            peers.extend(mapping.up.iter().chain(&mapping.acting).copied());
        }
    }
    peers.retain(|&osd| osd != whoami && map.is_up(osd));
    let up = map
        .osds
        .values()
        .filter(|info| info.up && info.id != whoami);
    let after = up.clone().filter(|info| info.id > whoami);
    let before = up.filter(|info| info.id < whoami);
    for (index, info) in after.chain(before).enumerate() {
        if index > 0 && peers.len() >= min_peers {
            break;
        }
        peers.insert(info.id);
    }
    while peers.len() > HEARTBEAT_PEERS_MAX {
        peers.pop_last();
    }
    peers
}

fn cancellation(target: OsdId, reporter: OsdId, epoch: Epoch) -> OsdFailure {
    OsdFailure {
        target,
        reporter,
        epoch,
        silent_for_ms: 0,
        alive: true,
    }
}

fn stamp(origin: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
}

/// A zero interval would ping in a busy loop; a grace under two intervals would report
/// a peer whose reply is merely one round late.
fn sanitize(config: HeartbeatConfig) -> HeartbeatConfig {
    let interval = config.interval.max(Duration::from_millis(10));
    HeartbeatConfig {
        interval,
        grace: config.grace.max(interval * 2),
        min_peers: config.min_peers,
    }
}

#[cfg(test)]
mod tests;
