//! The simulated network: sessions and links between endpoints, latency, resets and
//! partitions. It decides *when* and *whether* a message arrives; the event loop
//! carries it.
//!
//! Two kinds of transport, as the messenger has (DESIGN.md §4):
//! - **lossy sessions** (client ↔ OSD, daemon ↔ monitor, monitor → monitor): a numbered session that a
//!   reset or a partition closes; what is in flight on a closed session is lost, and
//!   the endpoints learn of the close after a detection delay;
//! - **lossless links** (OSD shard ↔ OSD shard): delivery in order, exactly once, while
//!   both processes live. A partition holds messages until it heals (the messenger
//!   replays them after reconnecting); a crash of either end loses them.
//!
//! Delivery is FIFO per session direction and per lossless link; across links,
//! random latencies reorder freely.

use crate::rng::Rng;
use crate::time::{Nanos, MICROSECOND, MILLISECOND};
use carmine_proto::Msg;
use carmine_types::{OsdId, ShardIndex};
use std::collections::{BTreeMap, BTreeSet};

/// A process: a monitor (by rank), an OSD (all its shards) or a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    Mon(u64),
    Osd(OsdId),
    Client(u32),
}

/// Where a message goes: a process, and for an OSD one of its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Mon(u64),
    Osd(OsdId, ShardIndex),
    Client(u32),
}

impl Endpoint {
    pub fn node(self) -> Node {
        match self {
            Endpoint::Mon(rank) => Node::Mon(rank),
            Endpoint::Osd(osd, _) => Node::Osd(osd),
            Endpoint::Client(index) => Node::Client(index),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Mon(rank) => write!(f, "mon.{rank}"),
            Endpoint::Osd(osd, shard) => write!(f, "osd.{}/{}", osd.0, shard.0),
            Endpoint::Client(index) => write!(f, "client{index}"),
        }
    }
}

/// A session's number; the monitor's `ConnId` and the OSD's `ClientRef` are this.
pub type SessionId = u64;

/// Sessions a run may open before the simulator declares a reconnect storm.
pub const SESSIONS_MAX: u64 = 1_000_000;
/// Messages one lossless link may hold during a partition.
pub const HELD_MESSAGES_MAX: usize = 100_000;

#[derive(Debug)]
struct Session {
    initiator: Endpoint,
    acceptor: Endpoint,
    open: bool,
    /// Earliest next delivery time per direction (0: initiator → acceptor), for FIFO.
    next_free: [Nanos; 2],
}

/// How a message travels, checked again on delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Session(SessionId),
    /// A lossless link; `seq` orders the link, the incarnations detect crashes.
    Link {
        seq: u64,
        from_incarnation: u64,
        to_incarnation: u64,
    },
}

/// A message on the wire.
#[derive(Debug, Clone)]
pub struct Wire {
    pub from: Endpoint,
    pub to: Endpoint,
    pub via: Via,
    pub msg: Msg,
}

#[derive(Debug, Default)]
struct Link {
    next_seq: u64,
    last_delivered: u64,
    next_free: Nanos,
    held: BTreeMap<u64, Wire>,
    /// Held messages a heal rescheduled that have not arrived yet. A message sent
    /// before the cut may still be on its way when the cut heals, and it arrives
    /// before the released ones (they are scheduled after it): it must wait for
    /// them, as the messenger replays its unacknowledged messages before new ones.
    released: BTreeSet<u64>,
}

impl Link {
    /// Whether the message `seq`, arriving, must wait behind an earlier one (held,
    /// or released and still on its way).
    fn behind_earlier(&self, seq: u64) -> bool {
        let earlier = |first: Option<u64>| first.is_some_and(|first| first < seq);
        earlier(self.held.keys().next().copied()) || earlier(self.released.first().copied())
    }

    /// Whether held messages wait for nothing but a release: no cut (the caller
    /// checks), and none of them is behind a released message still on its way.
    fn ready_to_release(&self) -> bool {
        match (self.held.keys().next(), self.released.first()) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(held), Some(released)) => held < released,
        }
    }
}

/// What the network did with a message handed to it.
#[derive(Debug)]
pub enum Sent {
    /// Deliver at this time.
    At(Nanos, Box<Wire>),
    Held,
    Lost,
}

/// Per-message latency settings, chosen by the seed.
#[derive(Debug, Clone, Copy)]
pub struct LatencyConfig {
    pub base_min: Nanos,
    pub base_max: Nanos,
    /// One message in this many takes a spike of `spike` extra.
    pub spike_one_in: u64,
    pub spike: Nanos,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        Self {
            base_min: 20 * MICROSECOND,
            base_max: 2 * MILLISECOND,
            spike_one_in: 200,
            spike: 30 * MILLISECOND,
        }
    }
}

