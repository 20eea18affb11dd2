//! A direct, in-process client of one OSD shard (the role of CohortFS's libosd /
//! DirectMessenger): ops go straight into the shard's PG code with no network, no
//! messenger and no runtime, so benchmarks measure the OSD core alone.
//!
//! The shard serves a one-OSD cluster (pool size 1), so a write completes as soon as
//! its own store commits it. It is given the time as the runtime gives it: when the
//! turn's first op arrives and again before the turn's flush (a clock that advances
//! one microsecond per reading, so runs are deterministic).
//!
//! ```
//! use carmine_osd::DirectClient;
//! use carmine_proto::{OpCode, OpOutput};
//! use carmine_store::MemStore;
//!
//! let mut direct = DirectClient::new(MemStore::new(), 8);
//! let data = bytes::Bytes::from_static(b"hello");
//! direct.operate("greeting", vec![OpCode::WriteFull { data }]).unwrap();
//! let reply = direct.operate("greeting", vec![OpCode::Read { offset: 0, length: 0 }]).unwrap();
//! assert_eq!(reply.outputs, vec![OpOutput::Data(bytes::Bytes::from_static(b"hello"))]);
//! ```

use crate::{OsdShard, Output};
use carmine_clustermap::{pg_shard, OsdMap, PoolSpec};
use carmine_proto::{Msg, OpCode, OpError, OsdOp, OsdOpReply};
use carmine_store::ObjectStore;
use carmine_types::{Epoch, OsdId, PoolId, ReqId, ShardIndex};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The connection id the direct client's replies are addressed to.
const DIRECT_CLIENT: u64 = 1;

/// Submits ops to one shard of a one-OSD cluster, synchronously.
pub struct DirectClient<S: ObjectStore> {
    shard: OsdShard<S>,
    map: Arc<OsdMap>,
    pool: PoolId,
    index: ShardIndex,
    shard_count: u16,
    next_tid: u64,
    outputs: Vec<Output>,
    /// The time last given to the shard, and whether this turn has been given one.
    clock: Instant,
    clock_set: bool,
}

impl<S: ObjectStore> DirectClient<S> {
    /// A one-OSD cluster with a size-1 pool of `pg_num` PGs on `store`.
    pub fn new(store: S, pg_num: u32) -> Self {
        Self::for_shard(store, pg_num, ShardIndex(0), 1)
    }

    /// Shard `index` of a one-OSD cluster whose OSD runs `shard_count` shards; it
    /// serves only the PGs [`pg_shard`] gives it (see [`DirectClient::owns`]).
    pub fn for_shard(store: S, pg_num: u32, index: ShardIndex, shard_count: u16) -> Self {
        let mut map = OsdMap::new_dev(1);
        let addr = SocketAddr::from(([127, 0, 0, 1], 6800));
        map.boot_osd(OsdId(0), vec![addr], "host0".into())
            .expect("a fresh map takes osd.0");
        let pool = map
            .create_pool(PoolSpec::replicated("direct", 1, pg_num))
            .expect("a valid pool");
        map.epoch = Epoch(2);
        // No monitor here: the map records osd.0 alive, as one would when it asks.
        map.raise_up_thru(OsdId(0), map.epoch)
            .expect("osd.0 booted");
        let map = Arc::new(map);
        let mut shard = OsdShard::new(OsdId(0), index, shard_count, store);
        let mut outputs = Vec::new();
        shard.handle_map(map.clone(), &mut outputs);
        assert!(
            outputs.is_empty(),
            "a one-OSD cluster peers without messages: {outputs:?}"
        );
        Self {
            shard,
            map,
            pool,
            index,
            shard_count,
            next_tid: 1,
            outputs,
            clock: Instant::now(),
            clock_set: false,
        }
    }

    /// Gives the shard the next time reading.
    fn advance_clock(&mut self) {
        self.clock += Duration::from_micros(1);
        self.shard.set_clock(self.clock);
    }

    pub fn shard(&self) -> &OsdShard<S> {
        &self.shard
    }

    /// Whether this shard owns the PG of object `oid`.
    pub fn owns(&self, oid: &str) -> bool {
        let pgid = self
            .map
            .object_to_pg(self.pool, oid)
            .expect("the pool exists");
        pg_shard(pgid, self.shard_count) == self.index
    }

    /// Runs a compound op on object `oid` and returns the OSD's reply.
    pub fn operate(&mut self, oid: &str, ops: Vec<OpCode>) -> Result<OsdOpReply, OpError> {
        let tid = self.submit(oid, ops);
        self.advance_clock();
        self.clock_set = false;
        self.shard.flush(&mut self.outputs);
        let reply = self.outputs.drain(..).find_map(|output| match output {
            Output::Client(_, Msg::OsdOpReply(reply)) if reply.reqid.tid == tid => Some(reply),
            _ => None,
        });
        let reply = reply.ok_or_else(|| OpError::Io("the shard did not answer".into()))?;
        reply.result.clone().map(|()| reply)
    }

    /// Hands a compound op to the shard without waiting for the end of the turn,
    /// as the runtime does with every message it reads in one event-loop turn;
    /// [`DirectClient::complete`] ends the turn. Returns the op's tid.
    pub fn submit(&mut self, oid: &str, ops: Vec<OpCode>) -> u64 {
        let pgid = self
            .map
            .object_to_pg(self.pool, oid)
            .expect("the pool exists");
        let tid = self.next_tid;
        self.next_tid += 1;
        let op = OsdOp {
            reqid: ReqId { client: 1, tid },
            pgid,
            oid: oid.to_string(),
            map_epoch: self.map.epoch,
            flags: 0,
            mtime_ns: tid,
            ops,
            snapc: Default::default(),
            snapid: carmine_types::SnapId::HEAD,
        };
        if !self.clock_set {
            self.advance_clock();
            self.clock_set = true;
        }
        self.shard
            .handle_client_op(DIRECT_CLIENT, op, &mut self.outputs);
        tid
    }

    /// Ends the turn: flushes the store (one group commit for every op submitted
    /// since the last call) and returns the replies of the ops that completed.
    pub fn complete(&mut self, replies: &mut Vec<OsdOpReply>) {
        self.advance_clock();
        self.clock_set = false;
        self.shard.flush(&mut self.outputs);
        replies.extend(self.outputs.drain(..).filter_map(|output| match output {
            Output::Client(_, Msg::OsdOpReply(reply)) => Some(reply),
            _ => None,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmine_store::MemStore;

    #[test]
    fn writes_reads_and_errors_go_through_the_pg_code() {
        let mut direct = DirectClient::new(MemStore::new(), 4);
        let data = bytes::Bytes::from(vec![7u8; 4096]);
        for i in 0..100 {
            let name = format!("o{i}");
            direct
                .operate(&name, vec![OpCode::WriteFull { data: data.clone() }])
                .unwrap();
        }
        let reply = direct.operate("o5", vec![OpCode::Stat]).unwrap();
        assert!(
            reply.user_version > 0,
            "a read reports the object's version"
        );
        match reply.outputs.as_slice() {
            [carmine_proto::OpOutput::Stat { size_bytes, .. }] => assert_eq!(*size_bytes, 4096),
            other => panic!("unexpected outputs {other:?}"),
        }
        assert_eq!(
            direct.operate("missing", vec![OpCode::Stat]).unwrap_err(),
            OpError::NotFound
        );
        let objects: u64 = direct
            .shard()
            .pg_stats()
            .iter()
            .map(|s| s.object_count)
            .sum();
        assert_eq!(objects, 100);
    }
}
