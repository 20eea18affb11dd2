//! The monitors in the simulator: a group of 1, 3 or 5 real [`Monitor`]s driven as
//! the runtime's `mon_daemon` drives one.
//!
//! - Each monitor keeps one outgoing lossy session to every peer and reopens it
//!   [`PEER_RETRY_INTERVAL`] after it closes or a connection attempt fails; Raft
//!   messages, forwards and forwarded replies travel on those sessions.
//! - Raft's clock ticks from virtual time (`MON_TICK`), each rank at its own phase.
//! - After every call the store image the monitor hands out ([`Monitor::take_store`])
//!   becomes its "disk" **before** any output of that call is carried out, so a crash
//!   (which happens between events) never loses what a sent message depended on; a
//!   restart opens the monitor from exactly those bytes.
//! - Every map a monitor applies is recorded with a hash of its encoding, per rank, for
//!   [`check_monitors`]: no two maps for one epoch, epochs only grow per monitor, and a
//!   restart never goes back before what the monitor published.

use crate::events::Event;
use crate::network::{Endpoint, Node, SessionId, Wire};
use crate::sim::{Phase, Sim, MON_TICK};
use crate::time::{Nanos, MILLISECOND};
use bytes::Bytes;
use carmine_clustermap::OsdMap;
use carmine_mon::{MonConfig, MonOutput, MonStore, Monitor};
use carmine_types::encoding::Encode;
use carmine_types::{EntityName, Epoch};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Pause before a monitor reconnects to a peer (the daemon's `PEER_RETRY_INTERVAL`).
pub const PEER_RETRY_INTERVAL: Nanos = 300 * MILLISECOND;

/// One monitor process and its disk.
pub struct MonNode {
    /// Running, or crashed (`None`).
    pub mon: Option<Monitor>,
    /// The last store image it persisted (`mon.store`): what a restart opens.
    pub disk: Bytes,
    /// Its outgoing sessions to peer monitors, by rank.
    pub peer_sessions: BTreeMap<u64, SessionId>,
}

/// What one monitor did with maps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapEvent {
    /// Opened (at the start or a restart) with this applied map.
    Opened(Epoch, u64),
    /// Applied and published this map.
    Published(Epoch, u64),
}

/// Every monitor's map events, by rank.
#[derive(Debug, Default)]
pub struct MonRecord {
    pub events: Vec<Vec<MapEvent>>,
}

/// FNV-1a of a map's encoding: equal maps, equal hashes.
pub fn map_hash(map: &OsdMap) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in map.to_bytes().iter() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The monitor checker: one map per epoch across all monitors, epochs strictly growing
/// per monitor, and a restarted monitor no older than what it had published.
pub fn check_monitors(record: &MonRecord, out: &mut Vec<String>) {
    let mut first: BTreeMap<Epoch, (usize, u64)> = BTreeMap::new();
    for (rank, events) in record.events.iter().enumerate() {
        let mut last: Option<Epoch> = None;
        for event in events {
            let (epoch, hash) = match *event {
                MapEvent::Opened(epoch, hash) => {
                    if let Some(last) = last.filter(|&last| epoch < last) {
                        out.push(format!(
                            "mon.{rank} restarted at e{} after publishing e{}: its store lost applied maps",
                            epoch.0, last.0
                        ));
                    }
                    (epoch, hash)
                }
                MapEvent::Published(epoch, hash) => {
                    if let Some(last) = last.filter(|&last| epoch <= last) {
                        out.push(format!(
                            "mon.{rank} published e{} after e{}",
                            epoch.0, last.0
                        ));
                    }
                    (epoch, hash)
                }
            };
            last = Some(last.map_or(epoch, |last| last.max(epoch)));
            match first.get(&epoch) {
                Some(&(other, other_hash)) if other_hash != hash => out.push(format!(
                    "mon.{rank} and mon.{other} published different maps for e{}",
                    epoch.0
                )),
                Some(_) => {}
                None => {
                    first.insert(epoch, (rank, hash));
                }
            }
        }
    }
}

