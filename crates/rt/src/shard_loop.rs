//! One OSD shard's event loop: its listener, its sessions, its [`OsdShard`]. Runs on
//! the shard's own thread, current-thread runtime and `LocalSet`; shares nothing
//! mutable with other shards (maps arrive as immutable snapshots, stats leave through
//! a bounded queue).
//!
//! Run to completion: every connection's task (inbound clients and peers, and this
//! shard's own sessions to its peers) hands each message straight to the shard
//! ([`OsdDispatch`]); at the end of the task's turn the shard flushes its store and
//! sends what the turn's messages produced. Replies to the connection being served
//! leave in the same write as the turn's other frames; the rest go through the other
//! connections' handles. The tasks share the shard through an `Rc<RefCell<_>>`: one
//! thread, so never a lock, and a borrow never spans an `.await`.
//!
//! The exception: a primary's RepOps claim nothing about its own store
//! ([`Output::may_leave_before_flush`]), so they go to the replicas' sessions as soon
//! as the message that made them is handled, and the replicas apply the write while
//! this shard finishes its turn and flushes (as Ceph's primary sends its repops in
//! parallel with its local commit). Everything else waits for the flush.
//!
//! A store whose flush costs a sync (LogStore) asks for group commit instead: a turn
//! only marks the flush wanted and wakes the shard's own task, which runs after the
//! connection tasks already woken, so one sync covers every connection that had
//! messages at that moment.

use crate::peers::{MakeDispatch, PeerConnected, Peers};
use crate::{from_message, to_message};
use carmine_clustermap::settings::{SettingsReader, OSD_SCRUB_INTERVAL};
use carmine_clustermap::OsdMap;
use carmine_msgr::tcp::{serve_local_with, ConnId, ConnectionHandle, Dispatch, Outbox};
use carmine_msgr::{Message, Policy, SessionConfig};
use carmine_osd::{OsdShard, Output, ShardCounters};
use carmine_proto::{Msg, OsdPing, PgStat, RepOpEncoder};
use carmine_store::{ObjectStore, StoreUsage};
use carmine_types::{EntityKind, EntityName, OsdId, ShardIndex};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often a shard reports its stats to shard 0.
pub const SHARD_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// How often a shard checks whether a deep-scrub step is due.
const SCRUB_TICK: Duration = Duration::from_millis(250);
/// Seconds between deep-scrub steps unless the map's `osd_scrub_interval` says
/// otherwise.
pub const SCRUB_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// Objects one deep-scrub step verifies: a slow sweep, so scrubbing costs client IO
/// little (by default about 16 objects, and at most 4 MiB of them, a second per shard:
/// [`carmine_osd::SCRUB_BYTES_PER_STEP`]).
pub const SCRUB_OBJECTS_PER_STEP: usize = 16;

/// The exit status of an OSD that stopped because a shard's store failed.
pub const EXIT_STORE_FAILED: i32 = 3;

/// A shard's periodic report to shard 0.
#[derive(Debug, Clone)]
pub struct ShardReport {
    pub shard: ShardIndex,
    pub pgs: Vec<PgStat>,
    pub usage: StoreUsage,
    pub counters: ShardCounters,
    /// A PG has news for the monitor (a pg_temp request): send it now.
    pub urgent: bool,
}

