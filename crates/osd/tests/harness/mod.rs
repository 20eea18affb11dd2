//! A tiny deterministic in-memory cluster for PG tests: `OsdShard<MemStore>`s joined
//! by per-link FIFO queues, driven one message at a time.
//!
//! The test owns time and order. It picks how messages are delivered (oldest first, or
//! a seeded random interleaving that keeps the order within each `(from, to)` link, as
//! TCP does), can deliver or drop selected messages, cut an OSD off (a partition),
//! and publish new maps to all shards or only some. Client requests go straight to a
//! shard's `handle_client_op`; replies are collected in arrival order.
//!
//! ```ignore
//! let mut cluster = Cluster::new(Config::default());
//! let reply = cluster.call("greeting", vec![OpCode::WriteFull { data: b"hi"[..].into() }]);
//! assert_eq!(reply.result, Ok(()));
//! ```

#![allow(dead_code)] // Each test binary uses a different part of the harness.

use bytes::Bytes;
use carmine_clustermap::{pg_shard, HistoryTracker, OsdMap, PoolSpec};
use carmine_osd::{ClientRef, OsdShard, OsdTuning, Output};
use carmine_proto::{Msg, OpCode, OsdOp, OsdOpReply, PgStat, PgState};
use carmine_store::{CollectionId, MemStore, ObjectStore};
use carmine_types::{Epoch, ObjectId, OsdId, PgId, PoolId, ReqId, ShardIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far `run` moves time per step while a PG waits for its read lease (a tick).
pub const TICK: Duration = Duration::from_millis(100);

/// Ticks (of [`TICK`]) [`Cluster::tick_until`] waits: well past the resend interval.
pub const RESEND_TICKS_MAX: usize = 100;
/// Ticks one `run` may take while PGs still wait (a partitioned replica keeps one
/// laggy for good): a few lease lengths.
pub const TICKS_PER_RUN_MAX: usize = 100;

/// Messages one `run` may deliver before the harness declares a livelock.
pub const DELIVERIES_PER_RUN_MAX: usize = 1_000_000;

/// The client connection the default client uses.
pub const CLIENT: ClientRef = 1;

/// One shard of one OSD.
pub type Addr = (OsdId, ShardIndex);

/// A message on the simulated network.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// Global send order.
    pub seq: u64,
    pub from: Addr,
    pub to: Addr,
    pub msg: Msg,
}

impl Envelope {
    pub fn is_rep_op(&self) -> bool {
        matches!(self.msg, Msg::RepOp(_))
    }

    pub fn is_rep_reply(&self) -> bool {
        matches!(self.msg, Msg::RepOpReply(_))
    }
}

/// The cluster's shape.
#[derive(Debug, Clone)]
pub struct Config {
    pub osd_count: u32,
    /// Shards of every OSD not named in `shards_of`.
    pub shards_per_osd: u16,
    pub shards_of: BTreeMap<OsdId, u16>,
    pub size: u8,
    pub min_size: Option<u8>,
    pub pg_num: u32,
    /// Store capacity of the OSDs named here (others are unbounded).
    pub capacity_bytes_of: BTreeMap<OsdId, u64>,
    /// The limits every shard runs with (restarted ones too).
    pub tuning: OsdTuning,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            osd_count: 3,
            shards_per_osd: 1,
            shards_of: BTreeMap::new(),
            size: 3,
            min_size: None,
            pg_num: 8,
            capacity_bytes_of: BTreeMap::new(),
            tuning: tuning(),
        }
    }
}

impl Config {
    /// Three OSDs serving one size-3 PG: the shape the resend tests use.
    pub fn one_pg() -> Self {
        Self {
            pg_num: 1,
            ..Self::default()
        }
    }
}

/// The daemons' limits, but recovery unthrottled by the scheduler's rates (only its
/// count cap holds): virtual time here moves only when a test moves it, and a test of
/// the rates moves it ([`Cluster::advance`]).
pub fn tuning() -> OsdTuning {
    OsdTuning {
        mclock: carmine_osd::MclockSettings::UNTHROTTLED,
        ..OsdTuning::default()
    }
}

/// How `step` picks the next message.
#[derive(Debug)]
pub enum Delivery {
    /// The oldest message in the whole network first.
    Fifo,
    /// The head of a link chosen at random.
    Random { seed: u64, rng: Box<StdRng> },
}

/// The whole cluster. See the module docs.
pub struct Cluster {
    /// The newest map (what the monitors and the test client hold).
    pub map: Arc<OsdMap>,
    pub pool: PoolId,
    shards: BTreeMap<Addr, OsdShard<MemStore>>,
    links: BTreeMap<(Addr, Addr), VecDeque<Envelope>>,
    next_seq: u64,
    partitioned: BTreeSet<OsdId>,
    replies: Vec<(ClientRef, OsdOpReply)>,
    delivery: Delivery,
    next_tid: u64,
    pub client_id: u64,
    pub delivered_total: u64,
    pub dropped_total: u64,
    history: HistoryTracker,
    /// Each new map records every up OSD alive through its epoch, as a monitor that
    /// answers every primary's `up_thru` request at once would (off: nothing records
    /// it, so primaries wait in WaitUpThru; [`Cluster::record_up_thru`] grants it).
    pub grant_up_thru: bool,
    tuning: OsdTuning,
    /// Virtual time: `origin` (the one real clock reading) plus `elapsed`. Every shard
    /// is given it before it handles anything; it moves only when `run` finds a PG
    /// holding ops for its read lease (`advance`), or when a test moves it.
    origin: Instant,
    pub elapsed: Duration,
}

