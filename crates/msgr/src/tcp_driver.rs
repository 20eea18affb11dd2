//! The per-connection task's loops: running a connection, and recovering a lossless
//! session (connector: reconnect with backoff; acceptor: stand by for a resume).

use super::{
    open_connection, Conn, Dispatch, Driver, Fault, Outbox, Resume, Role, CLOSE_FLUSH_TIMEOUT,
    COMMANDS_PER_TURN_MAX, RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN,
};
use crate::error::SessionError;
use crate::message::Message;
use crate::session::SessionEvent;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// A deadline far enough away to mean "none".
const FAR_FUTURE: Duration = Duration::from_secs(86_400);

/// Which directions of a socket are ready.
struct IoReady {
    readable: bool,
    writable: bool,
}

/// Polls read readiness, and write readiness when there is something to write. Uses
/// the socket's per-direction waker slots rather than a `ready()` future per turn.
fn poll_ready(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    want_write: bool,
) -> Poll<io::Result<IoReady>> {
    let readable = match stream.poll_read_ready(cx) {
        Poll::Ready(Ok(())) => true,
        Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
        Poll::Pending => false,
    };
    let writable = want_write
        && match stream.poll_write_ready(cx) {
            Poll::Ready(Ok(())) => true,
            Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
            Poll::Pending => false,
        };
    if readable || writable {
        Poll::Ready(Ok(IoReady { readable, writable }))
    } else {
        Poll::Pending
    }
}

/// What woke the connection's task; several sources may be ready at once.
#[derive(Default)]
struct Wake {
    io: Option<io::Result<IoReady>>,
    /// A message (or, `None`, the news that every handle is gone) from the handles.
    command: Option<Option<Message>>,
    close: bool,
    resume: Option<Box<Resume>>,
}

/// Which wake-up registrations still hold this task's waker, so that the next wait
/// need not renew them (each renewal costs a poll; a round trip takes two waits).
#[derive(Default)]
struct Registered {
    waker: Option<Waker>,
    /// `commands.poll_recv` returned pending: a send will wake us.
    commands: bool,
    /// The close `Notified` was polled: `close()` will wake us (it sets the closed
    /// flag first, which is what we check).
    close: bool,
    /// The sleep was polled since it was last reset.
    sleep: bool,
}

impl Registered {
    /// Forgets every registration if the task's waker changed.
    fn check_waker(&mut self, cx: &Context<'_>) {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *self = Registered {
                waker: Some(cx.waker().clone()),
                ..Registered::default()
            };
        }
    }
}

impl<D: Dispatch + ?Sized> Driver<D> {
    /// Runs one connection until it fails or is closed.
    ///
    /// Each turn: hand received messages to the dispatcher, move queued frames to the
    /// socket, check timeouts, then wait for the socket, the handles' queue, a close,
    /// the timer or (lossless acceptor) a resuming connection, and handle everything
    /// that is ready, in that order. Every ready source is handled in the same turn,
    /// so neither a flood of outgoing messages nor a flood of incoming bytes starves
    /// the other. The clock is read once per turn.
    pub(super) async fn run_connected(&mut self, conn: &mut Conn, role: &mut Role) -> Fault {
        let sleep = tokio::time::sleep(FAR_FUTURE);
        tokio::pin!(sleep);
        let shared = self.shared.clone();
        let close = shared.close_requested.notified();
        tokio::pin!(close);
        let mut armed: Option<Instant> = None;
        let mut registered = Registered::default();
        let write_delay = self.session.config().faults.write_delay;
        let mut now = Instant::now();
        loop {
            if shared.closed.load(Ordering::Relaxed) {
                return self.close_gracefully(conn).await;
            }
            self.turn(conn, now);
            if !write_delay.is_zero() && !conn.pending.is_empty() {
                tokio::time::sleep(write_delay).await;
            }
            if let Err(error) = conn.try_flush() {
                return self.fail(conn, Fault::Io(error)).await;
            }
            // Timeouts are checked here, not only when the timer fires, so a busy
            // socket cannot starve them; the timer just wakes an idle task. It only
            // moves earlier: firing early is harmless and most turns move the
            // deadline later.
            match self.session.poll_timeout() {
                Some(at) if at <= now => {
                    if let Err(error) = self.session.handle_timeout(now) {
                        return self.fail(conn, Fault::Session(error)).await;
                    }
                    now = Instant::now();
                    continue;
                }
                Some(at) if armed.is_none_or(|armed| at < armed) => {
                    sleep.as_mut().reset(at.into());
                    armed = Some(at);
                    registered.sleep = false;
                }
                _ => {}
            }
            let want_write = !conn.pending.is_empty();
            let can_take = self.can_take() && conn.pending_bytes < shared.queued_bytes_max;
            let mut first_poll = true;
            let wake = std::future::poll_fn(|cx| {
                registered.check_waker(cx);
                let mut wake = Wake::default();
                if let Poll::Ready(ready) = poll_ready(&conn.stream, cx, want_write) {
                    wake.io = Some(ready);
                }
                if can_take && (!registered.commands || !self.commands.is_empty()) {
                    match self.commands.poll_recv(cx) {
                        Poll::Ready(command) => {
                            wake.command = Some(command);
                            registered.commands = false;
                        }
                        Poll::Pending => registered.commands = true,
                    }
                }
                if shared.closed.load(Ordering::Relaxed) {
                    wake.close = true;
                } else if !registered.close {
                    wake.close = close.as_mut().poll(cx).is_ready();
                    registered.close = true;
                }
                if let Role::Acceptor {
                    resumes,
                    key: Some(_),
                    ..
                } = role
                {
                    if let Poll::Ready(Some(resume)) = resumes.poll_recv(cx) {
                        wake.resume = Some(resume);
                    }
                }
                let woken = wake.io.is_some()
                    || wake.command.is_some()
                    || wake.close
                    || wake.resume.is_some();
                // A wake-up nothing above explains is the timer's: poll it then (it
                // is also polled once after each reset, to register).
                let unexplained = !first_poll && !woken;
                first_poll = false;
                if armed.is_some() && (!registered.sleep || unexplained) {
                    registered.sleep = true;
                    if sleep.as_mut().poll(cx).is_ready() {
                        armed = None;
                        return Poll::Ready(wake);
                    }
                }
                match woken {
                    true => Poll::Ready(wake),
                    false => Poll::Pending,
                }
            })
            .await;
            now = Instant::now();
            if armed.is_some_and(|at| at <= now) {
                // Spent (fired, or about to): the next deadline arms it afresh even
                // when the firing went unobserved behind another wake-up.
                armed = None;
            }
            if wake.close {
                return self.close_gracefully(conn).await;
            }
            let mut result = Ok(());
            if let Some(resume) = wake.resume {
                result = self.resume_while_connected(conn, *resume);
            }
            if let (Some(ready), Ok(())) = (wake.io, &result) {
                result = self.on_ready(conn, ready, now);
            }
            if let Some(command) = wake.command {
                self.take_commands(command, now);
            }
            if let Err(fault) = result {
                return self.fail(conn, fault).await;
            }
        }
    }