/// What the shard's connection tasks and its housekeeping task share.
struct ShardState<S: ObjectStore> {
    shard: OsdShard<S>,
    inbound: HashMap<ConnId, (ConnectionHandle, EntityName)>,
    peers: Peers,
    /// What the turn produced that waits for its flush (see [`finish_turn`]).
    ///
    /// [`finish_turn`]: ShardState::finish_turn
    outputs: Vec<Output>,
    /// Outputs being sent before the flush (kept to reuse its buffer).
    before_flush: Vec<Output>,
    report_tx: mpsc::Sender<ShardReport>,
    settings: SettingsReader,
    last_scrub: Instant,
    /// A client op or a replicated write arrived since the last stats report; while
    /// none does, the report tick returns freed memory to the kernel.
    data_path_busy: bool,
    /// Flush from the shard's own task, once for all ready connections (see the
    /// module docs), rather than at the end of every connection's turn.
    group_commit: bool,
    /// Group commit: a connection's turn handled messages since the last flush.
    flush_wanted: bool,
    flush_requested: Rc<tokio::sync::Notify>,
    /// The shard was given the time during the current connection turn.
    clock_set: bool,
    /// When the loop's timer resumes the PGs the recovery scheduler holds back
    /// ([`OsdShard::recovery_wakeup`]); a turn that wants it sooner wakes the loop
    /// through `rearm` to set the timer again.
    recovery_wakeup: Option<Instant>,
    rearm: Rc<tokio::sync::Notify>,
    /// Encodes a replicated write once for all of its replicas.
    rep_encoder: RepOpEncoder,
}

type SharedState<S> = Rc<RefCell<ShardState<S>>>;

pub struct ShardLoop<S: ObjectStore + 'static> {
    state: SharedState<S>,
    connected_rx: mpsc::UnboundedReceiver<PeerConnected>,
    map_rx: mpsc::Receiver<Arc<OsdMap>>,
    flush_requested: Rc<tokio::sync::Notify>,
}

