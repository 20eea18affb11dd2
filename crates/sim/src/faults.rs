//! Fault injection: which fault comes next (by the seed's weights among the enabled
//! classes), applying it, undoing it, and healing everything for the quiet phase.

use crate::events::Event;
use crate::network::Node;
use crate::rng::Rng;
use crate::sim::{Phase, Sim};
use crate::time::{format_nanos, Nanos, MILLISECOND, SECOND};
use carmine_types::OsdId;
use std::collections::BTreeMap;

/// Lines of the fault log kept for the report.
pub const FAULT_LOG_MAX: usize = 200;

#[derive(Debug)]
enum Active {
    Partition(Vec<(Node, Node)>),
    Slow(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reset,
    OsdMonReset,
    SlowLink,
    ClientPartition,
    OsdPartition,
    Crash,
    MonCrash,
    MonPartition,
}

/// Faults injected and still to undo.
#[derive(Debug)]
pub struct FaultState {
    pub rng: Rng,
    next_id: u64,
    active: BTreeMap<u64, Active>,
    pub injected: u64,
    pub log: Vec<String>,
}

impl FaultState {
    pub fn new(rng: Rng) -> Self {
        Self {
            rng,
            next_id: 1,
            active: BTreeMap::new(),
            injected: 0,
            log: Vec::new(),
        }
    }
}

impl Sim {
    fn fault_kinds(&self) -> Vec<(Kind, u64)> {
        let classes = self.config.faults;
        let weights = self.config.fault_weights;
        [
            (Kind::Reset, classes.resets, weights.reset),
            (
                Kind::OsdMonReset,
                classes.osd_mon_resets,
                weights.osd_mon_reset,
            ),
            (Kind::SlowLink, classes.slow_links, weights.slow_link),
            (
                Kind::ClientPartition,
                classes.client_partitions,
                weights.client_partition,
            ),
            (
                Kind::OsdPartition,
                classes.osd_partitions,
                weights.osd_partition,
            ),
            (Kind::Crash, classes.crashes, weights.crash),
            (Kind::MonCrash, classes.mon_crashes, weights.mon_crash),
            (
                Kind::MonPartition,
                classes.mon_partitions && self.mon_count() > 1,
                weights.mon_partition,
            ),
        ]
        .into_iter()
        .filter(|(_, enabled, weight)| *enabled && *weight > 0)
        .map(|(kind, _, weight)| (kind, weight))
        .collect()
    }

    pub(crate) fn inject_fault(&mut self) {
        if self.phase != Phase::Faults {
            return;
        }
        let next = self.faults.rng.exponential(self.config.fault_interval_mean);
        self.schedule(next, Event::Fault);
        let kinds = self.fault_kinds();
        let total: u64 = kinds.iter().map(|(_, weight)| weight).sum();
        if total == 0 {
            return;
        }
        let mut pick = self.faults.rng.below(total);
        let kind = kinds
            .iter()
            .find(|(_, weight)| {
                let hit = pick < *weight;
                pick = pick.saturating_sub(*weight);
                hit
            })
            .map(|(kind, _)| *kind)
            .expect("pick < total");
        let described = match kind {
            Kind::Reset => self.fault_reset(false),
            Kind::OsdMonReset => self.fault_reset(true),
            Kind::SlowLink => self.fault_slow_link(),
            Kind::ClientPartition => self.fault_client_partition(),
            Kind::OsdPartition => self.fault_osd_partition(),
            Kind::Crash => self.fault_crash(),
            Kind::MonCrash => self.fault_mon_crash(),
            Kind::MonPartition => self.fault_mon_partition(),
        };
        if let Some(words) = described {
            self.record_fault(words);
        }
    }

    /// Records a fault of a class on its own schedule (bit flips, disk errors): in the
    /// trace and the fault log, not in the count of the main schedule's faults.
    pub(crate) fn record_side_fault(&mut self, words: String) {
        self.trace.mix(words.as_bytes());
        self.trace.note(self.now(), || format!("FAULT {words}"));
        if self.faults.log.len() < FAULT_LOG_MAX {
            let line = format!("{} {words}", format_nanos(self.now()));
            self.faults.log.push(line);
        }
    }

    fn record_fault(&mut self, words: String) {
        self.faults.injected += 1;
        self.trace.mix(words.as_bytes());
        let line = format!("{} {words}", format_nanos(self.now()));
        self.trace.note(self.now(), || format!("FAULT {words}"));
        if self.faults.log.len() < FAULT_LOG_MAX {
            self.faults.log.push(line);
        }
    }