    /// Delivers events, retries a stashed message, and moves what is queued to the
    /// socket's write backlog.
    fn turn(&mut self, conn: &mut Conn, now: Instant) {
        self.deliver_events(conn, now);
        if let Some(message) = self.stash.take() {
            self.queue_message(message, now);
        }
        conn.queue_from(&mut self.session);
    }

    /// Tries to flush the `Close` frame a fatal session error queued, then gives up
    /// the connection.
    async fn fail(&mut self, conn: &mut Conn, fault: Fault) -> Fault {
        if !fault.recoverable() {
            conn.queue_from(&mut self.session);
            let _ = tokio::time::timeout(CLOSE_FLUSH_TIMEOUT, conn.flush()).await;
        }
        fault
    }

    fn on_ready(
        &mut self,
        conn: &mut Conn,
        ready: io::Result<IoReady>,
        now: Instant,
    ) -> Result<(), Fault> {
        let ready = ready.map_err(Fault::Io)?;
        if ready.readable && conn.try_read(&mut self.session).map_err(Fault::Io)? {
            self.session.handle_buffered(now).map_err(Fault::Session)?;
        }
        if ready.writable {
            conn.try_flush().map_err(Fault::Io)?;
        }
        Ok(())
    }

    fn can_take(&self) -> bool {
        !self.commands_closed && self.stash.is_none() && self.session.has_send_room()
    }

    /// Moves messages from the handles' queue into the session while it has room.
    fn take_commands(&mut self, first: Option<Message>, now: Instant) {
        let Some(first) = first else {
            // Every handle is gone; the peer may still talk to us.
            self.commands_closed = true;
            return;
        };
        self.queue_message(first, now);
        for _ in 1..COMMANDS_PER_TURN_MAX {
            if self.stash.is_some() || !self.session.has_send_room() {
                return;
            }
            match self.commands.try_recv() {
                Ok(message) => self.queue_message(message, now),
                Err(_) => return,
            }
        }
    }

    fn queue_message(&mut self, message: Message, now: Instant) {
        let bytes = message.payload_bytes();
        if !self.session.has_send_room_for(bytes) {
            self.stash = Some(message);
            return;
        }
        self.shared.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if let Err(error) = self.session.send(now, message) {
            tracing::warn!(conn_id = self.id, %error, "messenger: message dropped");
        }
    }