impl Cluster {
    /// A cluster delivering oldest-first.
    pub fn new(config: Config) -> Cluster {
        Self::build(config, Delivery::Fifo)
    }

    /// A cluster delivering in a random interleaving picked by `seed`.
    pub fn with_seed(config: Config, seed: u64) -> Cluster {
        let rng = Box::new(StdRng::seed_from_u64(seed));
        Self::build(config, Delivery::Random { seed, rng })
    }

    fn build(config: Config, delivery: Delivery) -> Cluster {
        let mut map = OsdMap::new_dev(config.osd_count);
        let mut shards = BTreeMap::new();
        for id in 0..config.osd_count {
            let osd = OsdId(id);
            let count = config
                .shards_of
                .get(&osd)
                .copied()
                .unwrap_or(config.shards_per_osd);
            let addrs: Vec<SocketAddr> = (0..count)
                .map(|index| SocketAddr::from(([127, 0, 0, 1], 6800 + id as u16 * 16 + index)))
                .collect();
            map.boot_osd(osd, addrs, format!("host{id}")).expect("boot");
            for index in 0..count {
                let store = match config.capacity_bytes_of.get(&osd) {
                    Some(&capacity) => MemStore::with_capacity_bytes(capacity),
                    None => MemStore::new(),
                };
                let mut shard = OsdShard::new(osd, ShardIndex(index), count, store);
                shard.set_tuning(config.tuning);
                shards.insert((osd, ShardIndex(index)), shard);
            }
        }
        let mut spec = PoolSpec::replicated("test", config.size, config.pg_num);
        spec.min_size = config.min_size;
        let pool = map.create_pool(spec).expect("create pool");
        map.epoch = map.epoch.next();
        record_alive(&mut map);
        let mut cluster = Cluster {
            map: Arc::new(map),
            pool,
            shards,
            links: BTreeMap::new(),
            next_seq: 0,
            partitioned: BTreeSet::new(),
            replies: Vec::new(),
            delivery,
            next_tid: 1,
            client_id: 7,
            delivered_total: 0,
            dropped_total: 0,
            history: HistoryTracker::default(),
            grant_up_thru: true,
            tuning: config.tuning,
            origin: Instant::now(),
            elapsed: Duration::ZERO,
        };
        cluster.history = HistoryTracker::new(&cluster.map);
        let all: Vec<OsdId> = cluster.osds();
        cluster.deliver_map_to(&all);
        // Let every PG peer and activate, as a real cluster does before serving.
        cluster.run();
        cluster
    }

    /// The seed of a random delivery order (print it when a check fails).
    pub fn seed(&self) -> Option<u64> {
        match &self.delivery {
            Delivery::Fifo => None,
            Delivery::Random { seed, .. } => Some(*seed),
        }
    }

    pub fn osds(&self) -> Vec<OsdId> {
        let set: BTreeSet<OsdId> = self.shards.keys().map(|(osd, _)| *osd).collect();
        set.into_iter().collect()
    }

    // --- maps ---------------------------------------------------------------------

    /// Makes a new map epoch with `change` applied, and gives it to every shard of
    /// every OSD that is not partitioned.
    pub fn change_map(&mut self, change: impl FnOnce(&mut OsdMap)) -> Epoch {
        let reachable: Vec<OsdId> = self
            .osds()
            .into_iter()
            .filter(|osd| !self.partitioned.contains(osd))
            .collect();
        self.change_map_for(&reachable, change)
    }

    /// Makes a new map epoch but gives it only to `osds` (the others get it with
    /// [`Cluster::deliver_map_to`]).
    pub fn change_map_for(&mut self, osds: &[OsdId], change: impl FnOnce(&mut OsdMap)) -> Epoch {
        let mut map = (*self.map).clone();
        change(&mut map);
        map.epoch = map.epoch.next();
        if self.grant_up_thru {
            record_alive(&mut map);
        }
        // Past intervals as the monitor records them (never trimmed here: conservative).
        self.history.advance(&self.map, &mut map);
        self.map = Arc::new(map);
        self.deliver_map_to(osds);
        self.map.epoch
    }

    /// A new map recording `osd` alive through the current epoch (the monitor's answer
    /// to a primary's `up_thru` request).
    pub fn record_up_thru(&mut self, osd: OsdId) -> Epoch {
        let epoch = self.map.epoch;
        self.change_map(|map| map.raise_up_thru(osd, epoch).expect("osd exists"))
    }