/// The network. See the module docs.
#[derive(Debug)]
pub struct Network {
    rng: Rng,
    latency: LatencyConfig,
    base: BTreeMap<(Node, Node), Nanos>,
    slow: BTreeMap<(Node, Node), u64>,
    sessions: BTreeMap<SessionId, Session>,
    next_session: SessionId,
    links: BTreeMap<(Endpoint, Endpoint), Link>,
    /// Directed cuts with a count, as partitions may overlap.
    blocked: BTreeMap<(Node, Node), u32>,
    incarnation: BTreeMap<OsdId, u64>,
    pub lost_total: u64,
}

impl Network {
    pub fn new(rng: Rng, latency: LatencyConfig) -> Self {
        Self {
            rng,
            latency,
            base: BTreeMap::new(),
            slow: BTreeMap::new(),
            sessions: BTreeMap::new(),
            next_session: 1,
            links: BTreeMap::new(),
            blocked: BTreeMap::new(),
            incarnation: BTreeMap::new(),
            lost_total: 0,
        }
    }

    fn latency(&mut self, from: Node, to: Node) -> Nanos {
        let (low, high) = (self.latency.base_min, self.latency.base_max);
        let rng = &mut self.rng;
        let base = *self
            .base
            .entry((from, to))
            .or_insert_with(|| rng.between(low, high));
        let mut latency = base + self.rng.below(base);
        if self.rng.chance(1, self.latency.spike_one_in) {
            latency += self.rng.below(self.latency.spike);
        }
        latency * self.slow.get(&(from, to)).copied().unwrap_or(1)
    }

    // --- reachability -------------------------------------------------------------

    pub fn is_blocked(&self, from: Node, to: Node) -> bool {
        self.blocked.contains_key(&(from, to))
    }

    /// Whether a session between `a` and `b` can work (it needs both directions).
    pub fn reachable(&self, a: Node, b: Node) -> bool {
        !self.is_blocked(a, b) && !self.is_blocked(b, a)
    }

    /// Cuts `from → to`. Returns the sessions this breaks (the caller notifies their
    /// endpoints after a detection delay).
    pub fn block(&mut self, from: Node, to: Node) -> Vec<(SessionId, Endpoint, Endpoint)> {
        *self.blocked.entry((from, to)).or_default() += 1;
        self.close_where(|a, b| (a == from && b == to) || (a == to && b == from))
    }

    /// Heals one `block(from, to)`; returns lossless messages it releases, in order.
    pub fn unblock(&mut self, now: Nanos, from: Node, to: Node) -> Vec<(Nanos, Wire)> {
        let count = self.blocked.get_mut(&(from, to)).expect("was blocked");
        *count -= 1;
        if *count == 0 {
            self.blocked.remove(&(from, to));
        }
        self.release_held(now)
    }

    pub fn set_slow(&mut self, from: Node, to: Node, factor: u64) {
        self.slow.insert((from, to), factor);
    }

    pub fn clear_slow(&mut self, from: Node, to: Node) {
        self.slow.remove(&(from, to));
    }

    pub fn heal_everything(&mut self, now: Nanos) -> Vec<(Nanos, Wire)> {
        self.blocked.clear();
        self.slow.clear();
        self.release_held(now)
    }

    pub fn blocked_pairs(&self) -> usize {
        self.blocked.len()
    }

    // --- sessions -----------------------------------------------------------------

    /// Opens a session if both ends can reach each other (the caller checks that the
    /// acceptor's process is alive).
    pub fn connect(&mut self, initiator: Endpoint, acceptor: Endpoint) -> Option<SessionId> {
        if !self.reachable(initiator.node(), acceptor.node()) {
            return None;
        }
        let id = self.next_session;
        self.next_session += 1;
        assert!(id < SESSIONS_MAX, "reconnect storm: {id} sessions");
        self.sessions.insert(
            id,
            Session {
                initiator,
                acceptor,
                open: true,
                next_free: [0, 0],
            },
        );
        Some(id)
    }