impl MonNode {
    fn epoch(&self) -> Option<Epoch> {
        self.mon.as_ref().map(|mon| mon.map().epoch)
    }
}

impl Sim {
    /// The group's monitors, each from the same bootstrap store image of `map`.
    pub(crate) fn new_monitors(
        map: &OsdMap,
        count: u64,
        now: Instant,
        record: &mut MonRecord,
    ) -> Vec<MonNode> {
        let ranks: Vec<u64> = (0..count).collect();
        let config = mon_config(count);
        ranks
            .iter()
            .map(|&rank| {
                let store = MonStore::bootstrap(map, &ranks);
                let disk = Bytes::from(store.to_bytes());
                let mon = Monitor::open(rank, &ranks, store, config.clone(), now)
                    .expect("a bootstrapped monitor opens");
                record
                    .events
                    .push(vec![MapEvent::Opened(mon.map().epoch, map_hash(mon.map()))]);
                MonNode {
                    mon: Some(mon),
                    disk,
                    peer_sessions: BTreeMap::new(),
                }
            })
            .collect()
    }

    pub(crate) fn mon_count(&self) -> u64 {
        self.mons.len() as u64
    }

    pub(crate) fn mon_running(&self, rank: u64) -> bool {
        self.mons[rank as usize].mon.is_some()
    }

    /// The running leader with the highest term, if any.
    pub(crate) fn mon_leader(&self) -> Option<u64> {
        self.mons
            .iter()
            .filter_map(|node| node.mon.as_ref())
            .filter(|mon| mon.is_leader())
            .max_by_key(|mon| mon.term())
            .map(|mon| mon.rank())
    }

    /// Why the monitors have not converged on the newest map, if they have not.
    pub(crate) fn mon_convergence_problem(&self) -> Option<String> {
        let newest = self.newest_map.epoch;
        self.mons
            .iter()
            .enumerate()
            .find(|(_, node)| node.epoch() != Some(newest))
            .map(|(rank, node)| match node.epoch() {
                None => format!("mon.{rank} is down"),
                Some(epoch) => format!("mon.{rank} is at e{}, not e{}", epoch.0, newest.0),
            })
    }

    /// Feeds one input to monitor `rank` (if it runs), persists its store image, then
    /// carries out its outputs.
    pub(crate) fn mon_call(
        &mut self,
        rank: u64,
        input: impl FnOnce(&mut Monitor, Instant) -> Vec<MonOutput>,
    ) {
        let now = self.clock.instant();
        let node = &mut self.mons[rank as usize];
        let Some(mon) = node.mon.as_mut() else {
            return;
        };
        let outputs = input(mon, now);
        if let Some(image) = mon.take_store() {
            node.disk = image;
        }
        self.mon_outputs(rank, outputs);
    }

    fn mon_outputs(&mut self, rank: u64, outputs: Vec<MonOutput>) {
        for output in outputs {
            match output {
                MonOutput::PersistMap(map) => self.mon_published(rank, map),
                MonOutput::Send(conn, msg) => self.send_session(conn, Endpoint::Mon(rank), msg),
            }
        }
    }

    fn mon_published(&mut self, rank: u64, map: Arc<OsdMap>) {
        let epoch = map.epoch;
        self.trace
            .note(self.now(), || format!("mon.{rank} applies e{}", epoch.0));
        let hash = map_hash(&map);
        let events = &mut self.mon_record.events[rank as usize];
        events.push(MapEvent::Published(epoch, hash));
        if self.config.canary == crate::Canary::MonLocalEpoch && !self.canary_fired {
            // The canary: this monitor also publishes a map of its own making for the
            // epoch, outside Raft, as a monitor that changed its map locally would.
            self.canary_fired = true;
            let mut forged = (*map).clone();
            forged.fsid ^= 1;
            events.push(MapEvent::Published(epoch, map_hash(&forged)));
            self.trace.note(self.now(), || {
                format!(
                    "CANARY: mon.{rank} publishes a second e{} of its own",
                    epoch.0
                )
            });
        }
        self.snap_removals.record_map(&map, self.pool);
        if epoch > self.newest_map.epoch {
            self.newest_map = map;
        }
    }