impl<S: ObjectStore + 'static> ShardLoop<S> {
    /// `group_commit`: the store's flush is costly (a sync), so flush once for all the
    /// connections with messages rather than once per connection turn.
    pub fn new(
        shard: OsdShard<S>,
        map_rx: mpsc::Receiver<Arc<OsdMap>>,
        report_tx: mpsc::Sender<ShardReport>,
        group_commit: bool,
    ) -> Self {
        let flush_requested = Rc::new(tokio::sync::Notify::new());
        let flush_notify = flush_requested.clone();
        let (connected_tx, connected_rx) = mpsc::unbounded_channel();
        let name = EntityName::osd(shard.whoami());
        let peer_session = SessionConfig::new(name, Policy::Lossless);
        let state = Rc::new_cyclic(|weak: &Weak<RefCell<ShardState<S>>>| {
            let weak = weak.clone();
            // The shard's sessions to its peers dispatch into the shard too. A weak
            // reference: the state owns `Peers`, which owns this factory.
            let make_dispatch: MakeDispatch = Rc::new(move |handle: &ConnectionHandle| {
                Box::new(OsdDispatch {
                    state: weak.clone(),
                    conn_id: handle.id(),
                    peer: handle.peer(),
                    outgoing: true,
                }) as Box<dyn Dispatch>
            });
            RefCell::new(ShardState {
                shard,
                inbound: HashMap::new(),
                peers: Peers::new(peer_session, make_dispatch, connected_tx),
                outputs: Vec::new(),
                before_flush: Vec::new(),
                report_tx,
                settings: SettingsReader::default(),
                last_scrub: Instant::now(),
                data_path_busy: false,
                group_commit,
                flush_wanted: false,
                clock_set: false,
                flush_requested: flush_notify,
                recovery_wakeup: None,
                rearm: Rc::new(tokio::sync::Notify::new()),
                rep_encoder: RepOpEncoder::default(),
            })
        });
        Self {
            state,
            connected_rx,
            map_rx,
            flush_requested,
        }
    }

    /// Serves `listener` until the map channel closes (the OSD is stopping). Must run
    /// inside a `LocalSet`.
    pub async fn run(mut self, listener: tokio::net::TcpListener) {
        let name = EntityName::osd(self.state.borrow().shard.whoami());
        let session = SessionConfig::new(name, Policy::Lossy);
        let weak = Rc::downgrade(&self.state);
        let accept = move |handle: &ConnectionHandle| {
            let state = weak.upgrade()?;
            let peer = handle.peer();
            state
                .borrow_mut()
                .inbound
                .insert(handle.id(), (handle.clone(), peer));
            Some(OsdDispatch {
                state: weak.clone(),
                conn_id: handle.id(),
                peer,
                outgoing: false,
            })
        };
        let server = tokio::task::spawn_local(serve_local_with(listener, session, accept));
        let mut report = tokio::time::interval(SHARD_REPORT_INTERVAL);
        let mut scrub = tokio::time::interval(SCRUB_TICK);
        let mut tick = tokio::time::interval(carmine_osd::TICK_INTERVAL);
        self.state.borrow_mut().shard.set_deferred_flush(true);
        self.state.borrow_mut().shard.set_clock(Instant::now());
        let flush_requested = self.flush_requested.clone();
        let rearm = self.state.borrow().rearm.clone();
        loop {
            let wakeup = {
                let state = &mut *self.state.borrow_mut();
                state.recovery_wakeup = state.shard.recovery_wakeup();
                state.recovery_wakeup
            };
            let recovery_due = tokio::time::Instant::from_std(wakeup.unwrap_or_else(Instant::now));
            tokio::select! {
                _ = tokio::time::sleep_until(recovery_due), if wakeup.is_some() => {
                    let state = &mut *self.state.borrow_mut();
                    state.shard.resume_recovery(Instant::now(), &mut state.outputs);
                }
                _ = rearm.notified() => {}
                _ = flush_requested.notified() => self.state.borrow_mut().flush_wanted = false,
                Some(connected) = self.connected_rx.recv() => {
                    self.state.borrow_mut().peers.handle_connected(connected)
                }
                map = self.map_rx.recv() => match map {
                    Some(map) => {
                        let state = &mut *self.state.borrow_mut();
                        state.shard.set_clock(Instant::now());
                        state.shard.handle_map(map, &mut state.outputs);
                    }
                    None => break,
                },
                _ = report.tick() => {
                    let state = &mut *self.state.borrow_mut();
                    state.report(false);
                    // Idle for a second: give freed memory back (a pool deletion's,
                    // and the pre-touched buffers: they refill on the next burst).
                    if !std::mem::take(&mut state.data_path_busy) {
                        carmine_store::page_pool::release();
                        crate::malloc::return_freed_memory();
                    }
                }
                _ = scrub.tick() => {
                    let state = &mut *self.state.borrow_mut();
                    state.shard.set_clock(Instant::now());
                    state.maybe_scrub();
                }
                _ = tick.tick() => {
                    let state = &mut *self.state.borrow_mut();
                    state.shard.tick(Instant::now(), &mut state.outputs);
                }
            }
            self.state.borrow_mut().finish_turn(None);
        }
        server.abort();
    }
}

impl<S: ObjectStore> ShardState<S> {
    /// A deep-scrub step when one is due (`osd_scrub_interval`, 0: never).
    fn maybe_scrub(&mut self) {
        let Some(map) = self.shard.map().cloned() else {
            return;
        };
        let interval =
            self.settings
                .seconds(&map.config, OSD_SCRUB_INTERVAL, SCRUB_INTERVAL_DEFAULT);
        for warning in self.settings.take_warnings() {
            tracing::warn!("{}: {warning}", self.shard.whoami());
        }
        if interval.is_zero() || self.last_scrub.elapsed() < interval {
            return;
        }
        self.last_scrub = Instant::now();
        self.shard.scrub_step(
            SCRUB_OBJECTS_PER_STEP,
            carmine_osd::SCRUB_BYTES_PER_STEP,
            &mut self.outputs,
        );
    }

    fn report(&mut self, urgent: bool) {
        let report = ShardReport {
            shard: self.shard.index(),
            pgs: self.shard.pg_stats(),
            usage: self.shard.usage(),
            counters: self.shard.counters(),
            urgent,
        };
        // A full queue means shard 0 is behind; the next report supersedes this one.
        let _ = self.report_tx.try_send(report);
    }