    /// Gives the newest map to every shard of `osds`.
    pub fn deliver_map_to(&mut self, osds: &[OsdId]) {
        let addrs: Vec<Addr> = self
            .shards
            .keys()
            .copied()
            .filter(|(osd, _)| osds.contains(osd))
            .collect();
        for addr in addrs {
            let mut out = Vec::new();
            let map = self.map.clone();
            self.shard_mut(addr).handle_map(map, &mut out);
            self.route(addr, out);
        }
    }

    pub fn mark_down(&mut self, osd: OsdId) -> Epoch {
        self.change_map(|map| map.mark_down(osd).expect("osd exists"))
    }

    /// The OSD stops: nothing reaches it or leaves it, and the map marks it down.
    pub fn crash(&mut self, osd: OsdId) -> Epoch {
        self.partition(osd);
        self.mark_down(osd)
    }

    /// Cuts `osd` off: messages queued to or from it are lost, and so are later ones.
    pub fn partition(&mut self, osd: OsdId) {
        self.partitioned.insert(osd);
        self.drop_where(|env| env.from.0 == osd || env.to.0 == osd);
    }

    pub fn heal(&mut self, osd: OsdId) {
        self.partitioned.remove(&osd);
    }

    /// The OSD reconnects and boots again (with whatever its store still holds).
    pub fn revive(&mut self, osd: OsdId) -> Epoch {
        self.heal(osd);
        let info = self.map.osd(osd).expect("osd in map").clone();
        self.change_map(|map| {
            map.boot_osd(osd, info.shard_addrs, info.host)
                .expect("boot")
        })
    }

    /// The OSD process restarts: its shards are rebuilt on their stores (or on empty
    /// stores with `wipe`, as a MemStore OSD comes back), it boots again, and the new
    /// map reaches everyone.
    pub fn restart(&mut self, osd: OsdId, wipe: bool) -> Epoch {
        self.restart_process(osd, wipe);
        self.revive(osd)
    }

    /// The OSD process crashes and starts again with no map, and stays cut off: the
    /// test decides which maps it gets (and when its boot is published).
    pub fn restart_process(&mut self, osd: OsdId, wipe: bool) {
        self.crash(osd);
        let keys: Vec<Addr> = self
            .shards
            .keys()
            .copied()
            .filter(|(o, _)| *o == osd)
            .collect();
        let count = keys.len() as u16;
        for key in keys {
            let old = self.shards.remove(&key).expect("shard exists");
            let store = if wipe {
                MemStore::new()
            } else {
                old.into_store()
            };
            let mut shard = OsdShard::new(osd, key.1, count, store);
            shard.set_tuning(self.tuning);
            self.shards.insert(key, shard);
        }
    }

    // --- placement ----------------------------------------------------------------

    pub fn pg_of(&self, name: &str) -> PgId {
        self.map.object_to_pg(self.pool, name).expect("pool exists")
    }

    pub fn acting(&self, pgid: PgId) -> Vec<OsdId> {
        self.map.pg_mapping(pgid).expect("pool exists").acting
    }

    pub fn primary_of(&self, pgid: PgId) -> OsdId {
        self.map
            .pg_mapping(pgid)
            .expect("pool exists")
            .primary
            .expect("PG has a primary")
    }

    /// The shard of `osd` that owns `pgid`.
    pub fn addr(&self, osd: OsdId, pgid: PgId) -> Addr {
        let count = self.map.osd(osd).expect("osd in map").shard_count();
        (osd, pg_shard(pgid, count))
    }

    pub fn shard(&self, addr: Addr) -> &OsdShard<MemStore> {
        self.shards.get(&addr).expect("no such shard")
    }

    /// The shard, given the current virtual time first (as every driver does).
    pub fn shard_mut(&mut self, addr: Addr) -> &mut OsdShard<MemStore> {
        let now = self.now();
        let shard = self.shards.get_mut(&addr).expect("no such shard");
        shard.set_clock(now);
        shard
    }

    pub fn now(&self) -> Instant {
        self.origin + self.elapsed
    }

    /// Moves time on by `by` and ticks every reachable shard (lease renewals, ops
    /// held for a lease), queueing what they send.
    pub fn advance(&mut self, by: Duration) {
        self.elapsed += by;
        let addrs: Vec<Addr> = self
            .shards
            .keys()
            .copied()
            .filter(|(osd, _)| !self.partitioned.contains(osd))
            .collect();
        for addr in addrs {
            let mut out = Vec::new();
            let now = self.now();
            self.shard_mut(addr).tick(now, &mut out);
            self.route(addr, out);
        }
    }

    /// Whether a reachable primary holds ops for its read lease (`wait`, `laggy`).
    pub fn lease_held(&self) -> bool {
        let held = PgState::WAIT | PgState::LAGGY;
        self.shards
            .iter()
            .filter(|((osd, _), _)| !self.partitioned.contains(osd))
            .flat_map(|(_, shard)| shard.pg_stats())
            .any(|stat| stat.state.0 & held != 0)
    }