    pub(crate) fn mon_receive(&mut self, rank: u64, wire: Wire) {
        let crate::network::Via::Session(conn) = wire.via else {
            panic!("monitors talk over sessions only");
        };
        let from = match wire.from {
            Endpoint::Osd(osd, _) => EntityName::osd(osd),
            Endpoint::Client(index) => EntityName::client(self.clients[index as usize].id),
            Endpoint::Mon(peer) => EntityName::mon(peer),
        };
        let msg = wire.msg;
        self.mon_call(rank, |mon, now| mon.handle_message(now, conn, from, msg));
    }

    pub(crate) fn mon_session_closed(&mut self, rank: u64, session: SessionId) {
        self.mon_call(rank, |mon, now| mon.handle_disconnect(now, session));
        let node = &mut self.mons[rank as usize];
        let peer = node
            .peer_sessions
            .iter()
            .find(|(_, &s)| s == session)
            .map(|(&peer, _)| peer);
        if let Some(peer) = peer {
            node.peer_sessions.remove(&peer);
            if node.mon.is_some() {
                self.schedule(
                    PEER_RETRY_INTERVAL,
                    Event::MonConnectPeer {
                        from: rank,
                        to: peer,
                    },
                );
            }
        }
    }

    /// Opens `from`'s session to peer `to`, as the daemon's `connect_peers`.
    pub(crate) fn mon_connect_peer(&mut self, from: u64, to: u64) {
        let node = &self.mons[from as usize];
        if node.mon.is_none() || node.peer_sessions.contains_key(&to) {
            return;
        }
        let session = if self.mon_running(to) {
            self.net.connect(Endpoint::Mon(from), Endpoint::Mon(to))
        } else {
            None
        };
        match session {
            Some(session) => {
                self.mons[from as usize].peer_sessions.insert(to, session);
                self.mon_call(from, |mon, _| {
                    mon.handle_peer_connected(to, session);
                    Vec::new()
                });
            }
            None => {
                // Refused at once by a dead peer's host; a cut one times out first.
                let reachable = self.net.reachable(Node::Mon(from), Node::Mon(to));
                let wait = if reachable {
                    MILLISECOND
                } else {
                    crate::osd_node::CONNECT_TIMEOUT
                };
                self.schedule(
                    wait + PEER_RETRY_INTERVAL,
                    Event::MonConnectPeer { from, to },
                );
            }
        }
    }

    pub(crate) fn mon_tick(&mut self, rank: u64) {
        self.schedule(MON_TICK, Event::MonTick(rank));
        self.mon_call(rank, |mon, now| mon.handle_tick(now));
        if rank == 0 && self.phase >= Phase::Quiet {
            self.watch_convergence();
        }
    }

    /// The monitor process dies; its disk stays. Every session it had closes, and the
    /// survivors' kernels tell them at once (a reset).
    pub(crate) fn crash_mon(&mut self, rank: u64) {
        let node = &mut self.mons[rank as usize];
        if node.mon.take().is_none() {
            return;
        }
        node.peer_sessions.clear();
        let closed = self
            .net
            .close_where(|a, b| a == Node::Mon(rank) || b == Node::Mon(rank));
        for (session, a, b) in closed {
            let survivor = if a.node() == Node::Mon(rank) { b } else { a };
            let delay = self.rng.between(MILLISECOND, 5 * MILLISECOND);
            self.schedule(
                delay,
                Event::SessionClosed {
                    session,
                    endpoint: survivor,
                },
            );
        }
    }