    /// Makes the turn's writes durable with one flush, then sends what they produced
    /// (through `out` when it goes to the connection being served).
    fn finish_turn(&mut self, out: Option<&mut Outbox<'_>>) {
        // Flushing completes writes and may run the reads behind them: with the time
        // now, not that of the turn's first message (a lease may have lapsed since).
        self.shard.set_clock(Instant::now());
        self.clock_set = false;
        self.shard.flush(&mut self.outputs);
        if let Some(error) = self.shard.store().failure() {
            stop_on_store_failure(self.shard.whoami(), self.shard.index(), error);
        }
        let wakeup = self.shard.recovery_wakeup();
        if wakeup.is_some_and(|due| self.recovery_wakeup.is_none_or(|armed| due < armed)) {
            self.recovery_wakeup = wakeup;
            self.rearm.notify_one();
        }
        let outputs = std::mem::take(&mut self.outputs);
        self.outputs = self.carry_out(outputs, out);
        if self.shard.take_report_urgent() {
            self.report(true);
        }
    }

    fn handle_msg(&mut self, peer: EntityName, msg: Msg, out: &mut Outbox<'_>) {
        // The shard judges read leases by this time; once per turn suffices, a turn
        // being far shorter than a lease.
        if !self.clock_set {
            self.shard.set_clock(Instant::now());
            self.clock_set = true;
        }
        let start = self.outputs.len();
        match (peer.kind, msg) {
            (EntityKind::Osd, Msg::OsdPing(ping)) => self.answer_ping(&ping, out),
            (EntityKind::Client, Msg::OsdOp(op)) => {
                self.data_path_busy = true;
                self.shard
                    .handle_client_op(out.conn_id(), op, &mut self.outputs)
            }
            (EntityKind::Osd, msg) => {
                if matches!(msg, Msg::RepOp(_) | Msg::RepOpReply(_)) {
                    self.data_path_busy = true;
                }
                let from = OsdId(peer.id as u32);
                self.shard.handle_peer_message(from, msg, &mut self.outputs)
            }
            (_, msg) => tracing::warn!(
                "osd: unexpected message type {} from {peer}",
                msg.msg_type()
            ),
        }
        self.send_before_flush(start, out);
    }

    /// Sends at once what the message just handled produced that makes no durability
    /// claim (the RepOps of a write this shard leads), so the replicas get it before
    /// this shard's flush; the rest stays in `outputs` for `finish_turn`. With group
    /// commit the sessions' tasks, woken now, write it out before the shard's own task
    /// runs the sync.
    fn send_before_flush(&mut self, start: usize, out: &mut Outbox<'_>) {
        let mut before_flush = std::mem::take(&mut self.before_flush);
        carmine_osd::take_outputs_before_flush(&mut self.outputs, start, &mut before_flush);
        self.before_flush = self.carry_out(before_flush, Some(out));
    }

    /// Echoes a heartbeat on the connection it came on (the pinger's own session).
    fn answer_ping(&mut self, ping: &OsdPing, out: &mut Outbox<'_>) {
        let epoch = self.shard.epoch();
        let Some(reply) = carmine_osd::heartbeat::reply_to(ping, epoch) else {
            return;
        };
        if let Err(error) = out.send(to_message(&Msg::OsdPing(reply), epoch)) {
            tracing::debug!("heartbeat reply to {} not sent: {error}", out.peer());
        }
    }