    /// The store of the shard of `osd` that owns `pgid`.
    pub fn store(&self, osd: OsdId, pgid: PgId) -> &MemStore {
        self.shard(self.addr(osd, pgid)).store()
    }

    /// Simulates media decay of `osd`'s copy of object `name`: its data reads fail
    /// with `Corrupt` until the object is removed (a repair replaces it).
    pub fn decay(&mut self, osd: OsdId, name: &str) {
        let pgid = self.pg_of(name);
        let addr = self.addr(osd, pgid);
        let coll = CollectionId::Pg(pgid);
        (self.shard_mut(addr).store_mut())
            .inject_decay(coll, &ObjectId::head(name))
            .expect("the object exists there");
    }

    /// `osd`'s copy of object `name` vanishes behind the PG's back (a store bug, or an
    /// operator's mistake): its log still says the object exists there.
    pub fn lose(&mut self, osd: OsdId, name: &str) {
        self.tamper_with(osd, name, |tx, coll, oid| tx.remove(coll, oid));
    }

    /// Writes `data` at `offset` into `osd`'s copy of `name` behind the PG's back (no
    /// log entry, no new version): a copy that is intact and wrong. Creates the object
    /// if the copy has none.
    pub fn tamper(&mut self, osd: OsdId, name: &str, offset: u64, data: &[u8]) {
        let data = bytes(data);
        self.tamper_with(osd, name, |tx, coll, oid| tx.write(coll, oid, offset, data));
    }

    /// Applies what `change` adds to a transaction to `osd`'s copy of `name`, behind
    /// the PG's back (no log entry, no new version).
    pub fn tamper_with(
        &mut self,
        osd: OsdId,
        name: &str,
        change: impl FnOnce(&mut carmine_store::Transaction, CollectionId, ObjectId),
    ) {
        let pgid = self.pg_of(name);
        let addr = self.addr(osd, pgid);
        let mut tx = carmine_store::Transaction::new();
        change(&mut tx, CollectionId::Pg(pgid), ObjectId::head(name));
        (self.shard_mut(addr).store_mut())
            .submit(tx)
            .expect("a change the MemStore can apply");
    }

    /// The counters of every shard of `osd`, summed.
    pub fn counters(&self, osd: OsdId) -> carmine_osd::ShardCounters {
        let mut sum = carmine_osd::ShardCounters::default();
        for (_, shard) in self.shards.iter().filter(|(addr, _)| addr.0 == osd) {
            let c = shard.counters();
            sum.corrupt_copies_found_total += c.corrupt_copies_found_total;
            sum.copies_repaired_total += c.copies_repaired_total;
            sum.scrub_objects_compared_total += c.scrub_objects_compared_total;
            sum.scrub_replica_copies_differing_total += c.scrub_replica_copies_differing_total;
            sum.scrub_own_copies_lost_total += c.scrub_own_copies_lost_total;
        }
        sum
    }

    /// Runs one deep-scrub step on every shard of `osd` and queues what it sends.
    pub fn scrub(&mut self, osd: OsdId) {
        self.scrub_bounded(osd, 10_000, u64::MAX);
    }

    /// One deep-scrub step of at most `objects_max` objects and `bytes_max` bytes on
    /// every shard of `osd`.
    pub fn scrub_bounded(&mut self, osd: OsdId, objects_max: usize, bytes_max: u64) {
        let addrs: Vec<Addr> = self.shards.keys().copied().filter(|a| a.0 == osd).collect();
        for addr in addrs {
            let mut out = Vec::new();
            self.shard_mut(addr)
                .scrub_step(objects_max, bytes_max, &mut out);
            self.route(addr, out);
        }
    }

    /// The primary's report on `pgid`.
    pub fn pg_stat(&self, pgid: PgId) -> PgStat {
        let addr = self.addr(self.primary_of(pgid), pgid);
        self.shard(addr)
            .pg_stats()
            .into_iter()
            .find(|stat| stat.pgid == pgid)
            .expect("primary reports its PG")
    }

    /// The state the PG's primary reports.
    pub fn pg_state(&self, pgid: PgId) -> PgState {
        self.pg_stat(pgid).state
    }

    /// Moves time on a tick at a time (the network run dry after each) until the PG's
    /// state has `wanted`; returns how many ticks that took. Panics if it never does
    /// within [`RESEND_TICKS_MAX`].
    pub fn tick_until(&mut self, pgid: PgId, wanted: u32) -> usize {
        for ticks in 0..RESEND_TICKS_MAX {
            if self.pg_state(pgid).contains(wanted) {
                return ticks;
            }
            self.advance(TICK);
            self.run_network();
        }
        panic!(
            "{pgid} still {} after {RESEND_TICKS_MAX} ticks",
            self.pg_state(pgid).name()
        );
    }

    // --- the client ---------------------------------------------------------------

