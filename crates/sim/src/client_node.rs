//! A client in the simulator: the real `Objecter` driven as the async client's driver
//! drives it (monitor session and map subscription, one lossy session per OSD shard,
//! resends on reset, retries of untargeted ops on a tick), plus its workload.

use crate::config::SimConfig;
use crate::events::Event;
use crate::history::OpRecord;
use crate::network::{Endpoint, Node, SessionId, Wire};
use crate::osd_node::CONNECT_TIMEOUT;
use crate::sim::{Phase, Sim};
use crate::time::{Nanos, MILLISECOND};
use crate::workload;
use carmine_client::{Objecter, ObjecterOutput, OpSnaps, Target};
use carmine_proto::{Command, MonCommand, MonGetMap, Msg, OpCode, OsdOp, SnapContext};
use carmine_types::{Epoch, ReqId, SnapId};
use std::collections::BTreeMap;
use std::time::Duration;

/// The driver's retry tick for untargeted ops (the client's `RETRY_INTERVAL`).
pub const CLIENT_TICK: Nanos = 100 * MILLISECOND;
/// Delay before a client reconnects to the monitor.
pub const MON_RETRY_DELAY: Nanos = 100 * MILLISECOND;
/// Snapshots a `--snapshots` run takes at most (clones per object stay few).
pub const SNAPSHOTS_PER_RUN_MAX: u64 = 24;
/// Snapshots a `--snap-trim` run takes at most: removals keep clones few.
pub const SNAPSHOTS_WITH_REMOVAL_MAX: u64 = 48;
/// Client ids start here, so that they never look like small test ids.
pub const CLIENT_ID_BASE: u64 = 4096;

/// The snapshots a run with `config` may take.
pub fn snapshots_max(config: &SimConfig) -> u64 {
    if config.snap_trim {
        SNAPSHOTS_WITH_REMOVAL_MAX
    } else {
        SNAPSHOTS_PER_RUN_MAX
    }
}

pub struct ClientNode {
    pub id: u64,
    pub objecter: Objecter,
    pub mon_session: Option<SessionId>,
    pub osd_sessions: BTreeMap<Target, SessionId>,
    pub objects: Vec<String>,
    /// Which monitor to try next.
    pub mon_hunt: carmine_client::MonHunt,
    /// The snapshot context this client writes under (`--snapshots`): it learns of
    /// snapshots others take only when it next refreshes, as an image writer rereads
    /// its header.
    pub snapc: SnapContext,
}

impl ClientNode {
    pub fn new(index: u32, config: &SimConfig) -> Self {
        let id = CLIENT_ID_BASE + u64::from(index);
        let timeout = Duration::from_nanos(config.op_timeout);
        Self {
            id,
            objecter: Objecter::new(id, timeout),
            mon_session: None,
            osd_sessions: BTreeMap::new(),
            objects: workload::object_names(index, config.shared_objects, config.private_objects),
            mon_hunt: carmine_client::MonHunt::new(),
            snapc: SnapContext::default(),
        }
    }

    fn epoch(&self) -> Epoch {
        self.objecter.map().map_or(Epoch(0), |map| map.epoch)
    }
}

impl Sim {
    fn client(&mut self, index: u32) -> &mut ClientNode {
        &mut self.clients[index as usize]
    }

    /// Connects to the next monitor in turn, as the async client's `ensure_mon`.
    pub(crate) fn client_connect_mon(&mut self, index: u32) {
        if self.client(index).mon_session.is_some() {
            return;
        }
        let count = self.mon_count() as usize;
        let rank = self.client(index).mon_hunt.next_target(count) as u64;
        let session = if self.mon_running(rank) {
            self.net
                .connect(Endpoint::Client(index), Endpoint::Mon(rank))
        } else {
            None
        };
        match session {
            Some(session) => {
                let client = self.client(index);
                client.mon_session = Some(session);
                let have = client.epoch();
                let msg = Msg::MonGetMap(MonGetMap {
                    have,
                    subscribe: true,
                });
                self.send_session(session, Endpoint::Client(index), msg);
            }
            None => {
                let refused = self.net.reachable(Node::Client(index), Node::Mon(rank));
                let wait = if refused {
                    MILLISECOND
                } else {
                    CONNECT_TIMEOUT
                };
                self.schedule(MON_RETRY_DELAY + wait, Event::ClientConnectMon(index));
            }
        }
    }

    pub(crate) fn client_session_closed(&mut self, index: u32, session: SessionId) {
        let client = self.client(index);
        if client.mon_session == Some(session) {
            client.mon_session = None;
            self.schedule(MON_RETRY_DELAY, Event::ClientConnectMon(index));
            return;
        }
        let target = client
            .osd_sessions
            .iter()
            .find(|(_, &s)| s == session)
            .map(|(&target, _)| target);
        if let Some(target) = target {
            client.osd_sessions.remove(&target);
            let mut out = Vec::new();
            client.objecter.handle_reset(target, &mut out);
            self.client_outputs(index, out);
        }
    }