    pub fn is_open(&self, session: SessionId) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.open)
    }

    /// The other end of `session` as seen from `me`.
    pub fn peer_of(&self, session: SessionId, me: Endpoint) -> Option<Endpoint> {
        let s = self.sessions.get(&session)?;
        if s.initiator == me {
            Some(s.acceptor)
        } else if s.acceptor == me {
            Some(s.initiator)
        } else {
            None
        }
    }

    pub fn initiator_of(&self, session: SessionId) -> Option<Endpoint> {
        self.sessions.get(&session).map(|s| s.initiator)
    }

    /// Closes `session` (a reset); returns its endpoints if it was open.
    pub fn close(&mut self, session: SessionId) -> Option<(Endpoint, Endpoint)> {
        let s = self.sessions.get_mut(&session)?;
        if !s.open {
            return None;
        }
        s.open = false;
        Some((s.initiator, s.acceptor))
    }

    /// Closes every open session whose nodes match; returns them.
    pub fn close_where(
        &mut self,
        mut matches: impl FnMut(Node, Node) -> bool,
    ) -> Vec<(SessionId, Endpoint, Endpoint)> {
        let mut closed = Vec::new();
        for (&id, s) in self.sessions.iter_mut() {
            if s.open && matches(s.initiator.node(), s.acceptor.node()) {
                s.open = false;
                closed.push((id, s.initiator, s.acceptor));
            }
        }
        closed
    }

    /// Open sessions whose nodes match (for choosing one to reset).
    pub fn open_sessions(
        &self,
        mut matches: impl FnMut(Endpoint, Endpoint) -> bool,
    ) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, s)| s.open && matches(s.initiator, s.acceptor))
            .map(|(&id, _)| id)
            .collect()
    }

    /// Sends on a session from `from`; lost if the session is closed.
    pub fn send_session(
        &mut self,
        now: Nanos,
        session: SessionId,
        from: Endpoint,
        msg: Msg,
    ) -> Sent {
        let Some(s) = self.sessions.get(&session) else {
            self.lost_total += 1;
            return Sent::Lost;
        };
        if !s.open {
            self.lost_total += 1;
            return Sent::Lost;
        }
        let (to, direction) = if s.initiator == from {
            (s.acceptor, 0)
        } else {
            assert_eq!(
                s.acceptor, from,
                "{from} is not an end of session {session}"
            );
            (s.initiator, 1)
        };
        let latency = self.latency(from.node(), to.node());
        let s = self.sessions.get_mut(&session).expect("looked up above");
        let at = (now + latency).max(s.next_free[direction]);
        s.next_free[direction] = at;
        let wire = Wire {
            from,
            to,
            via: Via::Session(session),
            msg,
        };
        Sent::At(at, Box::new(wire))
    }

    // --- lossless links -----------------------------------------------------------

    pub fn incarnation(&self, osd: OsdId) -> u64 {
        self.incarnation.get(&osd).copied().unwrap_or(0)
    }

    /// The OSD crashed: its lossless messages, queued or held, are gone.
    pub fn crash(&mut self, osd: OsdId) {
        *self.incarnation.entry(osd).or_default() += 1;
        for ((from, to), link) in self.links.iter_mut() {
            if from.node() == Node::Osd(osd) || to.node() == Node::Osd(osd) {
                self.lost_total += link.held.len() as u64;
                link.held.clear();
                // Those on their way are lost on arrival (`admit` sees the incarnation).
                link.released.clear();
            }
        }
    }

    fn osd_of(endpoint: Endpoint) -> OsdId {
        match endpoint {
            Endpoint::Osd(osd, _) => osd,
            other => panic!("lossless links join OSD shards, not {other}"),
        }
    }

    pub fn send_link(&mut self, now: Nanos, from: Endpoint, to: Endpoint, msg: Msg) -> Sent {
        let from_incarnation = self.incarnation(Self::osd_of(from));
        let to_incarnation = self.incarnation(Self::osd_of(to));
        let blocked = self.is_blocked(from.node(), to.node());
        let link = self.links.entry((from, to)).or_default();
        link.next_seq += 1;
        let via = Via::Link {
            seq: link.next_seq,
            from_incarnation,
            to_incarnation,
        };
        let wire = Wire { from, to, via, msg };
        if blocked || !link.held.is_empty() {
            assert!(
                link.held.len() < HELD_MESSAGES_MAX,
                "link {from} → {to} holds too much"
            );
            link.held.insert(link.next_seq, wire);
            return Sent::Held;
        }
        let latency = self.latency(from.node(), to.node());
        let link = self.links.get_mut(&(from, to)).expect("created above");
        let at = (now + latency).max(link.next_free);
        link.next_free = at;
        Sent::At(at, Box::new(wire))
    }

    /// Whether a message may be delivered now. A lossless message that meets a cut is
    /// held (returns false); a message of a closed session or a dead process is lost.
    pub fn admit(&mut self, wire: Box<Wire>) -> Option<Box<Wire>> {
        match wire.via {
            Via::Session(session) => {
                if self.is_open(session) {
                    return Some(wire);
                }
                self.lost_total += 1;
                None
            }
            Via::Link {
                seq,
                from_incarnation,
                to_incarnation,
            } => {
                let alive = from_incarnation == self.incarnation(Self::osd_of(wire.from))
                    && to_incarnation == self.incarnation(Self::osd_of(wire.to));
                if !alive {
                    self.lost_total += 1;
                    return None;
                }
                let blocked = self.is_blocked(wire.from.node(), wire.to.node());
                let link = self
                    .links
                    .get_mut(&(wire.from, wire.to))
                    .expect("sent on it");
                link.released.remove(&seq);
                if blocked || link.behind_earlier(seq) {
                    link.held.insert(seq, *wire);
                    return None;
                }
                assert!(
                    seq > link.last_delivered,
                    "lossless link reordered: {seq} after {}",
                    link.last_delivered
                );
                link.last_delivered = seq;
                Some(wire)
            }
        }
    }

    /// After a lossless message from `from` to `to` was delivered: reschedules, in
    /// order, what that link held behind the released messages it waited for.
    pub fn release_after_delivery(
        &mut self,
        now: Nanos,
        from: Endpoint,
        to: Endpoint,
    ) -> Vec<(Nanos, Wire)> {
        let ready = !self.is_blocked(from.node(), to.node())
            && self
                .links
                .get(&(from, to))
                .is_some_and(Link::ready_to_release);
        let mut released = Vec::new();
        if ready {
            self.release_link(now, from, to, &mut released);
        }
        released
    }

    /// Reschedules, in order, what links hold whose cut has healed.
    fn release_held(&mut self, now: Nanos) -> Vec<(Nanos, Wire)> {
        let mut released = Vec::new();
        let keys: Vec<(Endpoint, Endpoint)> = self
            .links
            .iter()
            .filter(|(_, link)| !link.held.is_empty())
            .map(|(key, _)| *key)
            .collect();
        for (from, to) in keys {
            if self.is_blocked(from.node(), to.node()) {
                continue;
            }
            self.release_link(now, from, to, &mut released);
        }
        released
    }

    fn release_link(
        &mut self,
        now: Nanos,
        from: Endpoint,
        to: Endpoint,
        released: &mut Vec<(Nanos, Wire)>,
    ) {
        let held = std::mem::take(&mut self.links.get_mut(&(from, to)).expect("listed").held);
        for (seq, wire) in held {
            let latency = self.latency(from.node(), to.node());
            let link = self.links.get_mut(&(from, to)).expect("listed");
            let at = (now + latency).max(link.next_free);
            link.next_free = at;
            link.released.insert(seq);
            released.push((at, wire));
        }
    }
}