    /// A request as a client holding the newest map builds it.
    pub fn op(&mut self, name: &str, ops: Vec<OpCode>) -> OsdOp {
        let tid = self.next_tid;
        self.next_tid += 1;
        OsdOp {
            reqid: ReqId {
                client: self.client_id,
                tid,
            },
            pgid: self.pg_of(name),
            oid: name.to_string(),
            map_epoch: self.map.epoch,
            flags: 0,
            mtime_ns: 1_000_000 * tid,
            ops,
            snapc: Default::default(),
            snapid: carmine_types::SnapId::HEAD,
        }
    }

    /// The shard a client with the newest map sends `op` to.
    pub fn target(&self, op: &OsdOp) -> Addr {
        self.addr(self.primary_of(op.pgid), op.pgid)
    }

    /// Sends `op` to its primary, as the default client.
    pub fn send(&mut self, op: OsdOp) -> ReqId {
        let to = self.target(&op);
        self.send_to(to, CLIENT, op)
    }

    /// Sends `op` to shard `to` on client connection `client`.
    pub fn send_to(&mut self, to: Addr, client: ClientRef, op: OsdOp) -> ReqId {
        let reqid = op.reqid;
        if self.partitioned.contains(&to.0) {
            self.dropped_total += 1;
            return reqid;
        }
        let mut out = Vec::new();
        self.shard_mut(to).handle_client_op(client, op, &mut out);
        self.route(to, out);
        reqid
    }

    /// Sends, runs the network dry, and returns the one reply.
    pub fn call(&mut self, name: &str, ops: Vec<OpCode>) -> OsdOpReply {
        let op = self.op(name, ops);
        self.call_op(op)
    }

    pub fn call_op(&mut self, op: OsdOp) -> OsdOpReply {
        let reqid = self.send(op);
        self.run();
        let mut replies = self.take_replies_for(reqid);
        assert_eq!(
            replies.len(),
            1,
            "expected one reply to {reqid}: {replies:?}"
        );
        replies.pop().expect("one reply")
    }

    /// A read served by `osd`'s own copy, whatever its role.
    pub fn local_read(&mut self, osd: OsdId, name: &str, ops: Vec<OpCode>) -> OsdOpReply {
        let mut op = self.op(name, ops);
        op.flags |= OsdOp::FLAG_LOCAL_READ;
        let to = self.addr(osd, op.pgid);
        let reqid = self.send_to(to, CLIENT, op);
        let mut replies = self.take_replies_for(reqid);
        assert_eq!(replies.len(), 1, "local reads answer at once: {replies:?}");
        replies.pop().expect("one reply")
    }

    /// What `osd`'s own copy of `name` holds; `None` when it has no such object.
    pub fn local_data(&mut self, osd: OsdId, name: &str) -> Option<Vec<u8>> {
        let read = OpCode::Read {
            offset: 0,
            length: 0,
        };
        let reply = self.local_read(osd, name, vec![read]);
        match (reply.result, reply.outputs.first()) {
            (Ok(()), Some(carmine_proto::OpOutput::Data(data))) => Some(data.to_vec()),
            (Err(carmine_proto::OpError::NotFound), _) => None,
            other => panic!("local read of {name} on {osd}: {other:?}"),
        }
    }

    /// Every reply received so far, in arrival order.
    pub fn replies(&self) -> &[(ClientRef, OsdOpReply)] {
        &self.replies
    }

    pub fn take_replies(&mut self) -> Vec<OsdOpReply> {
        self.replies.drain(..).map(|(_, reply)| reply).collect()
    }

    pub fn take_replies_for(&mut self, reqid: ReqId) -> Vec<OsdOpReply> {
        let (mine, rest) = std::mem::take(&mut self.replies)
            .into_iter()
            .partition(|(_, reply)| reply.reqid == reqid);
        self.replies = rest;
        mine.into_iter().map(|(_, reply)| reply).collect()
    }

    pub fn has_reply(&self, reqid: ReqId) -> bool {
        self.replies.iter().any(|(_, reply)| reply.reqid == reqid)
    }

    /// Moves time on by `ticks` ticks of 100 ms, running the network after each.
    pub fn run_ticks(&mut self, ticks: u32) {
        for _ in 0..ticks {
            self.advance(Duration::from_millis(100));
            self.run();
        }
    }

    /// Moves time on in 100 ms ticks, at most `ticks_max` of them, until `reqid` has
    /// an answer; returns its answers (none if it never came).
    pub fn await_replies(&mut self, reqid: ReqId, ticks_max: u32) -> Vec<OsdOpReply> {
        for _ in 0..ticks_max {
            if self.has_reply(reqid) {
                break;
            }
            self.advance(Duration::from_millis(100));
            self.run();
        }
        self.take_replies_for(reqid)
    }

    // --- the network --------------------------------------------------------------

    fn route(&mut self, from: Addr, out: Vec<Output>) {
        for output in out {
            match output {
                Output::Client(client, Msg::OsdOpReply(reply)) => {
                    self.replies.push((client, reply));
                }
                Output::Client(client, other) => {
                    panic!("{from:?} sent client {client} a {other:?}")
                }
                Output::Peer(osd, shard, msg) => self.enqueue(from, (osd, shard), msg),
            }
        }
    }