    /// Resets a client's session, or with `osd_mon` an OSD's monitor session.
    fn fault_reset(&mut self, osd_mon: bool) -> Option<String> {
        use crate::network::Endpoint;
        let sessions = self.net.open_sessions(|initiator, _| {
            if osd_mon {
                matches!(initiator, Endpoint::Osd(..))
            } else {
                matches!(initiator, Endpoint::Client(_))
            }
        });
        if sessions.is_empty() {
            return None;
        }
        let session = sessions[self.faults.rng.index(sessions.len())];
        let (a, b) = self.net.close(session)?;
        for endpoint in [a, b] {
            let delay = self.faults.rng.between(MILLISECOND, 10 * MILLISECOND);
            self.schedule(delay, Event::SessionClosed { session, endpoint });
        }
        Some(format!("reset session {session} {a} <-> {b}"))
    }

    fn random_osd(&mut self) -> OsdId {
        let osds: Vec<OsdId> = self.osds.keys().copied().collect();
        osds[self.faults.rng.index(osds.len())]
    }

    fn random_mon(&mut self) -> Node {
        Node::Mon(self.faults.rng.below(self.mon_count()))
    }

    /// One monitor, or (with more than one, half the time) all of them.
    fn some_mons(&mut self) -> Vec<Node> {
        if self.mon_count() > 1 && self.faults.rng.chance(1, 2) {
            (0..self.mon_count()).map(Node::Mon).collect()
        } else {
            vec![self.random_mon()]
        }
    }

    fn fault_slow_link(&mut self) -> Option<String> {
        let a = Node::Osd(self.random_osd());
        let b = match self.faults.rng.below(3) {
            0 => self.random_mon(),
            1 => Node::Client(self.faults.rng.below(u64::from(self.config.client_count)) as u32),
            _ => Node::Osd(self.random_osd()),
        };
        if a == b {
            return None;
        }
        let factor = self.faults.rng.between(20, 100);
        self.net.set_slow(a, b, factor);
        self.net.set_slow(b, a, factor);
        let duration = self.faults.rng.between(SECOND / 2, 4 * SECOND);
        self.start_fault(Active::Slow(vec![(a, b), (b, a)]), duration);
        Some(format!(
            "slow link {a:?} <-> {b:?} x{factor} for {}ms",
            duration / MILLISECOND
        ))
    }

    fn fault_client_partition(&mut self) -> Option<String> {
        let client =
            Node::Client(self.faults.rng.below(u64::from(self.config.client_count)) as u32);
        let others: Vec<Node> = match self.faults.rng.below(3) {
            0 => self.some_mons(),
            1 => vec![Node::Osd(self.random_osd())],
            _ => self.osds.keys().map(|&osd| Node::Osd(osd)).collect(),
        };
        let pairs = others
            .iter()
            .flat_map(|&other| [(client, other), (other, client)])
            .collect::<Vec<_>>();
        let duration = self.faults.rng.between(SECOND / 2, 5 * SECOND);
        self.partition(pairs, duration);
        Some(format!(
            "partition {client:?} from {others:?} for {}ms",
            duration / MILLISECOND
        ))
    }

    fn fault_osd_partition(&mut self) -> Option<String> {
        let osd = Node::Osd(self.random_osd());
        let others: Vec<Node> = match self.faults.rng.below(3) {
            0 => self.some_mons(),
            1 => vec![Node::Osd(self.random_osd())],
            _ => self
                .osds
                .keys()
                .map(|&other| Node::Osd(other))
                .filter(|&other| other != osd)
                .chain((0..self.mon_count()).map(Node::Mon))
                .collect(),
        };
        if others.contains(&osd) {
            return None;
        }
        let one_way = self.faults.rng.below(3);
        let pairs = others
            .iter()
            .flat_map(|&other| match one_way {
                0 => vec![(osd, other)],
                1 => vec![(other, osd)],
                _ => vec![(osd, other), (other, osd)],
            })
            .collect::<Vec<_>>();
        let duration = self.faults.rng.between(SECOND / 2, 8 * SECOND);
        self.partition(pairs, duration);
        let how = ["outbound only", "inbound only", "both ways"][one_way as usize];
        Some(format!(
            "partition {osd:?} from {others:?} {how} for {}ms",
            duration / MILLISECOND
        ))
    }

    fn fault_crash(&mut self) -> Option<String> {
        let osd = self.random_osd();
        if !self.osds[&osd].is_up() {
            return None;
        }
        self.crash_osd(osd);
        let downtime = self.faults.rng.between(SECOND / 2, 8 * SECOND);
        self.schedule(downtime, Event::OsdRestart(osd));
        Some(format!(
            "crash {osd}, restart in {}ms",
            downtime / MILLISECOND
        ))
    }