    pub(crate) fn client_unreachable(&mut self, index: u32, target: Target) {
        self.client(index).objecter.handle_unreachable(target);
    }

    pub(crate) fn client_receive(&mut self, index: u32, wire: Wire) {
        let mut out = Vec::new();
        let client = self.client(index);
        match wire.msg {
            Msg::OsdMap(update) => {
                // As the async client: apply every epoch, act on the newest.
                let step = update.advance(client.objecter.map());
                if let Some(newest) = step.maps.last() {
                    client.objecter.handle_map(newest.clone(), &mut out);
                }
                if let Some(have) = step.request {
                    let error = step.error.map_or_else(String::new, |e| e.to_string());
                    self.trace.note(self.now(), || {
                        format!("client{index} asks for maps after e{}: {error}", have.0)
                    });
                    self.client_request_maps(index, have);
                }
            }
            Msg::OsdOpReply(reply) => {
                let Endpoint::Osd(from, _) = wire.from else {
                    panic!("{} sent client{index} an op reply", wire.from);
                };
                client.objecter.handle_reply(from, reply, &mut out)
            }
            Msg::MonCommandReply(reply) if reply.tid >= crate::decommission::TID_BASE => {
                self.decommission_answered(index, reply)
            }
            // Operator commands of the remap and replacement classes: traced only.
            Msg::MonCommandReply(reply) if reply.tid >= crate::remaps::TID_BASE => {
                self.remap_answered(index, reply)
            }
            Msg::MonCommandReply(reply) if self.config.snap_trim => {
                self.snap_removal_answered(index, reply)
            }
            other => panic!("{} sent client{index} a {}", wire.from, other.msg_type()),
        }
        self.client_outputs(index, out);
    }

    pub(crate) fn client_tick(&mut self, index: u32) {
        if self.phase == Phase::Done {
            return;
        }
        self.schedule(CLIENT_TICK, Event::ClientTick(index));
        if self.config.snap_trim {
            self.send_snap_removals(index);
        }
        self.send_remaps(index);
        let now = self.clock.instant();
        let client = self.client(index);
        let due = client.objecter.poll_timeout().is_some_and(|at| at <= now);
        if due || client.objecter.has_untargeted() {
            let mut out = Vec::new();
            client.objecter.handle_timeout(now, &mut out);
            self.client_outputs(index, out);
        }
    }

    fn client_outputs(&mut self, index: u32, outputs: Vec<ObjecterOutput>) {
        for output in outputs {
            match output {
                ObjecterOutput::Send(target, op) => self.client_send(index, target, op),
                ObjecterOutput::Complete(tid, result) => {
                    let reqid = ReqId {
                        client: self.client(index).id,
                        tid,
                    };
                    self.trace
                        .note(self.now(), || format!("client{index} completes {reqid}"));
                    self.history.complete(reqid, self.clock.now(), result);
                    if index == 0 {
                        self.read_back_done();
                    }
                }
                ObjecterOutput::NeedMap(_) => {
                    let have = self.client(index).epoch();
                    self.client_request_maps(index, have);
                }
            }
        }
    }

    /// Asks the client's monitor for the maps after `have` (`Epoch(0)`: a full map).
    fn client_request_maps(&mut self, index: u32, have: Epoch) {
        if let Some(session) = self.client(index).mon_session {
            let msg = Msg::MonGetMap(MonGetMap {
                have,
                subscribe: true,
            });
            self.send_session(session, Endpoint::Client(index), msg);
        }
    }

    /// Sends on the session to `target`, opening one if needed; a failed connection
    /// reports the target unreachable after the connection timeout.
    fn client_send(&mut self, index: u32, target: Target, op: OsdOp) {
        let from = Endpoint::Client(index);
        let session = match self.client(index).osd_sessions.get(&target) {
            Some(&session) => Some(session),
            None => self.client_connect_osd(index, target),
        };
        match session {
            Some(session) => self.send_session(session, from, Msg::OsdOp(op)),
            None => {
                let refused = !self.osds[&target.osd].is_up()
                    && self
                        .net
                        .reachable(Node::Client(index), Node::Osd(target.osd));
                let delay = if refused {
                    MILLISECOND
                } else {
                    CONNECT_TIMEOUT
                };
                self.schedule(
                    delay,
                    Event::ClientUnreachable {
                        client: index,
                        target,
                    },
                );
            }
        }
    }

    fn client_connect_osd(&mut self, index: u32, target: Target) -> Option<SessionId> {
        if !self.osds[&target.osd].is_up() {
            return None;
        }
        let to = Endpoint::Osd(target.osd, target.shard);
        let session = self.net.connect(Endpoint::Client(index), to)?;
        self.client(index).osd_sessions.insert(target, session);
        Some(session)
    }