    fn enqueue(&mut self, from: Addr, to: Addr, msg: Msg) {
        assert!(
            self.shards.contains_key(&to),
            "{from:?} sent to unknown shard {to:?}"
        );
        if self.partitioned.contains(&from.0) || self.partitioned.contains(&to.0) {
            self.dropped_total += 1;
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let envelope = Envelope { seq, from, to, msg };
        self.links
            .entry((from, to))
            .or_default()
            .push_back(envelope);
    }

    fn deliver(&mut self, envelope: Envelope) {
        // `HARNESS_TRACE=1 cargo test … -- --nocapture` prints each message delivered
        // (leases aside), cut at 300 characters: a failing test's story.
        if std::env::var_os("HARNESS_TRACE").is_some() {
            let text = format!("{:?}", envelope.msg);
            if !text.starts_with("PgLease") {
                eprintln!(
                    "{:?} -> {:?}: {}",
                    envelope.from,
                    envelope.to,
                    &text[..text.len().min(300)]
                );
            }
        }
        if self.partitioned.contains(&envelope.from.0) || self.partitioned.contains(&envelope.to.0)
        {
            self.dropped_total += 1;
            return;
        }
        self.delivered_total += 1;
        let mut out = Vec::new();
        let to = envelope.to;
        self.shard_mut(to)
            .handle_peer_message(envelope.from.0, envelope.msg, &mut out);
        self.route(to, out);
    }

    fn pop_link(&mut self, link: (Addr, Addr)) -> Envelope {
        let queue = self.links.get_mut(&link).expect("link exists");
        let envelope = queue.pop_front().expect("link is not empty");
        if queue.is_empty() {
            self.links.remove(&link);
        }
        envelope
    }

    /// Delivers one message as the delivery order says; false when none is queued.
    pub fn step(&mut self) -> bool {
        if self.links.is_empty() {
            return false;
        }
        let link = match &mut self.delivery {
            Delivery::Fifo => {
                *self
                    .links
                    .iter()
                    .min_by_key(|(_, queue)| queue.front().expect("non-empty").seq)
                    .expect("non-empty")
                    .0
            }
            Delivery::Random { rng, .. } => {
                let index = rng.gen_range(0..self.links.len());
                *self.links.keys().nth(index).expect("in range")
            }
        };
        let envelope = self.pop_link(link);
        self.deliver(envelope);
        true
    }

    /// One runtime turn on every reachable shard (`OsdShard::flush`: background work
    /// such as snapshot trimming), then the network run dry. Returns how many
    /// messages were delivered.
    pub fn turn(&mut self) -> usize {
        let addrs: Vec<Addr> = self
            .shards
            .keys()
            .copied()
            .filter(|(osd, _)| !self.partitioned.contains(osd))
            .collect();
        for addr in addrs {
            let mut out = Vec::new();
            self.shard_mut(addr).flush(&mut out);
            self.route(addr, out);
        }
        self.run()
    }

    /// Delivers until nothing is queued, moving time on while a PG waits for its
    /// read lease (up to [`TICKS_PER_RUN_MAX`] ticks); returns how many were
    /// delivered.
    pub fn run(&mut self) -> usize {
        let mut count = self.run_network();
        for _ in 0..TICKS_PER_RUN_MAX {
            if !self.lease_held() {
                break;
            }
            self.advance(TICK);
            count += self.run_network();
        }
        count
    }

    /// Delivers until nothing is queued, without moving time.
    pub fn run_network(&mut self) -> usize {
        let mut count = 0;
        while self.step() {
            count += 1;
            assert!(
                count < DELIVERIES_PER_RUN_MAX,
                "livelock (seed {:?})",
                self.seed()
            );
        }
        count
    }

    /// Delivers, keeping each link's order, every message at a link's head that
    /// matches `wanted` (and those that become heads), until none does.
    pub fn deliver_where(&mut self, mut wanted: impl FnMut(&Envelope) -> bool) -> usize {
        let mut count = 0;
        loop {
            let link = self
                .links
                .iter()
                .filter(|(_, queue)| wanted(queue.front().expect("non-empty")))
                .min_by_key(|(_, queue)| queue.front().expect("non-empty").seq)
                .map(|(link, _)| *link);
            let Some(link) = link else { return count };
            let envelope = self.pop_link(link);
            self.deliver(envelope);
            count += 1;
            assert!(count < DELIVERIES_PER_RUN_MAX, "livelock");
        }
    }

    /// Delivers the oldest message matching `wanted` wherever it sits in its link,
    /// overtaking the messages ahead of it (a reordering fault). False if none.
    pub fn deliver_out_of_order(&mut self, mut wanted: impl FnMut(&Envelope) -> bool) -> bool {
        let found = self
            .links
            .iter()
            .flat_map(|(link, queue)| queue.iter().enumerate().map(move |(i, e)| (*link, i, e)))
            .filter(|(_, _, envelope)| wanted(envelope))
            .min_by_key(|(_, _, envelope)| envelope.seq)
            .map(|(link, index, _)| (link, index));
        let Some((link, index)) = found else {
            return false;
        };
        let queue = self.links.get_mut(&link).expect("found");
        let envelope = queue.remove(index).expect("found");
        if queue.is_empty() {
            self.links.remove(&link);
        }
        self.deliver(envelope);
        true
    }

    /// Queues `msg` from `from` to `to` as if just sent (a test replays a message it
    /// took out of the network earlier: a late delivery).
    pub fn inject(&mut self, from: Addr, to: Addr, msg: Msg) {
        self.enqueue(from, to, msg);
    }

    /// Takes every queued message matching `wanted` out of the network, in send order.
    pub fn take_where(&mut self, mut wanted: impl FnMut(&Envelope) -> bool) -> Vec<Envelope> {
        let mut taken = Vec::new();
        for queue in self.links.values_mut() {
            let (matching, rest): (VecDeque<Envelope>, VecDeque<Envelope>) =
                queue.drain(..).partition(|envelope| wanted(envelope));
            taken.extend(matching);
            *queue = rest;
        }
        self.links.retain(|_, queue| !queue.is_empty());
        taken.sort_by_key(|envelope| envelope.seq);
        taken
    }

    /// Loses every queued message matching `lost`; returns how many.
    pub fn drop_where(&mut self, mut lost: impl FnMut(&Envelope) -> bool) -> usize {
        let mut count = 0;
        for queue in self.links.values_mut() {
            let before = queue.len();
            queue.retain(|envelope| !lost(envelope));
            count += before - queue.len();
        }
        self.links.retain(|_, queue| !queue.is_empty());
        self.dropped_total += count as u64;
        count
    }

    /// Queued messages, oldest first.
    pub fn pending(&self) -> Vec<&Envelope> {
        let mut all: Vec<&Envelope> = self.links.values().flatten().collect();
        all.sort_by_key(|envelope| envelope.seq);
        all
    }

    pub fn pending_count(&self) -> usize {
        self.links.values().map(VecDeque::len).sum()
    }

    // --- checking copies ----------------------------------------------------------

    /// Everything `osd` holds for `pgid`, the PG metadata object included.
    pub fn dump_pg(&self, osd: OsdId, pgid: PgId) -> PgDump {
        dump_collection(self.store(osd, pgid), CollectionId::Pg(pgid))
    }

    /// Panics unless every acting member of `pgid` holds the same objects, byte for
    /// byte (data, mtime, xattrs, omap), and the same PG log. (The PG info differs per
    /// copy: each records when it was created.)
    pub fn assert_replicas_identical(&self, pgid: PgId) {
        let acting = self.acting(pgid);
        let first = comparable(self.dump_pg(acting[0], pgid));
        for &osd in &acting[1..] {
            let other = comparable(self.dump_pg(osd, pgid));
            assert_pg_dumps_equal(&first, &other, acting[0], osd, pgid);
        }
    }

    /// [`Cluster::assert_replicas_identical`] for every PG of the pool.
    pub fn assert_all_replicas_identical(&self) {
        let pgs: Vec<PgId> = self.map.all_pgs().collect();
        for pgid in pgs {
            self.assert_replicas_identical(pgid);
        }
    }
}

/// A dump with the metadata object reduced to its PG log entries.
fn comparable(mut dump: PgDump) -> PgDump {
    if let Some(meta) = dump.get_mut("") {
        meta.omap.retain(|(key, _)| key.starts_with(b"log."));
    }
    dump
}

/// One object as a store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectDump {
    pub size_bytes: u64,
    pub mtime_ns: u64,
    pub data: Bytes,
    pub xattrs: BTreeMap<String, Bytes>,
    pub omap: Vec<(Bytes, Bytes)>,
}

