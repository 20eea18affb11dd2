//! The objecter: the client's pure core. It picks each op's target from the newest map
//! (object → PG → primary → owning shard), tracks ops in flight, resends them when the
//! map moves their PG or their connection resets, and fails them at their deadline.
//!
//! Resending is safe because writes carry a request id that the primary's PG log
//! remembers: a write that already applied is answered, not applied again.

use carmine_clustermap::{pg_shard, OsdMap};
use carmine_proto::{OpCode, OpError, OsdOp, OsdOpReply, SnapContext};
use carmine_types::fast_hash::FastHashMap;
use carmine_types::{Epoch, OsdId, PgId, PoolId, ReqId, ShardIndex, SnapId};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ops a client keeps in flight at once.
pub const OPS_IN_FLIGHT_MAX: usize = 65_536;
/// Most PG targets remembered for the current map (the cache starts over when full).
pub const PG_TARGETS_CACHED_MAX: usize = 65_536;

/// Where an op goes: one shard of one OSD.
/// The snapshot side of an op: the context a write carries and the snapshot a read
/// sees (the head by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSnaps {
    pub snapc: SnapContext,
    pub snapid: SnapId,
}

impl Default for OpSnaps {
    fn default() -> Self {
        Self {
            snapc: SnapContext::default(),
            snapid: SnapId::HEAD,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub osd: OsdId,
    pub shard: ShardIndex,
    pub addr: SocketAddr,
}

/// Why an op failed on the client side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObjecterError {
    #[error("timed out after {0:?} waiting for the cluster")]
    TimedOut(Duration),
    #[error("too many ops in flight ({OPS_IN_FLIGHT_MAX})")]
    TooManyOps,
    #[error("pool {0} no longer exists")]
    PoolGone(PoolId),
    #[error("{0} is not in the map or has no address")]
    NoSuchOsd(OsdId),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjecterOutput {
    Send(Target, OsdOp),
    Complete(u64, Result<OsdOpReply, ObjecterError>),
    /// An OSD knows a newer map than `Epoch`; ask the monitor.
    NeedMap(Epoch),
}

#[derive(Debug)]
struct InFlight {
    op: OsdOp,
    pool: PoolId,
    /// A fixed OSD for debug reads; otherwise the PG's primary.
    pinned_osd: Option<OsdId>,
    target: Option<Target>,
    /// The OSD the op was last sent to: only its answer completes the op (Ceph's
    /// objecter too ignores replies to an earlier attempt).
    sent_to: Option<OsdId>,
    deadline: Instant,
    attempts: u32,
}

/// The pure op tracker of one client instance.
pub struct Objecter {
    client_id: u64,
    map: Option<Arc<OsdMap>>,
    next_tid: u64,
    ops: BTreeMap<u64, InFlight>,
    op_timeout: Duration,
    /// Each PG's target under the current map: CRUSH runs once per PG and map, not
    /// once per op (it was a third of the client's instructions per 4 KiB write).
    pg_targets: FastHashMap<PgId, Option<Target>>,
}

impl Objecter {
    /// `client_id` must be unique per client instance (it scopes request ids).
    pub fn new(client_id: u64, op_timeout: Duration) -> Self {
        Self {
            client_id,
            map: None,
            next_tid: 1,
            ops: BTreeMap::new(),
            op_timeout,
            pg_targets: FastHashMap::default(),
        }
    }

    pub fn map(&self) -> Option<&Arc<OsdMap>> {
        self.map.as_ref()
    }

    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Starts an op on object `oid` of `pool` (an empty `oid` with a `PgList` op
    /// addresses the PG `list_pg`). Returns its tid.
    #[allow(clippy::too_many_arguments)]
    pub fn submit(
        &mut self,
        now: Instant,
        pool: PoolId,
        oid: String,
        list_pg: Option<PgId>,
        ops: Vec<OpCode>,
        flags: u32,
        mtime_ns: u64,
        pinned_osd: Option<OsdId>,
        out: &mut Vec<ObjecterOutput>,
    ) -> u64 {
        let snaps = OpSnaps::default();
        self.submit_at(
            now, pool, oid, list_pg, ops, flags, mtime_ns, pinned_osd, snaps, out,
        )
    }

    /// [`Objecter::submit`] with a snapshot context (writes) or a snapshot to read at.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_at(
        &mut self,
        now: Instant,
        pool: PoolId,
        oid: String,
        list_pg: Option<PgId>,
        ops: Vec<OpCode>,
        flags: u32,
        mtime_ns: u64,
        pinned_osd: Option<OsdId>,
        snaps: OpSnaps,
        out: &mut Vec<ObjecterOutput>,
    ) -> u64 {
        let tid = self.next_tid;
        self.next_tid += 1;
        if self.ops.len() >= OPS_IN_FLIGHT_MAX {
            out.push(ObjecterOutput::Complete(
                tid,
                Err(ObjecterError::TooManyOps),
            ));
            return tid;
        }
        let op = OsdOp {
            reqid: ReqId {
                client: self.client_id,
                tid,
            },
            pgid: list_pg.unwrap_or(PgId { pool, seed: 0 }),
            oid,
            map_epoch: Epoch(0),
            flags,
            mtime_ns,
            ops,
            snapc: snaps.snapc,
            snapid: snaps.snapid,
        };
        let mut inflight = InFlight {
            op,
            pool,
            pinned_osd,
            target: None,
            sent_to: None,
            deadline: now + self.op_timeout,
            attempts: 0,
        };
        let list = list_pg.is_some();
        if let Some(result) = self.retarget(&mut inflight, list) {
            out.push(ObjecterOutput::Complete(tid, Err(result)));
            return tid;
        }
        if let Some(target) = inflight.target {
            inflight.send(target, out);
        }
        self.ops.insert(tid, inflight);
        tid
    }

    /// Recomputes the target of `op` from the current map. `Some(error)` if the op
    /// can never succeed (its pool is gone).
    fn retarget(&mut self, inflight: &mut InFlight, list: bool) -> Option<ObjecterError> {
        let Some(map) = &self.map else {
            inflight.target = None;
            return None;
        };
        if !map.pools.contains_key(&inflight.pool) {
            return Some(ObjecterError::PoolGone(inflight.pool));
        }
        let pgid = if list {
            inflight.op.pgid
        } else {
            map.object_to_pg(inflight.pool, &inflight.op.oid)
                .expect("pool exists")
        };
        inflight.op.pgid = pgid;
        inflight.op.map_epoch = map.epoch;
        inflight.target = match inflight.pinned_osd {
            Some(osd) => target_of(map, pgid, Some(osd)),
            None => match self.pg_targets.get(&pgid) {
                Some(&target) => target,
                None => {
                    let primary = map.pg_mapping(pgid).and_then(|m| m.primary);
                    let target = target_of(map, pgid, primary);
                    if self.pg_targets.len() >= PG_TARGETS_CACHED_MAX {
                        self.pg_targets.clear();
                    }
                    self.pg_targets.insert(pgid, target);
                    target
                }
            },
        };
        None
    }

    /// A new map: resend every op whose target changed (or that had none).
    pub fn handle_map(&mut self, map: Arc<OsdMap>, out: &mut Vec<ObjecterOutput>) {
        if self.map.as_ref().is_some_and(|m| m.epoch >= map.epoch) {
            return;
        }
        self.map = Some(map);
        self.pg_targets.clear();
        let tids: Vec<u64> = self.ops.keys().copied().collect();
        for tid in tids {
            self.resend_if_moved(tid, out);
        }
    }

    fn resend_if_moved(&mut self, tid: u64, out: &mut Vec<ObjecterOutput>) {
        let mut inflight = self.ops.remove(&tid).expect("tid is in flight");
        let before = inflight.target;
        let list = inflight.op.oid.is_empty();
        if let Some(error) = self.retarget(&mut inflight, list) {
            out.push(ObjecterOutput::Complete(tid, Err(error)));
            return;
        }
        if inflight.target != before || before.is_none() {
            if let Some(target) = inflight.target {
                inflight.send(target, out);
            }
        }
        self.ops.insert(tid, inflight);
    }

    /// The connection to `target` reset: ops sent on it may be lost, so resend them
    /// (the OSD answers duplicates from its log).
    pub fn handle_reset(&mut self, target: Target, out: &mut Vec<ObjecterOutput>) {
        for inflight in self.ops.values_mut() {
            if inflight.target == Some(target) {
                inflight.send(target, out);
            }
        }
    }

    /// The connection to `target` could not be made: retry its ops on the next tick
    /// (or when a new map moves them).
    pub fn handle_unreachable(&mut self, target: Target) {
        for inflight in self.ops.values_mut() {
            if inflight.target == Some(target) {
                inflight.target = None;
            }
        }
    }

    /// `from`'s reply.
    pub fn handle_reply(&mut self, from: OsdId, reply: OsdOpReply, out: &mut Vec<ObjecterOutput>) {
        if reply.reqid.client != self.client_id {
            return;
        }
        let tid = reply.reqid.tid;
        let Some(inflight) = self.ops.get_mut(&tid) else {
            return; // A late duplicate of an op already completed.
        };
        if inflight.sent_to != Some(from) {
            // An answer to an attempt the op has since been resent past (a new map
            // moved it). Taken, an old primary's refusal (`NoSpace`, say) completed
            // a write that the new primary then applied: the simulator's space faults,
            // seeds 2046 and 2450. The op's current attempt answers.
            return;
        }
        let current = self.map.as_ref().map(|m| m.epoch).unwrap_or(Epoch(0));
        match &reply.result {
            Err(OpError::WrongPrimary)
            | Err(OpError::WrongShard { .. })
            | Err(OpError::NotActive)
            | Err(OpError::Busy) => {
                // Wait for a map that moves the op, or the next retry tick.
                inflight.target = None;
                if reply.map_epoch >= current {
                    out.push(ObjecterOutput::NeedMap(current.next()));
                }
            }
            _ => {
                let inflight = self.ops.remove(&tid).expect("checked above");
                let _ = inflight;
                if reply.map_epoch > current {
                    out.push(ObjecterOutput::NeedMap(reply.map_epoch));
                }
                out.push(ObjecterOutput::Complete(tid, Ok(reply)));
            }
        }
    }

    /// Fails ops past their deadline and resends ops that have no target yet.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<ObjecterOutput>) {
        let expired: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, inflight)| inflight.deadline <= now)
            .map(|(&tid, _)| tid)
            .collect();
        for tid in expired {
            self.ops.remove(&tid);
            out.push(ObjecterOutput::Complete(
                tid,
                Err(ObjecterError::TimedOut(self.op_timeout)),
            ));
        }
        let untargeted: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, inflight)| inflight.target.is_none())
            .map(|(&tid, _)| tid)
            .collect();
        for tid in untargeted {
            self.resend_if_moved(tid, out);
        }
    }

    /// The earliest deadline of an op in flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ops.values().map(|inflight| inflight.deadline).min()
    }

    /// Whether some op waits for a target (the driver should retry soon).
    pub fn has_untargeted(&self) -> bool {
        self.ops.values().any(|inflight| inflight.target.is_none())
    }
}

impl InFlight {
    fn send(&mut self, target: Target, out: &mut Vec<ObjecterOutput>) {
        self.attempts += 1;
        self.sent_to = Some(target.osd);
        out.push(ObjecterOutput::Send(target, self.op.clone()));
    }
}

/// Where an op for `pgid` goes when `osd` serves it: the OSD's shard that owns the PG,
/// if the OSD is up and has an address for it.
fn target_of(map: &OsdMap, pgid: PgId, osd: Option<OsdId>) -> Option<Target> {
    let osd = osd?;
    let info = map.osd(osd).filter(|info| info.up)?;
    let shard = pg_shard(pgid, info.shard_count());
    let addr = *info.shard_addrs.get(usize::from(shard.0))?;
    Some(Target { osd, shard, addr })
}

#[cfg(test)]
mod tests;