    /// Crashes a running monitor; it restarts later from its persisted store.
    fn fault_mon_crash(&mut self) -> Option<String> {
        let rank = self.faults.rng.below(self.mon_count());
        if !self.mon_running(rank) {
            return None;
        }
        let leader = self.mon_leader() == Some(rank);
        self.crash_mon(rank);
        let downtime = self.faults.rng.between(SECOND / 2, 8 * SECOND);
        self.schedule(downtime, Event::MonRestart(rank));
        Some(format!(
            "crash mon.{rank}{}, restart in {}ms",
            if leader { " (the leader)" } else { "" },
            downtime / MILLISECOND
        ))
    }

    /// Cuts monitors from each other, both ways: the leader from the rest, or a
    /// random minority. OSDs and clients still reach every monitor.
    fn fault_mon_partition(&mut self) -> Option<String> {
        let count = self.mon_count();
        let leader = self.mon_leader();
        let side: Vec<u64> = match leader {
            Some(leader) if self.faults.rng.chance(1, 2) => vec![leader],
            _ => {
                let size = self.faults.rng.between(1, (count - 1) / 2);
                let mut ranks: Vec<u64> = (0..count).collect();
                for i in 0..size as usize {
                    let j = i + self.faults.rng.index(ranks.len() - i);
                    ranks.swap(i, j);
                }
                ranks.truncate(size as usize);
                ranks.sort_unstable();
                ranks
            }
        };
        let pairs = side
            .iter()
            .flat_map(|&a| {
                (0..count)
                    .filter(|b| !side.contains(b))
                    .flat_map(move |b| [(Node::Mon(a), Node::Mon(b)), (Node::Mon(b), Node::Mon(a))])
            })
            .collect::<Vec<_>>();
        let duration = self.faults.rng.between(SECOND / 2, 8 * SECOND);
        self.partition(pairs, duration);
        let with_leader = leader.is_some_and(|leader| side.contains(&leader));
        Some(format!(
            "partition monitors {side:?}{} from the other monitors for {}ms",
            if with_leader {
                " (with the leader)"
            } else {
                ""
            },
            duration / MILLISECOND
        ))
    }

    /// Cuts `pairs`; sessions across the cut close, and their ends notice after a
    /// keepalive-like detection delay.
    fn partition(&mut self, pairs: Vec<(Node, Node)>, duration: Nanos) {
        for &(from, to) in &pairs {
            for (session, a, b) in self.net.block(from, to) {
                for endpoint in [a, b] {
                    let delay = self.faults.rng.between(SECOND / 2, 3 * SECOND);
                    self.schedule(delay, Event::SessionClosed { session, endpoint });
                }
            }
        }
        self.start_fault(Active::Partition(pairs), duration);
    }

    fn start_fault(&mut self, active: Active, duration: Nanos) {
        let id = self.faults.next_id;
        self.faults.next_id += 1;
        self.faults.active.insert(id, active);
        self.schedule(duration, Event::EndFault(id));
    }

    pub(crate) fn end_fault(&mut self, id: u64) {
        let Some(active) = self.faults.active.remove(&id) else {
            return; // Healed with everything at the quiet phase.
        };
        match active {
            Active::Partition(pairs) => {
                for (from, to) in pairs {
                    let released = self.net.unblock(self.now(), from, to);
                    self.schedule_released(released);
                }
                self.trace.note(self.now(), || format!("fault {id} heals"));
            }
            Active::Slow(pairs) => {
                for (from, to) in pairs {
                    self.net.clear_slow(from, to);
                }
            }
        }
    }

    pub(crate) fn schedule_released(&mut self, released: Vec<(Nanos, crate::network::Wire)>) {
        for (at, wire) in released {
            self.queue.push(at, Event::Deliver(Box::new(wire)));
        }
    }

    /// The quiet phase: no cut, no slow link, every OSD and monitor running.
    pub(crate) fn heal_everything(&mut self) {
        self.faults.active.clear();
        let released = self.net.heal_everything(self.now());
        self.schedule_released(released);
        let down: Vec<OsdId> = self
            .osds
            .iter()
            .filter(|(_, node)| !node.is_up())
            .map(|(&osd, _)| osd)
            .collect();
        for osd in down {
            self.restart_osd(osd);
        }
        for rank in 0..self.mon_count() {
            self.restart_mon(rank);
        }
    }
}