/// A PG's objects by name (the metadata object is the empty name).
pub type PgDump = BTreeMap<String, ObjectDump>;

pub fn dump_collection(store: &MemStore, coll: CollectionId) -> PgDump {
    let mut dump = PgDump::new();
    if !store.collection_exists(coll) {
        return dump;
    }
    let mut after: Option<ObjectId> = None;
    loop {
        let page = store
            .list_objects(coll, after.as_ref(), 256)
            .expect("collection exists");
        let Some(last) = page.last().cloned() else {
            return dump;
        };
        for oid in page {
            let stat = store.stat(coll, &oid).expect("listed");
            let object = ObjectDump {
                size_bytes: stat.size_bytes,
                mtime_ns: stat.mtime_ns,
                data: store.read(coll, &oid, 0, stat.size_bytes).expect("listed"),
                xattrs: store.getxattrs(coll, &oid).expect("listed"),
                omap: store
                    .omap_list(coll, &oid, None, usize::MAX)
                    .expect("listed"),
            };
            // Heads by name, snapshot clones as `name@clone`.
            dump.insert(oid.to_string(), object);
        }
        after = Some(last);
    }
}

pub fn assert_pg_dumps_equal(a: &PgDump, b: &PgDump, osd_a: OsdId, osd_b: OsdId, pgid: PgId) {
    let names_a: Vec<&String> = a.keys().collect();
    let names_b: Vec<&String> = b.keys().collect();
    assert_eq!(names_a, names_b, "{pgid}: objects on {osd_a} vs {osd_b}");
    for (name, object) in a {
        assert_eq!(
            Some(object),
            b.get(name),
            "{pgid}: object {name:?} on {osd_a} vs {osd_b}"
        );
    }
}