    /// The workload's next op, if the client has room for one.
    pub(crate) fn client_issue(&mut self, index: u32) {
        if !matches!(self.phase, Phase::Faults | Phase::Quiet) {
            return;
        }
        let delay = self.workload_rng.exponential(self.config.op_interval_mean);
        self.schedule(delay, Event::ClientIssue(index));
        if self.client(index).objecter.in_flight() >= self.config.ops_in_flight_max as usize {
            return;
        }
        let objects = &self.clients[index as usize].objects;
        let oid = objects[self.workload_rng.index(objects.len())].clone();
        let ops = workload::next_op(&mut self.workload_rng);
        let snaps = if self.config.snapshots {
            self.snapshot_step(index, &ops)
        } else {
            OpSnaps::default()
        };
        self.submit(index, oid, ops, snaps, false);
    }

    /// `--snapshots`: now and then the client takes a self-managed snapshot (a new id
    /// from the run's allocator, as a monitor allocates them) or catches up with the
    /// snapshots taken so far; its writes carry its context, and a third of its reads
    /// go to one of the live snapshots it knows. With `--snap-trim` it also removes
    /// snapshots now and then.
    fn snapshot_step(&mut self, index: u32, ops: &[OpCode]) -> OpSnaps {
        if self.config.snap_trim {
            self.snap_remove_step(index);
        }
        let max = snapshots_max(&self.config);
        let rng = &mut self.workload_rng;
        if self.snap_seq < max && rng.chance(1, 40) {
            self.snap_seq += 1;
            self.live_snaps.insert(0, self.snap_seq);
            let (seq, client) = (self.snap_seq, &mut self.clients[index as usize]);
            client.snapc = SnapContext {
                seq,
                snaps: self.live_snaps.clone(),
            };
            let now = self.clock.now();
            self.trace
                .note(now, || format!("client{index} takes snapshot {seq}"));
        } else if rng.chance(1, 4) {
            self.clients[index as usize].snapc = SnapContext {
                seq: self.snap_seq,
                snaps: self.live_snaps.clone(),
            };
        }
        let client = &self.clients[index as usize];
        let is_write = ops.iter().any(OpCode::is_write);
        // A removed snapshot is out of the live list before its removal is sent, so
        // no read starts at a snapshot whose clones may be trimmed under it.
        let snaps: Vec<u64> = (client.snapc.snaps.iter())
            .copied()
            .filter(|snap| self.live_snaps.contains(snap))
            .collect();
        let snapid = if !is_write && !snaps.is_empty() && rng.chance(1, 3) {
            SnapId(snaps[rng.index(snaps.len())])
        } else {
            SnapId::HEAD
        };
        OpSnaps {
            snapc: if is_write {
                client.snapc.clone()
            } else {
                SnapContext::default()
            },
            snapid,
        }
    }

    fn submit(
        &mut self,
        index: u32,
        oid: String,
        ops: Vec<OpCode>,
        snaps: OpSnaps,
        final_read: bool,
    ) {
        let now = self.clock.now();
        let instant = self.clock.instant();
        let pool = self.pool;
        let client = self.client(index);
        let id = client.id;
        let mut out = Vec::new();
        let tid = client.objecter.submit_at(
            instant,
            pool,
            oid.clone(),
            None,
            ops.clone(),
            0,
            now,
            None,
            snaps.clone(),
            &mut out,
        );
        let reqid = ReqId { client: id, tid };
        self.trace
            .note(now, || format!("client{index} invokes {reqid} on {oid}"));
        self.history.invoke(OpRecord {
            client: index,
            reqid,
            oid,
            ops,
            snapc: snaps.snapc,
            snapid: snaps.snapid,
            mtime_ns: now,
            invoked: now,
            completed: None,
            result: None,
            final_read,
        });
        self.client_outputs(index, out);
    }

    /// Client 0 reads every object in full.
    pub(crate) fn start_read_back(&mut self) {
        self.trace.note(self.now(), || "final read-back".into());
        self.phase = Phase::ReadBack;
        self.tamper_replica_copies();
        let mut names: Vec<String> = self
            .clients
            .iter()
            .flat_map(|c| c.objects.clone())
            .collect();
        names.sort();
        names.dedup();
        for oid in names {
            self.submit(0, oid, workload::full_read(), OpSnaps::default(), true);
        }
    }
}

impl Sim {
    /// An operator's command to the monitors, with `tid`, on the first client that
    /// has a monitor session (the operator classes' way to reach the cluster); false
    /// if none has one now.
    pub(crate) fn send_operator_command(&mut self, tid: u64, command: Command) -> bool {
        let Some(client) =
            (0..self.config.client_count).find(|&c| self.clients[c as usize].mon_session.is_some())
        else {
            return false;
        };
        let session = (self.clients[client as usize].mon_session).expect("found above");
        self.trace.note(self.now(), || {
            format!("client{client} (operator) sends {command:?}")
        });
        let msg = Msg::MonCommand(MonCommand { tid, command });
        self.send_session(session, Endpoint::Client(client), msg);
        true
    }
}
