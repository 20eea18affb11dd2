//! The Raft side of the monitor: running raft-rs's `Ready` cycle against the in-memory
//! store, applying committed entries in order, following leadership changes, and
//! routing work to the leader.

use crate::entry::{MonEntry, Origin};
use crate::storage::{decode_raft_message, encode_raft_message, LOG_ENTRIES_MAX};
use crate::{
    raft_id, ConnId, MonOutput, Monitor, Op, PendingBoot, Waiter, UNROUTED_MAX, WAITERS_MAX,
};
use carmine_clustermap::{OsdMap, OsdMapIncremental};
use carmine_proto::{CommandOutput, MonCommand, MonCommandReply, MonForward, MonRaft, Msg};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::{EntityName, Epoch};
use raft::prelude::{Entry, EntryType, Message, MessageType, Snapshot};
use raft::{SnapshotStatus, StateRole};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Monitor {
    /// Runs Raft until it has nothing more to do: proposals, persistence (into the
    /// in-memory store, marked dirty for the driver), sends, applies.
    pub(crate) fn drive(&mut self, now: Instant, out: &mut Vec<MonOutput>) {
        for _ in 0..64 {
            self.follow_leadership(now, out);
            self.propose_next(now, out);
            if !self.raft.has_ready() {
                break;
            }
            self.process_ready(now, out);
        }
        self.follow_leadership(now, out);
    }

    fn process_ready(&mut self, now: Instant, out: &mut Vec<MonOutput>) {
        let mut ready = self.raft.ready();
        let mut messages = ready.take_messages();
        if !ready.snapshot().is_empty() {
            let snapshot = ready.snapshot().clone();
            self.raft.mut_store().apply_snapshot(snapshot.clone());
            self.store_dirty = true;
            self.apply_snapshot(now, &snapshot, out);
        }
        let committed = ready.take_committed_entries();
        self.apply_entries(now, committed, out);
        if !ready.entries().is_empty() {
            self.raft.mut_store().append(ready.entries());
            self.store_dirty = true;
        }
        if let Some(hard_state) = ready.hs() {
            self.raft.mut_store().set_hard_state(hard_state.clone());
            self.store_dirty = true;
        }
        messages.extend(ready.take_persisted_messages());
        let mut light = self.raft.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raft.mut_store().set_commit(commit);
            self.store_dirty = true;
        }
        messages.extend(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply_entries(now, committed, out);
        self.raft.advance_apply();
        self.send_raft(messages, out);
        self.maybe_compact();
    }

    fn send_raft(&mut self, messages: Vec<Message>, out: &mut Vec<MonOutput>) {
        for message in messages {
            let rank = message.to - 1;
            let conn = self.peer_conns.get(&rank).copied();
            if let Some(conn) = conn {
                let msg = Msg::MonRaft(MonRaft {
                    from_rank: self.rank,
                    payload: encode_raft_message(&message).into(),
                });
                out.push(MonOutput::Send(conn, msg));
            }
            if message.get_msg_type() == MessageType::MsgSnapshot {
                self.report_snapshot(message.to, conn.is_some());
            }
        }
    }

    /// Leader: tells Raft what became of a snapshot it asked us to send `to`. raft-rs
    /// sends a follower nothing more while its snapshot is outstanding, until the
    /// application reports it; without a report, a snapshot lost to a partition (or
    /// the follower's answer to it) stranded that monitor for as long as the leader
    /// lasted (seed 26545 of expansion, remaps, space and snapshot trims: mon.2 stayed
    /// at e16 for a minute while the others reached e58). Delivery is not known here,
    /// so a snapshot handed to a session counts as finished: Raft then probes the
    /// follower after the next heartbeat, and one that never got it answers with its
    /// older log and is sent the snapshot again. One with no session to go on failed.
    fn report_snapshot(&mut self, to: u64, handed_over: bool) {
        let status = if handed_over {
            SnapshotStatus::Finish
        } else {
            SnapshotStatus::Failure
        };
        self.raft.report_snapshot(to, status);
    }

    /// A Raft message from a peer.
    pub(crate) fn handle_raft(&mut self, now: Instant, from: EntityName, raft: MonRaft) {
        if from != EntityName::mon(raft.from_rank) || !self.ranks.contains(&raft.from_rank) {
            tracing::warn!("mon.{}: Raft message from {from} ignored", self.rank);
            return;
        }
        let message = match decode_raft_message(&raft.payload) {
            Ok(message) if message.from == raft_id(raft.from_rank) => message,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!("mon.{}: bad Raft message from {from}: {error}", self.rank);
                return;
            }
        };
        self.peer_heard.insert(raft.from_rank, now);
        if let Err(error) = self.raft.step(message) {
            tracing::debug!("mon.{}: Raft refused a message: {error}", self.rank);
        }
    }

    fn apply_snapshot(&mut self, now: Instant, snapshot: &Snapshot, out: &mut Vec<MonOutput>) {
        let map = match OsdMap::from_bytes(&snapshot.data) {
            Ok(map) => map,
            Err(error) => panic!("the leader sent a snapshot with an unreadable map: {error}"),
        };
        self.applied_index = snapshot.get_metadata().index;
        if map.epoch <= self.map.epoch {
            return;
        }
        self.history = carmine_clustermap::HistoryTracker::new(&map);
        self.install_map(now, Arc::new(map), out);
    }

    fn apply_entries(&mut self, now: Instant, entries: Vec<Entry>, out: &mut Vec<MonOutput>) {
        for entry in entries {
            assert!(
                entry.index == self.applied_index + 1,
                "entries apply in order"
            );
            self.applied_index = entry.index;
            if self.in_flight.is_some_and(|index| index <= entry.index) {
                self.in_flight = None;
            }
            if entry.data.is_empty() || entry.get_entry_type() != EntryType::EntryNormal {
                continue;
            }
            match MonEntry::from_bytes(&entry.data) {
                Ok(decoded) => self.apply_entry(now, decoded, out),
                Err(error) => tracing::error!(
                    "mon.{}: skipping unreadable log entry {}: {error}",
                    self.rank,
                    entry.index
                ),
            }
        }
    }

    fn apply_entry(&mut self, now: Instant, entry: MonEntry, out: &mut Vec<MonOutput>) {
        let fits = entry
            .maps
            .iter()
            .enumerate()
            .all(|(i, m)| m.epoch.0 == self.map.epoch.0 + 1 + i as u32);
        if !fits {
            // Proposed on a state that another leader's entries overtook: every monitor
            // skips it alike.
            if let Some(origin) = entry.origin {
                self.answer(origin, Err(stale_error()), out);
            }
            return;
        }
        for map in entry.maps {
            // The leader computed the PG histories; advancing a copy keeps this
            // monitor's interval bookkeeping in step for when it leads.
            let mut scratch = map.clone();
            self.history.advance(&self.map, &mut scratch);
            self.install_map(now, Arc::new(map), out);
        }
        if let Some(origin) = entry.origin {
            let done = CommandOutput::Done {
                epoch: self.map.epoch,
                message: entry.message,
            };
            self.answer(origin, Ok(done), out);
        }
    }

    /// Makes `map` the applied map and tells the driver and the subscribers.
    fn install_map(&mut self, now: Instant, map: Arc<OsdMap>, out: &mut Vec<MonOutput>) {
        // A purged OSD's reports and timers go with it (a new OSD may take its id).
        (self.osds).retain(|id, _| self.map.osd(*id).is_none() || map.osd(*id).is_some());
        for osd in map.osds.values() {
            let was_up = self.map.is_up(osd.id);
            let tracking = self.osds.entry(osd.id).or_default();
            if was_up && !osd.up {
                tracking.down_since = Some(now);
            }
            if osd.up {
                tracking.down_since = None;
            }
        }
        // A boot is done once a map shows this instance up. A map of an earlier instance
        // at the same addresses is not enough: a monitor catching up on old epochs after
        // the boot arrived saw the OSD's previous life up, dropped the boot, and then
        // applied the epoch that marked it down, leaving the OSD down for good (seed
        // 112006; the OSD boots again only when a new map marks it down).
        self.pending_boots.retain(|&osd, pending| {
            let Ok(Msg::OsdBoot(boot)) =
                Msg::decode(pending.forward.inner_type, pending.forward.inner.clone())
            else {
                return false;
            };
            !map.osd(osd).is_some_and(|info| {
                info.up && info.shard_addrs == boot.shard_addrs && info.instance == boot.instance
            })
        });
        // A snapshot may jump epochs: the changes kept no longer lead to this map.
        if map.epoch.0 == self.map.epoch.0 + 1 {
            let incremental = Arc::new(OsdMapIncremental::between(&self.map, &map));
            let bytes = incremental.encoded_bytes();
            self.recent_incrementals.push_back((incremental, bytes));
            while self.recent_incrementals.len() > crate::RECENT_INCREMENTALS_MAX {
                self.recent_incrementals.pop_front();
            }
        } else {
            self.recent_incrementals.clear();
        }
        self.map = map.clone();
        self.failures.prune(&map);
        self.read_settings();
        out.push(MonOutput::PersistMap(map.clone()));
        let subscribers: Vec<(ConnId, Epoch)> =
            self.subscribers.iter().map(|(&c, &e)| (c, e)).collect();
        for (conn, sent) in subscribers {
            // One that already holds this epoch (it told us, or was sent it) is skipped;
            // one with no map yet gets a full map, as an incremental needs a base.
            for msg in self.map_messages_after(sent) {
                out.push(MonOutput::Send(conn, Msg::OsdMap(msg)));
            }
            self.subscribers.insert(conn, sent.max(map.epoch));
        }
    }

    fn maybe_compact(&mut self) {
        let snapshot_index = self.raft.store().snapshot_index();
        if self.applied_index >= snapshot_index + LOG_ENTRIES_MAX {
            let bytes = self.map.to_bytes();
            self.raft.mut_store().compact(self.applied_index, bytes);
            self.store_dirty = true;
        }
    }

    /// Notices a new leader (or none) and adjusts the work queued for it.
    fn follow_leadership(&mut self, now: Instant, out: &mut Vec<MonOutput>) {
        let leader = match self.raft.raft.leader_id {
            0 => None,
            id => Some(id - 1),
        };
        let leader = if self.raft.raft.state == StateRole::Leader {
            Some(self.rank)
        } else {
            leader.filter(|&l| l != self.rank)
        };
        if leader == self.known_leader {
            return;
        }
        let was_leader = self.is_leader();
        tracing::info!(
            "mon.{}: leader is now {} (term {})",
            self.rank,
            leader.map_or("unknown".to_string(), |l| format!("mon.{l}")),
            self.raft.raft.term
        );
        self.known_leader = leader;
        if was_leader {
            self.step_down(out);
        }
        if self.is_leader() {
            self.take_leadership(now);
        }
        let waiting: Vec<MonForward> = self.unrouted.drain(..).collect();
        for forward in waiting {
            self.route(now, forward, out);
        }
        let osds: Vec<_> = self.pending_boots.keys().copied().collect();
        for osd in osds {
            if let Some(pending) = self.pending_boots.get_mut(&osd) {
                pending.sent_at = None;
            }
        }
        self.resend_boots(now, out);
    }

    fn take_leadership(&mut self, now: Instant) {
        // The entry raft-rs appends on election; once it is applied, every earlier
        // entry is too, and proposals build on the newest map.
        self.leading_from_index = Some(self.raft.raft.raft_log.last_index());
        self.in_flight = None;
        for (id, tracking) in &mut self.osds {
            if self.map.is_up(*id) {
                tracking.last_heard = Some(now.max(tracking.last_heard.unwrap_or(now)));
            } else if tracking.down_since.is_none() {
                tracking.down_since = Some(now);
            }
        }
    }

    fn step_down(&mut self, out: &mut Vec<MonOutput>) {
        self.leading_from_index = None;
        self.in_flight = None;
        self.pending_pg_temp.clear();
        self.pending_up_thru.clear();
        self.failures.clear();
        for op in std::mem::take(&mut self.queue) {
            let Op::Command { origin, command } = op else {
                continue;
            };
            // Never proposed, so safe to hand to the next leader.
            let inner = Msg::MonCommand(MonCommand {
                tid: origin.token,
                command,
            });
            let forward = MonForward {
                origin_rank: origin.rank,
                token: origin.token,
                sender: EntityName::mon(self.rank),
                inner_type: inner.msg_type(),
                inner: inner.encode_front(),
            };
            self.push_unrouted(forward);
        }
        let _ = out;
    }

    fn push_unrouted(&mut self, forward: MonForward) {
        if self.unrouted.len() >= UNROUTED_MAX {
            self.unrouted.pop_front();
        }
        self.unrouted.push_back(forward);
    }

    /// Hands a request to the leader: this monitor, a peer, or (none known) later.
    pub(crate) fn route(&mut self, now: Instant, forward: MonForward, out: &mut Vec<MonOutput>) {
        match self.known_leader {
            Some(leader) if leader == self.rank => self.lead_forward(now, forward, out),
            Some(leader) => match self.peer_conns.get(&leader) {
                Some(&conn) => out.push(MonOutput::Send(conn, Msg::MonForward(forward))),
                None => self.push_unrouted(forward),
            },
            None => self.push_unrouted(forward),
        }
    }

    /// Registers a client's command and routes it; it is answered on `conn`.
    pub(crate) fn accept_command(
        &mut self,
        now: Instant,
        conn: ConnId,
        from: EntityName,
        command: MonCommand,
        out: &mut Vec<MonOutput>,
    ) {
        if self.waiters.len() >= WAITERS_MAX {
            let reply = MonCommandReply {
                tid: command.tid,
                result: Err("the monitor is overloaded with commands; retry later".into()),
            };
            out.push(MonOutput::Send(conn, Msg::MonCommandReply(reply)));
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.waiters.insert(
            token,
            Waiter {
                conn,
                tid: command.tid,
                deadline: now + self.config.command_timeout,
            },
        );
        let inner = Msg::MonCommand(MonCommand {
            tid: token,
            command: command.command,
        });
        let forward = MonForward {
            origin_rank: self.rank,
            token,
            sender: from,
            inner_type: inner.msg_type(),
            inner: inner.encode_front(),
        };
        self.route(now, forward, out);
    }

    /// Answers the request `origin` names: here, or through its monitor.
    pub(crate) fn answer(
        &mut self,
        origin: Origin,
        result: Result<CommandOutput, String>,
        out: &mut Vec<MonOutput>,
    ) {
        if origin.rank == self.rank {
            if let Some(waiter) = self.waiters.remove(&origin.token) {
                let reply = MonCommandReply {
                    tid: waiter.tid,
                    result,
                };
                out.push(MonOutput::Send(waiter.conn, Msg::MonCommandReply(reply)));
            }
        } else if let Some(&conn) = self.peer_conns.get(&origin.rank) {
            let reply = MonCommandReply {
                tid: origin.token,
                result,
            };
            out.push(MonOutput::Send(conn, Msg::MonCommandReply(reply)));
        }
    }

    pub(crate) fn expire_waiters(&mut self, now: Instant, out: &mut Vec<MonOutput>) {
        let expired: Vec<u64> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.deadline <= now)
            .map(|(&token, _)| token)
            .collect();
        for token in expired {
            let origin = Origin {
                rank: self.rank,
                token,
            };
            let error = match self.known_leader {
                None => format!(
                    "no monitor quorum within {:?} (is a majority of the {} monitors running?)",
                    self.config.command_timeout,
                    self.ranks.len()
                ),
                Some(leader) => format!(
                    "mon.{leader} did not commit the command within {:?}; it may or may not have taken effect",
                    self.config.command_timeout
                ),
            };
            self.answer(origin, Err(error), out);
        }
    }

    /// Boots wait at the monitor the OSD talks to until a map shows the OSD up; they are
    /// idempotent, so resending one after a lost forward or a leader change is safe.
    pub(crate) fn resend_boots(&mut self, now: Instant, out: &mut Vec<MonOutput>) {
        let due: Vec<_> = self
            .pending_boots
            .iter()
            .filter(|(_, p)| {
                p.sent_at
                    .filter(|&at| now < at + BOOT_RESEND_INTERVAL)
                    .is_none()
            })
            .map(|(&osd, _)| osd)
            .collect();
        for osd in due {
            let pending = self.pending_boots.get_mut(&osd).expect("listed");
            if self.known_leader.is_none() {
                continue;
            }
            pending.sent_at = Some(now);
            let forward = pending.forward.clone();
            self.route(now, forward, out);
        }
    }

    pub(crate) fn add_pending_boot(&mut self, forward: MonForward, osd: carmine_types::OsdId) {
        self.pending_boots.insert(
            osd,
            PendingBoot {
                forward,
                sent_at: None,
            },
        );
    }

    /// Proposes the next queued change if this monitor leads and nothing is in flight.
    fn propose_next(&mut self, now: Instant, out: &mut Vec<MonOutput>) {
        if !self.is_leader() || self.in_flight.is_some() {
            return;
        }
        let Some(start) = self.leading_from_index else {
            return;
        };
        if self.applied_index < start {
            return;
        }
        while let Some(op) = self.queue.pop_front() {
            let Some(entry) = self.evaluate(now, op, out) else {
                continue;
            };
            let data = entry.to_bytes().to_vec();
            match self.raft.propose(Vec::new(), data) {
                Ok(()) => {
                    self.in_flight = Some(self.raft.raft.raft_log.last_index());
                }
                Err(error) => {
                    tracing::warn!("mon.{}: proposal refused: {error}", self.rank);
                    if let Some(origin) = entry.origin {
                        self.answer(
                            origin,
                            Err(format!("the monitor could not propose: {error}")),
                            out,
                        );
                    }
                }
            }
            return;
        }
    }
}

/// How often a boot waiting for the map is sent to the leader again.
const BOOT_RESEND_INTERVAL: Duration = Duration::from_secs(1);

fn stale_error() -> String {
    "the monitors changed leader while this command was being proposed; retry it".into()
}