/// Shorthand for byte payloads.
pub fn bytes(data: &[u8]) -> Bytes {
    Bytes::copy_from_slice(data)
}

/// Finds an object name (with `prefix`) whose PG's acting set satisfies `accept`.
pub fn name_where(cluster: &Cluster, prefix: &str, accept: impl Fn(PgId) -> bool) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|name| accept(cluster.pg_of(name)))
        .expect("some name maps as wanted")
}

/// `count` distinct object names that all hash to `pgid`.
pub fn names_in_pg(cluster: &Cluster, pgid: PgId, prefix: &str, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..100_000)
        .map(|i| format!("{prefix}{i}"))
        .filter(|name| cluster.pg_of(name) == pgid)
        .take(count)
        .collect();
    assert_eq!(names.len(), count, "not enough names in {pgid}");
    names
}

/// Writes `content` as the whole of object `name` through the cluster; panics unless
/// it succeeds.
pub fn write(cluster: &mut Cluster, name: &str, content: &str) {
    let data = bytes(content.as_bytes());
    let reply = cluster.call(name, vec![OpCode::WriteFull { data }]);
    assert_eq!(reply.result, Ok(()), "write {name}");
}

/// Reads the whole of object `name` through the cluster; panics unless it succeeds.
pub fn read(cluster: &mut Cluster, name: &str) -> Vec<u8> {
    let reply = cluster.call(
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    match (reply.result, reply.outputs.first()) {
        (Ok(()), Some(carmine_proto::OpOutput::Data(data))) => data.to_vec(),
        other => panic!("read {name}: {other:?}"),
    }
}

/// Reads the whole of object `name` as it was at snapshot `snap` (the head at
/// `SnapId::HEAD`) through the cluster.
pub fn read_at(
    cluster: &mut Cluster,
    name: &str,
    snap: carmine_types::SnapId,
) -> Result<Vec<u8>, carmine_proto::OpError> {
    let mut op = cluster.op(
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    op.snapid = snap;
    let reply = cluster.call_op(op);
    reply.result?;
    match reply.outputs.first() {
        Some(carmine_proto::OpOutput::Data(data)) => Ok(data.to_vec()),
        other => panic!("read {name}: {other:?}"),
    }
}

/// `osd` boots again and leads `pgid` through a pg_temp of `osd` then `others` (the
/// monitor would grant one for other reasons; here it just makes `osd` the primary).
pub fn boot_as_primary(cluster: &mut Cluster, pgid: PgId, osd: OsdId, others: &[OsdId]) {
    cluster.heal(osd);
    let info = cluster.map.osd(osd).expect("in map").clone();
    let mut temp = vec![osd];
    temp.extend_from_slice(others);
    cluster.change_map(|map| {
        if !map.is_up(osd) {
            map.boot_osd(osd, info.shard_addrs, info.host).unwrap();
        }
        map.set_pg_temp(pgid, temp).unwrap();
    });
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), osd);
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean+remapped");
}

/// The OSD [`cluster_with_one_out`] keeps out: the fifth.
pub const NEWCOMER: carmine_types::OsdId = carmine_types::OsdId(4);

/// Five OSDs, [`NEWCOMER`] out (and never a primary, so every PG that gains it backfills
/// it as a replica), 12 PGs of 3 copies, 120 objects written, logs of 8 entries (so the
/// newcomer's old copies are no longer covered: they are backfilled, not recovered from
/// the log), one backfill per OSD. Time stands still unless a test ticks, so the
/// recovery scheduler's rates are off ([`tuning`]).
pub fn cluster_with_one_out() -> (Cluster, Vec<String>) {
    let tuning = OsdTuning {
        max_backfills: 1,
        log_entries_max: 8,
        ..tuning()
    };
    let mut cluster = Cluster::new(Config {
        osd_count: 5,
        pg_num: 12,
        tuning,
        ..Config::default()
    });
    cluster.change_map(|map| {
        map.reweight(NEWCOMER, 0).unwrap();
        map.set_primary_affinity(NEWCOMER, 0).unwrap();
    });
    cluster.run();
    let names: Vec<String> = (0..120).map(|i| format!("obj-{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    (cluster, names)
}

/// Records every up OSD alive through `map`'s epoch.
fn record_alive(map: &mut OsdMap) {
    let epoch = map.epoch;
    let up: Vec<OsdId> = map.osds.values().filter(|o| o.up).map(|o| o.id).collect();
    for osd in up {
        map.raise_up_thru(osd, epoch).expect("listed above");
    }
}
