//! A size-3 write through three OSD shards in one process: the primary's and both
//! replicas' PG code, every message encoded and decoded as the wire carries it, but no
//! sockets, messenger or runtime. What `direct_bench` is for one OSD, this is for a
//! replicated write, so that `valgrind --tool=callgrind` can count the OSD side of the
//! cluster benchmark (`carmine bench POOL write` on a size-3 pool) without the noise
//! of a shared machine.
//!
//! `cargo run --release -p carmine-osd --example replicated_bench -- [OPS] [PGS] [MODE]`
//!
//! OPS (100,000) 4 KiB `write_full`s, one in flight, over PGS (32) PGs. MODE `new`
//! (the default) names a new object per write, as `carmine bench` does; `overwrite`
//! cycles through 1,024 objects; `image` first fills 64 objects of 4 MiB (256 MiB per
//! OSD, not timed) and then writes 4 KiB at pseudo-random aligned offsets in them, as
//! fio's random writes to a prefilled image do (every receiver gets its own copy of a
//! message's data there, so MemStore overwrites in place as it does behind sockets).
//! Instructions per write =
//! (Ir at 2N ops − Ir at N ops) / N. A line per 20,000 writes shows the step when the
//! PG logs fill (PGS × 3,000 entries). For timings, run it with the daemon's allocator
//! settings (`carmine_rt::malloc`): `MIMALLOC_PURGE_DELAY=10000
//! MIMALLOC_ARENA_PURGE_MULT=10`; with mimalloc's default 10 ms, a full log's freed
//! entries are purged and faulted in again, which the daemon does not do.

/// The allocator the `carmine` binary runs on (`carmine_rt::malloc`), so that the counts
/// here are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bytes::Bytes;
use carmine_clustermap::{OsdMap, PoolSpec};
use carmine_osd::{OsdShard, Output, TICK_INTERVAL};
use carmine_proto::{Msg, OpCode, OsdOp, RepOpEncoder};
use carmine_store::MemStore;
use carmine_types::{OsdId, PgId, PoolId, ReqId, ShardIndex, SnapId};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const OSD_COUNT: u32 = 3;
const CLIENT: u64 = 1;
/// Virtual time each write takes: leases renew from the shard tick as they would.
const TIME_PER_WRITE: Duration = Duration::from_micros(50);

struct Cluster {
    map: Arc<OsdMap>,
    pool: PoolId,
    shards: Vec<OsdShard<MemStore>>,
    /// Messages in flight: (from, to, type, front, data), FIFO.
    wire: VecDeque<(OsdId, OsdId, u16, Bytes, Bytes)>,
    replies: usize,
    /// Each PG's primary (CRUSH once per PG, not per write).
    primaries: HashMap<PgId, OsdId>,
    origin: Instant,
    elapsed: Duration,
    since_tick: Duration,
    /// As the runtime does: a write's replicas share one encoding.
    encoder: RepOpEncoder,
    /// Every receiver gets its own copy of a message's data ([`Cluster::own_copy`]).
    own_copies: bool,
}

impl Cluster {
    fn new(pg_num: u32) -> Self {
        let mut map = OsdMap::new_dev(OSD_COUNT);
        let mut shards = Vec::new();
        for id in 0..OSD_COUNT {
            let addr = SocketAddr::from(([127, 0, 0, 1], 6800 + id as u16));
            map.boot_osd(OsdId(id), vec![addr], format!("host{id}"))
                .expect("boot");
            shards.push(OsdShard::new(OsdId(id), ShardIndex(0), 1, MemStore::new()));
        }
        let pool = map
            .create_pool(PoolSpec::replicated("bench", 3, pg_num))
            .expect("create pool");
        map.epoch = map.epoch.next();
        // No monitor here: the map records every OSD alive, as one would when asked.
        for id in 0..OSD_COUNT {
            map.raise_up_thru(OsdId(id), map.epoch).expect("booted");
        }
        let mut cluster = Cluster {
            map: Arc::new(map),
            pool,
            shards,
            wire: VecDeque::new(),
            replies: 0,
            primaries: HashMap::new(),
            origin: Instant::now(),
            elapsed: Duration::ZERO,
            since_tick: Duration::ZERO,
            encoder: RepOpEncoder::default(),
            own_copies: false,
        };
        for id in 0..OSD_COUNT {
            let mut out = Vec::new();
            let now = cluster.now();
            let shard = &mut cluster.shards[id as usize];
            shard.set_clock(now);
            shard.handle_map(cluster.map.clone(), &mut out);
            cluster.route(OsdId(id), out);
        }
        // Peering, then leases: a few ticks' worth of virtual time.
        for _ in 0..8 {
            cluster.pump();
            cluster.advance(TICK_INTERVAL);
        }
        cluster
    }

    fn now(&self) -> Instant {
        self.origin + self.elapsed
    }

    fn advance(&mut self, by: Duration) {
        self.elapsed += by;
        self.since_tick += by;
        if self.since_tick >= TICK_INTERVAL {
            self.since_tick = Duration::ZERO;
            let now = self.now();
            for id in 0..OSD_COUNT {
                let mut out = Vec::new();
                self.shards[id as usize].tick(now, &mut out);
                self.route(OsdId(id), out);
            }
            self.pump();
        }
    }