    /// Hands every received message to the dispatcher; what it sends is queued in the
    /// session, to leave with this turn's write.
    fn deliver_events(&mut self, conn: &mut Conn, now: Instant) {
        let mut delivered = false;
        while let Some(event) = self.session.poll_event() {
            match event {
                SessionEvent::Message(message) => {
                    let mut out = Outbox {
                        conn_id: self.id,
                        peer: self.peer,
                        now,
                        session: &mut self.session,
                        conn,
                        shared: &self.shared,
                    };
                    self.dispatch.on_message(message, &mut out);
                    delivered = true;
                }
                SessionEvent::PeerReset => {
                    tracing::warn!(conn_id = self.id, peer = %self.peer, "messenger: peer lost our session; restarted it")
                }
                other => tracing::debug!(conn_id = self.id, ?other, "messenger: session event"),
            }
        }
        if delivered {
            let mut out = Outbox {
                conn_id: self.id,
                peer: self.peer,
                now,
                session: &mut self.session,
                conn,
                shared: &self.shared,
            };
            self.dispatch.on_turn_end(&mut out);
        }
    }

    async fn close_gracefully(&mut self, conn: &mut Conn) -> Fault {
        self.session.close("connection closed by its owner");
        conn.queue_from(&mut self.session);
        let _ = tokio::time::timeout(CLOSE_FLUSH_TIMEOUT, conn.flush()).await;
        Fault::ClosedLocally
    }

    /// A resuming connection arrived while the old one still looks alive.
    fn resume_while_connected(&mut self, conn: &mut Conn, resume: Resume) -> Result<(), Fault> {
        let new_conn = self.adopt(resume)?;
        *conn = new_conn; // the old socket closes here
        Ok(())
    }

    /// Continues the session on a resuming connection; hands it back if impossible.
    fn adopt(&mut self, resume: Resume) -> Result<Conn, Fault> {
        let Resume {
            conn,
            mut fresh,
            answer,
        } = resume;
        match self.session.resume(Instant::now(), &mut fresh) {
            Ok(()) => {
                let _ = answer.send(None);
                tracing::info!(conn_id = self.id, peer = %self.peer, "messenger: session resumed");
                Ok(conn)
            }
            Err(error @ SessionError::CannotResume { .. }) => {
                let _ = answer.send(Some((conn, fresh)));
                Err(Fault::Session(error))
            }
            Err(error) => {
                let _ = answer.send(None);
                Err(Fault::Session(error))
            }
        }
    }

    /// Lossless acceptor without a connection: keeps queueing, waits for a resume.
    pub(super) async fn standby(
        &mut self,
        resumes: &mut mpsc::Receiver<Box<Resume>>,
    ) -> Result<Conn, Fault> {
        loop {
            let deadline = self
                .session
                .poll_timeout()
                .unwrap_or_else(|| Instant::now() + FAR_FUTURE);
            let can_take = self.can_take();
            tokio::select! {
                resume = resumes.recv() => match resume {
                    Some(resume) => match self.adopt(*resume) {
                        Ok(conn) => return Ok(conn),
                        Err(fault) if fault.recoverable() => continue,
                        Err(fault) => return Err(fault),
                    },
                    None => return Err(Fault::Session(SessionError::Closed)),
                },
                command = self.commands.recv(), if can_take => {
                    self.take_commands(command, Instant::now())
                }
                _ = self.shared.close_requested.notified() => return Err(Fault::ClosedLocally),
                _ = tokio::time::sleep_until(deadline.into()) => {
                    self.session.handle_timeout(Instant::now()).map_err(Fault::Session)?;
                }
            }
        }
    }

    /// Lossless connector: reconnects with backoff until the handshake succeeds or the
    /// reconnect window passes.
    pub(super) async fn reconnect(&mut self, addr: SocketAddr) -> Result<Conn, Fault> {
        let config = self.session.config();
        let window = config.reconnect_window;
        let mut window_end = Instant::now() + window;
        let attempt_timeout = config.handshake_timeout;
        let mut backoff = RECONNECT_BACKOFF_MIN;
        let mut attempts = 0u64;
        loop {
            if Instant::now() >= window_end {
                let error = SessionError::ReconnectWindowExpired { after: window };
                return Err(Fault::Session(error));
            }
            attempts += 1;
            let established_before = self.session.established_count();
            self.session.reconnect(Instant::now());
            let attempt =
                tokio::time::timeout(attempt_timeout, open_connection(addr, &mut self.session));
            let failure = tokio::select! {
                result = attempt => match result {
                    Ok(Ok(conn)) => {
                        tracing::info!(conn_id = self.id, %addr, attempts, "messenger: reconnected");
                        return Ok(conn);
                    }
                    Ok(Err(fault)) if !fault.recoverable() => return Err(fault),
                    Ok(Err(fault)) => fault,
                    Err(_) => Fault::TimedOut,
                },
                _ = self.shared.close_requested.notified() => return Err(Fault::ClosedLocally),
            };
            tracing::debug!(conn_id = self.id, %addr, %failure, attempts, "messenger: reconnect failed");
            self.session.handle_transport_closed(Instant::now());
            if self.session.established_count() > established_before {
                // The handshake went through and the fault came after: the peer is
                // there, so try again at once.
                backoff = RECONNECT_BACKOFF_MIN;
                window_end = Instant::now() + window;
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.shared.close_requested.notified() => return Err(Fault::ClosedLocally),
            }
            backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
        }
    }
}
