//! The history of client operations: each invocation and its completion, with virtual
//! timestamps, as the checkers need them.

use crate::time::Nanos;
use carmine_client::ObjecterError;
use carmine_proto::{OpCode, OsdOpReply, SnapContext};
use carmine_types::{ReqId, SnapId};
use std::collections::BTreeMap;

/// One client operation.
#[derive(Debug, Clone)]
pub struct OpRecord {
    pub client: u32,
    pub reqid: ReqId,
    pub oid: String,
    pub ops: Vec<OpCode>,
    /// The snapshot context a write carried (empty without `--snapshots`).
    pub snapc: SnapContext,
    /// The snapshot a read went to (the head unless `--snapshots`).
    pub snapid: SnapId,
    pub mtime_ns: u64,
    pub invoked: Nanos,
    pub completed: Option<Nanos>,
    pub result: Option<Result<OsdOpReply, ObjecterError>>,
    /// Part of the final read-back, after the cluster healed.
    pub final_read: bool,
}

impl OpRecord {
    pub fn is_write(&self) -> bool {
        self.ops.iter().any(OpCode::is_write)
    }

    /// The reply, if the op completed with one (successful or not).
    pub fn reply(&self) -> Option<&OsdOpReply> {
        self.result.as_ref().and_then(|result| result.as_ref().ok())
    }

    /// A write the cluster acknowledged as applied.
    pub fn acked_write(&self) -> Option<&OsdOpReply> {
        self.reply()
            .filter(|reply| reply.result.is_ok() && self.is_write())
    }
}

/// Every operation of a run, in invocation order.
#[derive(Debug, Default)]
pub struct History {
    ops: Vec<OpRecord>,
    by_reqid: BTreeMap<ReqId, usize>,
}

impl History {
    pub fn invoke(&mut self, record: OpRecord) {
        assert!(record.completed.is_none());
        let previous = self.by_reqid.insert(record.reqid, self.ops.len());
        assert!(previous.is_none(), "request id {} reused", record.reqid);
        self.ops.push(record);
    }

    pub fn complete(&mut self, reqid: ReqId, at: Nanos, result: Result<OsdOpReply, ObjecterError>) {
        let index = self.by_reqid[&reqid];
        let record = &mut self.ops[index];
        assert!(record.completed.is_none(), "{reqid} completed twice");
        record.completed = Some(at);
        record.result = Some(result);
    }

    pub fn get(&self, reqid: ReqId) -> Option<&OpRecord> {
        self.by_reqid.get(&reqid).map(|&index| &self.ops[index])
    }

    pub fn ops(&self) -> &[OpRecord] {
        &self.ops
    }

    pub fn acked_count(&self) -> u64 {
        self.ops
            .iter()
            .filter(|op| op.reply().is_some_and(|r| r.result.is_ok()))
            .count() as u64
    }

    /// Reads at a snapshot the cluster answered without error.
    pub fn snapshot_reads(&self) -> u64 {
        self.ops
            .iter()
            .filter(|op| op.snapid != SnapId::HEAD)
            .filter(|op| op.reply().is_some_and(|r| r.result.is_ok()))
            .count() as u64
    }

    /// Ops that completed with an error or never completed.
    pub fn failed_count(&self) -> u64 {
        self.ops.len() as u64 - self.acked_count()
    }
}