    /// Sends `outputs` and hands back the emptied vector (to keep its buffer).
    fn carry_out(
        &mut self,
        mut outputs: Vec<Output>,
        mut out: Option<&mut Outbox<'_>>,
    ) -> Vec<Output> {
        if outputs.is_empty() {
            return outputs;
        }
        let epoch = self.shard.epoch();
        let map = self.shard.map().cloned();
        for output in outputs.drain(..) {
            match output {
                Output::Client(conn_id, msg) => {
                    let message = to_message(&msg, epoch);
                    match out.as_deref_mut() {
                        Some(out) if out.conn_id() == conn_id => {
                            if let Err(error) = out.send(message) {
                                tracing::debug!("reply to {} not sent: {error}", out.peer());
                            }
                        }
                        _ => self.send_inbound(conn_id, message),
                    }
                }
                Output::Peer(osd, shard, msg) => {
                    let addr = map.as_ref().and_then(|map| {
                        let info = map.osd(osd).filter(|info| info.up)?;
                        info.shard_addrs.get(usize::from(shard.0)).copied()
                    });
                    match addr {
                        Some(addr) => {
                            let (front, data) = self.rep_encoder.encode_parts(&msg);
                            let message =
                                Message::new(msg.msg_type(), 0, epoch.0, front).with_data(data);
                            self.peers.send((osd, shard), addr, message);
                        }
                        None => tracing::debug!("{osd} is down or unknown; message dropped"),
                    }
                }
            }
        }
        self.rep_encoder.clear();
        outputs
    }

    fn send_inbound(&mut self, conn_id: ConnId, message: Message) {
        if let Some((conn, peer)) = self.inbound.get(&conn_id) {
            if let Err(error) = conn.send(message) {
                tracing::debug!("reply to {peer} not sent: {error}");
            }
        }
    }

    fn closed(&mut self, conn_id: ConnId, outgoing: bool) {
        if outgoing {
            self.peers.handle_closed(conn_id);
        } else {
            self.inbound.remove(&conn_id);
        }
    }
}

/// Runs one connection's messages through the shard, on the connection's own task.
struct OsdDispatch<S: ObjectStore> {
    /// Weak: the shard stops when its loop ends, even while connections linger.
    state: Weak<RefCell<ShardState<S>>>,
    conn_id: ConnId,
    peer: EntityName,
    /// One of this shard's sessions to a peer (else accepted from a client or peer).
    outgoing: bool,
}

impl<S: ObjectStore + 'static> Dispatch for OsdDispatch<S> {
    fn on_message(&mut self, message: Message, out: &mut Outbox<'_>) {
        let Some(state) = self.state.upgrade() else {
            out.close();
            return;
        };
        let Some(msg) = from_message(message, &self.peer) else {
            return;
        };
        state.borrow_mut().handle_msg(self.peer, msg, out);
    }

    fn on_turn_end(&mut self, out: &mut Outbox<'_>) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let mut state = state.borrow_mut();
        if !state.group_commit {
            state.finish_turn(Some(out));
            return;
        }
        state.clock_set = false;
        if !state.flush_wanted {
            state.flush_wanted = true;
            state.flush_requested.notify_one();
        }
    }

    fn on_closed(&mut self, _reason: &str) {
        if let Some(state) = self.state.upgrade() {
            state.borrow_mut().closed(self.conn_id, self.outgoing);
        }
    }
}

/// Stops the OSD process: a store that failed a device write or sync refuses all
/// further work, and an OSD that stayed up on it would hold its PGs' writes forever
/// (no map change would ever re-peer them without it). Ceph's OSD aborts on such an
/// error; this exits, before the turn's replies go out (what the failed flush did not
/// make durable was never acknowledged). The peers' heartbeats report the OSD down,
/// its PGs re-peer without it, and once restarted on a working device it recovers
/// from what its store had synced. Exiting skips every destructor, as a crash would,
/// which the stores are built to survive.
fn stop_on_store_failure(osd: OsdId, shard: ShardIndex, error: &carmine_store::StoreError) -> ! {
    let words = format!(
        "{osd} shard {}: the store failed ({error}); the OSD stops so that its PGs \
         re-peer without it (exit status {EXIT_STORE_FAILED})",
        shard.0
    );
    tracing::error!("{words}");
    eprintln!("{words}");
    std::process::exit(EXIT_STORE_FAILED)
}