    /// Encodes every message as the runtime does, so the receiver decodes its own copy.
    fn route(&mut self, from: OsdId, out: Vec<Output>) {
        for output in out {
            match output {
                Output::Client(_, Msg::OsdOpReply(reply)) => {
                    assert!(reply.result.is_ok(), "write failed: {:?}", reply.result);
                    self.replies += 1;
                }
                Output::Client(..) => panic!("unexpected client message"),
                Output::Peer(to, _, msg) => {
                    let (front, data) = self.encoder.encode_parts(&msg);
                    let data = self.own_copy(data);
                    self.wire.push_back((from, to, msg.msg_type(), front, data));
                }
            }
        }
        self.encoder.clear();
    }

    /// What a receiver reads off its socket. With `own_copies` (`image` mode) it is a
    /// buffer of its own, as over TCP, so that MemStore can overwrite an object's data
    /// in place; otherwise the sender's buffer, shared (the figures recorded for the
    /// other modes were taken that way).
    fn own_copy(&self, data: Bytes) -> Bytes {
        if self.own_copies {
            Bytes::copy_from_slice(&data)
        } else {
            data
        }
    }

    /// Delivers until nothing is in flight; each delivery is one runtime turn.
    fn pump(&mut self) {
        while let Some((from, to, msg_type, front, data)) = self.wire.pop_front() {
            let msg = Msg::decode_parts(msg_type, front, data).expect("decodes");
            let mut out = Vec::new();
            let now = self.now();
            let shard = &mut self.shards[to.0 as usize];
            shard.set_clock(now);
            shard.handle_peer_message(from, msg, &mut out);
            shard.flush(&mut out);
            self.route(to, out);
        }
    }

    fn write(&mut self, tid: u64, name: &str, data: &Bytes) {
        self.submit(tid, name, OpCode::WriteFull { data: data.clone() });
    }

    fn submit(&mut self, tid: u64, name: &str, op_code: OpCode) {
        let pgid = self.map.object_to_pg(self.pool, name).expect("pool exists");
        let map = &self.map;
        let primary = *self.primaries.entry(pgid).or_insert_with(|| {
            let mapping = map.pg_mapping(pgid).expect("pool exists");
            mapping.primary.expect("a primary")
        });
        let op = OsdOp {
            reqid: ReqId {
                client: CLIENT,
                tid,
            },
            pgid,
            oid: name.to_string(),
            map_epoch: self.map.epoch,
            flags: 0,
            mtime_ns: 0,
            ops: vec![op_code],
            snapc: Default::default(),
            snapid: SnapId::HEAD,
        };
        // The client's message crosses the wire too.
        let msg = Msg::OsdOp(op);
        let (front, bytes) = msg.encode_parts();
        let bytes = self.own_copy(bytes);
        let msg = Msg::decode_parts(msg.msg_type(), front, bytes).expect("decodes");
        let Msg::OsdOp(op) = msg else { unreachable!() };
        let before = self.replies;
        let mut out = Vec::new();
        let now = self.now();
        let shard = &mut self.shards[primary.0 as usize];
        shard.set_clock(now);
        shard.handle_client_op(CLIENT, op, &mut out);
        shard.flush(&mut out);
        self.route(primary, out);
        self.pump();
        self.advance(TIME_PER_WRITE);
        assert_eq!(self.replies, before + 1, "write {tid} not answered");
    }
}

/// Writes per progress line.
const SEGMENT: u64 = 20_000;
/// `image` mode: the image's objects and their size.
const IMAGE_OBJECTS: u64 = 64;
const IMAGE_OBJECT_BYTES: u64 = 4 << 20;

fn main() {
    let mut args = std::env::args().skip(1);
    let ops: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let pg_num: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let mode = args.next().unwrap_or_default();
    let data = Bytes::from(vec![0x5a; 4096]);
    let mut cluster = Cluster::new(pg_num);
    cluster.own_copies = mode == "image";
    let image_name = |object: u64| format!("rbd_data.10226b8b4567.{object:016x}");
    if mode == "image" {
        let block = Bytes::from(vec![0xa5; IMAGE_OBJECT_BYTES as usize]);
        for object in 0..IMAGE_OBJECTS {
            cluster.write(u64::MAX - object, &image_name(object), &block);
        }
    }
    // xorshift64: the same offsets in every run.
    let mut random = 0x9e37_79b9_7f4a_7c15u64;
    let started = Instant::now();
    let mut segment_start = started;
    for tid in 1..=ops {
        match mode.as_str() {
            "image" => {
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                let object = random % IMAGE_OBJECTS;
                let offset = (random >> 32) % (IMAGE_OBJECT_BYTES / 4096) * 4096;
                let data = data.clone();
                cluster.submit(tid, &image_name(object), OpCode::Write { offset, data });
            }
            "overwrite" => cluster.write(tid, &image_name(tid % 1024), &data),
            _ => cluster.write(
                tid,
                &format!("benchmark_data_host0_4242_object{tid}"),
                &data,
            ),
        }
        if tid % SEGMENT == 0 {
            // Per-segment rates show the step when the PG logs fill (32 PGs × 3,000).
            let now = Instant::now();
            println!(
                "  writes {:>7}..{:<7} {:6.2} us/op",
                tid - SEGMENT,
                tid,
                (now - segment_start).as_secs_f64() * 1e6 / SEGMENT as f64
            );
            segment_start = now;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "size-3 writes: {:.0}/s ({:.2} us/op, {} messages left)",
        ops as f64 / elapsed,
        elapsed * 1e6 / ops as f64,
        cluster.wire.len()
    );
}
