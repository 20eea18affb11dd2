//! Run-to-completion delivery: the connection's task hands each received message to a
//! [`Dispatch`] in place, and what the dispatcher sends goes straight into the
//! session's queue, out in the same vectored write as the turn's other frames. No
//! channel and no other task sits between the socket and the code handling the
//! message, in either direction.
//!
//! [`ChannelDispatch`] is the dispatcher behind [`super::serve`] and [`super::connect`]:
//! it forwards every message to an owner task as a [`NetEvent`].

use super::{Conn, ConnId, NetEvent, SendError, Shared};
use crate::config::Policy;
use crate::error::SessionError;
use crate::message::Message;
use crate::session::Session;
use carmine_types::EntityName;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc;

/// Handles one connection's messages on the connection's own task, one at a time and in
/// order. It must not block: it runs between a read and the write that follows it.
///
/// Replies (or any message to the same peer) go to the [`Outbox`]. A dispatcher
/// serving many connections that share state (an OSD shard's PGs) would hold a
/// handle to that state; the messenger makes no assumption about it.
///
/// [`super::serve_with`] and [`super::connect_with`] need a `Send` dispatcher (the
/// connection's task may run on any thread); [`super::serve_local_with`] and
/// [`super::connect_local_with`] take any dispatcher and run the task on the current
/// thread's `LocalSet`, so dispatchers of one thread may share state through an `Rc`
/// (an OSD shard: many connections, one set of PGs, no lock).
pub trait Dispatch: 'static {
    /// A message from the peer, delivered once and in order (exactly once across
    /// reconnects when lossless).
    fn on_message(&mut self, message: Message, out: &mut Outbox<'_>);

    /// Every message read in this turn has been delivered; what is sent now still
    /// leaves with the turn's write. A place to finish work batched over the turn's
    /// messages (an OSD makes the turn's writes durable once, then replies).
    fn on_turn_end(&mut self, out: &mut Outbox<'_>) {
        let _ = out;
    }

    /// The connection's task starts, before anything is read: a place to send the
    /// first requests. Called once (not again when a lossless session resumes).
    fn on_start(&mut self, out: &mut Outbox<'_>) {
        let _ = out;
    }

    /// The connection (and, when lossless, the session) is gone for good; called once,
    /// last.
    fn on_closed(&mut self, reason: &str) {
        let _ = reason;
    }
}

/// A boxed dispatcher dispatches: code that picks dispatchers at run time (a factory
/// of `Box<dyn Dispatch>`) can pass them where a `D: Dispatch` is expected.
impl<D: Dispatch + ?Sized> Dispatch for Box<D> {
    fn on_message(&mut self, message: Message, out: &mut Outbox<'_>) {
        (**self).on_message(message, out)
    }

    fn on_turn_end(&mut self, out: &mut Outbox<'_>) {
        (**self).on_turn_end(out)
    }

    fn on_start(&mut self, out: &mut Outbox<'_>) {
        (**self).on_start(out)
    }

    fn on_closed(&mut self, reason: &str) {
        (**self).on_closed(reason)
    }
}

/// Where a [`Dispatch`] sends: the connection's session queue.
pub struct Outbox<'a> {
    pub(super) conn_id: ConnId,
    pub(super) peer: EntityName,
    pub(super) now: Instant,
    pub(super) session: &'a mut Session,
    pub(super) conn: &'a mut Conn,
    pub(super) shared: &'a Shared,
}

impl Outbox<'_> {
    pub fn conn_id(&self) -> ConnId {
        self.conn_id
    }

    pub fn peer(&self) -> EntityName {
        self.peer
    }

    /// When the turn that delivered this message started (one clock read per turn).
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Queues a message to the peer; it leaves with the turn's write. Fails when the
    /// session's queue (unsent, or unacknowledged when lossless) and, lossy, the
    /// socket's write backlog are full, or when the message is over the frame limit.
    pub fn send(&mut self, message: Message) -> Result<(), SendError> {
        let bytes = message.payload_bytes();
        if !self.session.has_send_room_for(bytes) && self.session.policy() == Policy::Lossy {
            // A lossy queue empties once encoded: move it into the write backlog while
            // that has room, instead of refusing.
            if self.conn.pending_bytes < self.shared.queued_bytes_max {
                self.conn.queue_from(self.session);
            }
        }
        if !self.session.has_send_room_for(bytes) {
            return Err(SendError::QueueFull);
        }
        self.session
            .send(self.now, message)
            .map_err(|error| match error {
                SessionError::QueueFull { .. } => SendError::QueueFull,
                SessionError::MessageTooLarge { .. } => SendError::TooLarge,
                _ => SendError::Closed,
            })
    }

    /// Whether a message of `payload_bytes` would be accepted now (without moving
    /// anything into the write backlog).
    pub fn has_room_for(&self, payload_bytes: usize) -> bool {
        self.session.has_send_room_for(payload_bytes)
    }

    /// Closes the connection after this turn, telling the peer.
    pub fn close(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        self.shared.close_requested.notify_one();
    }
}

/// Forwards messages to an owner task as [`NetEvent`]s (the [`super::serve`] /
/// [`super::connect`] API). The owner replies through a [`super::ConnectionHandle`],
/// which crosses back to this task through the handle's queue.
pub(super) struct ChannelDispatch {
    pub(super) conn_id: ConnId,
    pub(super) peer: EntityName,
    pub(super) events: mpsc::UnboundedSender<NetEvent>,
}

impl Dispatch for ChannelDispatch {
    fn on_message(&mut self, message: Message, out: &mut Outbox<'_>) {
        let event = NetEvent::Message {
            conn_id: self.conn_id,
            peer: self.peer,
            message,
        };
        if self.events.send(event).is_err() {
            tracing::debug!(conn_id = self.conn_id, "messenger: event receiver dropped");
            out.close();
        }
    }

    fn on_closed(&mut self, reason: &str) {
        let _ = self.events.send(NetEvent::Closed {
            conn_id: self.conn_id,
            peer: Some(self.peer),
            reason: reason.to_string(),
        });
    }
}