/// The set of nodes, for choosing partitions.
pub fn all_nodes(osds: &[OsdId], mons: u64, clients: u32) -> BTreeSet<Node> {
    let mut nodes: BTreeSet<Node> = osds.iter().map(|&osd| Node::Osd(osd)).collect();
    nodes.extend((0..mons).map(Node::Mon));
    nodes.extend((0..clients).map(Node::Client));
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmine_proto::PgQuery;
    use carmine_types::{Epoch, PgId, PoolId};

    fn query(map_epoch: u32) -> Msg {
        Msg::PgQuery(PgQuery {
            pgid: PgId {
                pool: PoolId(1),
                seed: 0,
            },
            interval: Epoch(1),
            map_epoch: Epoch(map_epoch),
        })
    }

    fn scheduled(sent: Sent) -> (Nanos, Box<Wire>) {
        match sent {
            Sent::At(at, wire) => (at, wire),
            other => panic!("expected a delivery time, got {other:?}"),
        }
    }

    fn seq(wire: &Wire) -> u64 {
        match wire.via {
            Via::Link { seq, .. } => seq,
            Via::Session(_) => unreachable!("a link message"),
        }
    }

    /// A cut holds the first of two messages in flight and heals before the second
    /// arrives: the second, though it arrives first, is delivered after the first.
    #[test]
    fn a_healed_cut_keeps_a_lossless_link_in_order() {
        let mut net = Network::new(Rng::new(7), LatencyConfig::default());
        let (a, b) = (
            Endpoint::Osd(OsdId(0), ShardIndex(0)),
            Endpoint::Osd(OsdId(1), ShardIndex(0)),
        );
        let (first_at, first) = scheduled(net.send_link(0, a, b, query(1)));
        let (second_at, second) = scheduled(net.send_link(0, a, b, query(2)));
        assert!(second_at >= first_at, "a link is FIFO in time");
        net.block(a.node(), b.node());
        assert!(net.admit(first).is_none(), "held by the cut");
        let released = net.unblock(first_at, a.node(), b.node());
        assert_eq!(released.len(), 1);
        let (released_at, first) = released.into_iter().next().expect("one");
        assert!(
            released_at >= second_at,
            "scheduled after the one in flight"
        );
        assert!(
            net.admit(second).is_none(),
            "the second waits for the first"
        );
        let first = net.admit(Box::new(first)).expect("delivered");
        assert_eq!(seq(&first), 1);
        let again = net.release_after_delivery(released_at, a, b);
        assert_eq!(again.len(), 1, "the second is released behind the first");
        let (_, second) = again.into_iter().next().expect("one");
        let second = net.admit(Box::new(second)).expect("delivered");
        assert_eq!(seq(&second), 2);
    }
}