    /// Starts a crashed monitor from its persisted store image.
    pub(crate) fn restart_mon(&mut self, rank: u64) {
        if self.mon_running(rank) {
            return;
        }
        let ranks: Vec<u64> = (0..self.mon_count()).collect();
        let node = &self.mons[rank as usize];
        let opened = MonStore::from_bytes(&node.disk)
            .map_err(|error| error.to_string())
            .and_then(|store| {
                Monitor::open(
                    rank,
                    &ranks,
                    store,
                    mon_config(ranks.len() as u64),
                    self.clock.instant(),
                )
                .map_err(|error| error.to_string())
            });
        let mon = match opened {
            Ok(mon) => mon,
            Err(error) => {
                self.violations
                    .push(format!("mon.{rank} cannot restart from its store: {error}"));
                return;
            }
        };
        let (epoch, hash) = (mon.map().epoch, map_hash(mon.map()));
        self.trace.note(self.now(), || {
            format!("mon.{rank} restarts at e{}", epoch.0)
        });
        self.mon_record.events[rank as usize].push(MapEvent::Opened(epoch, hash));
        self.mons[rank as usize].mon = Some(mon);
        for peer in ranks.into_iter().filter(|&peer| peer != rank) {
            self.schedule(
                MILLISECOND,
                Event::MonConnectPeer {
                    from: rank,
                    to: peer,
                },
            );
        }
    }

    /// At the start: ticks at distinct phases, and every peer session.
    pub(crate) fn start_monitors(&mut self) {
        for rank in 0..self.mon_count() {
            let phase = if rank == 0 {
                0
            } else {
                self.rng.below(MON_TICK)
            };
            self.schedule(MON_TICK + phase, Event::MonTick(rank));
            for peer in (0..self.mon_count()).filter(|&peer| peer != rank) {
                let jitter = self.rng.below(20 * MILLISECOND);
                self.schedule(
                    jitter,
                    Event::MonConnectPeer {
                        from: rank,
                        to: peer,
                    },
                );
            }
        }
    }
}

/// The monitors' settings: the daemon's defaults for a group of `count`.
fn mon_config(count: u64) -> MonConfig {
    MonConfig {
        mon_count: count as u32,
        ..MonConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(events: Vec<Vec<MapEvent>>) -> Vec<String> {
        let mut out = Vec::new();
        check_monitors(&MonRecord { events }, &mut out);
        out
    }

    #[test]
    fn agreeing_monitors_pass_and_snapshots_may_skip_epochs() {
        use MapEvent::*;
        let healthy = vec![
            vec![
                Opened(Epoch(1), 10),
                Published(Epoch(2), 20),
                Published(Epoch(3), 30),
            ],
            // A follower that got a snapshot, crashed and restarted where it was.
            vec![
                Opened(Epoch(1), 10),
                Published(Epoch(3), 30),
                Opened(Epoch(3), 30),
            ],
        ];
        assert_eq!(check(healthy), Vec::<String>::new());
    }

    #[test]
    fn two_maps_for_one_epoch_going_back_and_a_lossy_restart_are_caught() {
        use MapEvent::*;
        let forked = check(vec![
            vec![Published(Epoch(2), 20)],
            vec![Published(Epoch(2), 21)],
        ]);
        assert_eq!(forked.len(), 1, "{forked:?}");
        assert!(forked[0].contains("different maps for e2"), "{forked:?}");
        let backwards = check(vec![vec![Published(Epoch(3), 30), Published(Epoch(2), 20)]]);
        assert!(
            backwards[0].contains("published e2 after e3"),
            "{backwards:?}"
        );
        let lossy = check(vec![vec![Published(Epoch(3), 30), Opened(Epoch(2), 20)]]);
        assert!(lossy[0].contains("restarted at e2"), "{lossy:?}");
    }
}
