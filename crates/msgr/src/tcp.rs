//! The thin tokio driver: TCP connections running [`Session`]s.
//!
//! One task per connection owns the socket and the session. Each turn it reads once
//! into the session's receive buffer (every complete frame is decoded from it, segments
//! are slices of that buffer), hands each message to the connection's [`Dispatch`],
//! then gathers every queued frame into one vectored write. Sockets use `TCP_NODELAY`.
//! The tasks are `Send`, for `tokio::spawn` on any runtime.
//!
//! Two ways to use a connection:
//!
//! - [`serve_with`] / [`connect_with`]: a [`Dispatch`] runs on the connection's task and
//!   replies through an [`Outbox`] straight into the session (run to completion: no
//!   task hop between the socket and the handler in either direction);
//! - [`serve`] / [`connect`]: messages go to an owner task as [`NetEvent`]s over an
//!   unbounded channel, and the owner sends through a [`ConnectionHandle`], whose
//!   queue the connection's task drains (two task hops per message and direction).
//!
//! Either way a [`ConnectionHandle`] can send from any task.
//!
//! A lossless connector reconnects after a recoverable fault and replays, keeping the
//! same [`ConnectionHandle`]; a lossless acceptor keeps its session for
//! `reconnect_window` and hands a resuming connection to it (a registry inside
//! [`serve`] maps `(peer, client_cookie)` to the waiting session). Every failure
//! closes the connection with one `tracing` line; nothing here panics on peer input.

use crate::config::{Policy, SessionConfig};
use crate::error::SessionError;
use crate::message::Message;
use crate::session::{Session, SessionEvent};
use bytes::{Buf, Bytes};
use carmine_types::{EntityName, ShardIndex};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Notify};

#[path = "tcp_dispatch.rs"]
mod dispatch;
use dispatch::ChannelDispatch;
pub use dispatch::{Dispatch, Outbox};

/// A connection's process-unique id.
pub type ConnId = u64;

/// Bytes reserved in the receive buffer when too little room is left in it.
const READ_BYTES_MIN: usize = 128 * 1024;
/// Reads go into the room left in the receive buffer while there is at least this
/// much. Received messages are slices of the buffer, so while one is alive reserving
/// means a fresh allocation (and fresh pages to fault in); reserving before every read,
/// as this driver once did, took a new 128 KiB buffer for a few KiB per read.
const READ_SPARE_BYTES_MIN: usize = 16 * 1024;
const _: () = assert!(READ_SPARE_BYTES_MIN < READ_BYTES_MIN);
/// Most buffers handed to one vectored write (an array of them lives on the stack);
/// a message of more than `SEGMENT_COPY_BYTES_MAX` bytes takes two.
const WRITE_SLICES_MAX: usize = 256;
/// Up to this many pending buffers are written from a small array.
const WRITE_SLICES_FEW: usize = 8;
/// Most messages moved from a handle's queue into the session per turn.
const COMMANDS_PER_TURN_MAX: usize = 1024;
/// First and last pause between reconnect attempts.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Time allowed to flush a `Close` frame.
const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_millis(200);
/// Most resume requests waiting for one session.
const RESUME_QUEUE_MAX: usize = 4;

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// What the driver reports to its owner (over the unbounded channel the owner passes
/// in, so the owner must keep draining it).
#[derive(Debug)]
#[non_exhaustive]
pub enum NetEvent {
    /// An accepted session is established ([`connect`] returns its handle instead).
    Established {
        conn: ConnectionHandle,
        peer: EntityName,
        peer_shard: ShardIndex,
    },
    Message {
        conn_id: ConnId,
        peer: EntityName,
        message: Message,
    },
    /// The connection (and, when lossless, the session) is gone for good.
    Closed {
        conn_id: ConnId,
        peer: Option<EntityName>,
        reason: String,
    },
}

/// Why [`ConnectionHandle::send`] refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    #[error("send queue full")]
    QueueFull,
    #[error("connection closed")]
    Closed,
    #[error("message exceeds the frame limit")]
    TooLarge,
}

/// Why [`connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    #[error("connect: {0}")]
    Io(#[from] io::Error),
    #[error("connect and handshake did not complete within {after:?}")]
    TimedOut { after: Duration },
    #[error("handshake failed: {0}")]
    Session(#[from] SessionError),
}

/// State shared by a connection's task and its handles.
#[derive(Debug)]
struct Shared {
    closed: AtomicBool,
    close_requested: Notify,
    queued_bytes: AtomicUsize,
    queued_bytes_max: usize,
}

/// A cheap, clonable handle to a connection: send messages, close it. A lossless
/// connector's handle stays the same across reconnects.
///
/// Bounds: the handle's queue holds at most `send_queue_messages_max` messages and
/// `send_queue_bytes_max` payload bytes; behind it the session's queue (unsent, or
/// unacknowledged when lossless) and the socket's write backlog are bounded by the
/// same limits, so one connection holds at most about three times those limits.
#[derive(Debug, Clone)]
pub struct ConnectionHandle {
    id: ConnId,
    peer: EntityName,
    peer_shard: ShardIndex,
    commands: mpsc::Sender<Message>,
    shared: Arc<Shared>,
}

impl ConnectionHandle {
    /// A new connection's handle, and the receiving end of its queue.
    fn new(
        config: &SessionConfig,
        peer: EntityName,
        peer_shard: ShardIndex,
    ) -> (ConnectionHandle, mpsc::Receiver<Message>) {
        let (sender, commands) = mpsc::channel(config.send_queue_messages_max);
        let shared = Arc::new(Shared {
            closed: AtomicBool::new(false),
            close_requested: Notify::new(),
            queued_bytes: AtomicUsize::new(0),
            queued_bytes_max: config.send_queue_bytes_max,
        });
        let handle = ConnectionHandle {
            id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
            peer,
            peer_shard,
            commands: sender,
            shared,
        };
        (handle, commands)
    }

    pub fn id(&self) -> ConnId {
        self.id
    }

    pub fn peer(&self) -> EntityName {
        self.peer
    }

    pub fn peer_shard(&self) -> ShardIndex {
        self.peer_shard
    }

    /// Queues a message without waiting; fails when the bounded queue is full.
    pub fn send(&self, message: Message) -> Result<(), SendError> {
        if self.shared.closed.load(Ordering::Relaxed) {
            return Err(SendError::Closed);
        }
        let bytes = message.payload_bytes();
        let before = self.shared.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        if before > 0 && before + bytes > self.shared.queued_bytes_max {
            self.shared.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
            return Err(SendError::QueueFull);
        }
        self.commands.try_send(message).map_err(|error| {
            self.shared.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
            match error {
                mpsc::error::TrySendError::Full(_) => SendError::QueueFull,
                mpsc::error::TrySendError::Closed(_) => SendError::Closed,
            }
        })
    }

    /// Closes the connection (after sending a `Close` frame to the peer).
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        self.shared.close_requested.notify_one();
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Relaxed)
    }
}

/// A socket plus the bytes waiting to be written to it.
struct Conn {
    stream: TcpStream,
    pending: VecDeque<Bytes>,
    pending_bytes: usize,
    gather: Vec<Bytes>,
}

impl Conn {
    fn new(stream: TcpStream) -> io::Result<Conn> {
        stream.set_nodelay(true)?;
        crate::idle_poll::watch(&stream);
        Ok(Conn {
            stream,
            pending: VecDeque::new(),
            pending_bytes: 0,
            gather: Vec::new(),
        })
    }

    fn queue_from(&mut self, session: &mut Session) {
        self.pending_bytes += session.poll_transmit(&mut self.gather);
        self.pending.extend(self.gather.drain(..));
    }

    /// Writes as much as the socket takes now, many buffers per system call.
    fn try_flush(&mut self) -> io::Result<()> {
        while !self.pending.is_empty() {
            let written = match self.pending.len() {
                1..=WRITE_SLICES_FEW => self.write_some::<WRITE_SLICES_FEW>(),
                _ => self.write_some::<WRITE_SLICES_MAX>(),
            };
            let written = match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => written,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) => return Err(error),
            };
            self.consume(written);
        }
        Ok(())
    }

    /// One vectored write of up to `N` pending buffers (their slices live on the
    /// stack: a small array when little is pending, so a lone reply does not pay
    /// for initialising a large one).
    fn write_some<const N: usize>(&self) -> io::Result<usize> {
        let mut slices = [IoSlice::new(&[]); N];
        let mut count = 0;
        for (slot, chunk) in slices.iter_mut().zip(&self.pending) {
            *slot = IoSlice::new(chunk);
            count += 1;
        }
        self.stream.try_write_vectored(&slices[..count])
    }

    fn consume(&mut self, mut written: usize) {
        self.pending_bytes -= written;
        while written > 0 {
            let front = self.pending.front_mut().expect("wrote more than pending");
            if front.len() <= written {
                written -= front.len();
                self.pending.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        loop {
            self.try_flush()?;
            if self.pending.is_empty() {
                return Ok(());
            }
            self.stream.writable().await?;
        }
    }

    /// Reads what is there into the session's buffer; `Ok(false)` if nothing was.
    ///
    /// A read shorter than the space offered means the socket is drained, so the
    /// readiness is cleared right away instead of after one more read that would
    /// only return `WouldBlock` (tokio only clears it if no event arrived meanwhile).
    fn try_read(&mut self, session: &mut Session) -> io::Result<bool> {
        let buffer = session.receive_buffer();
        if buffer.is_empty() {
            // Once no received message shares the buffer any more, reading starts
            // again at its beginning (no copy: it is empty), so each read lands in
            // memory the last one warmed, in the cache and the TLB, instead of walking
            // through all of it; with many connections those walks add up to more
            // than the cache holds. A no-op while a message still holds a slice.
            let _reclaimed = buffer.try_reclaim(buffer.capacity() + 1);
        }
        if buffer.capacity() - buffer.len() < READ_SPARE_BYTES_MIN {
            buffer.reserve(READ_BYTES_MIN);
        }
        let spare = buffer.capacity() - buffer.len();
        let mut received = 0;
        let stream = &self.stream;
        let result = stream.try_io(Interest::READABLE, || {
            received = stream.try_read_buf(buffer)?;
            match received {
                0 => Ok(0),
                short if short < spare => Err(io::ErrorKind::WouldBlock.into()),
                full => Ok(full),
            }
        });
        match result {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection",
            )),
            Ok(_) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Ok(received > 0),
            Err(error) => Err(error),
        }
    }
}

/// Why a connection ended.
#[derive(Debug)]
enum Fault {
    Io(io::Error),
    Session(SessionError),
    TimedOut,
    ClosedLocally,
}

impl Fault {
    fn recoverable(&self) -> bool {
        match self {
            Fault::Io(_) | Fault::TimedOut => true,
            Fault::Session(error) => error.is_recoverable(),
            Fault::ClosedLocally => false,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Io(error) => write!(f, "connection error: {error}"),
            Fault::Session(error) => write!(f, "{error}"),
            Fault::TimedOut => write!(f, "handshake timed out"),
            Fault::ClosedLocally => write!(f, "closed locally"),
        }
    }
}

/// Runs the handshake until the session is established (or, on a lossless acceptor,
/// waits for a resume decision).
async fn handshake(conn: &mut Conn, session: &mut Session) -> Result<(), Fault> {
    loop {
        conn.queue_from(session);
        conn.flush().await.map_err(Fault::Io)?;
        if session.is_established() || session.resume_pending() {
            return Ok(());
        }
        if session.is_closed() {
            return Err(Fault::Session(SessionError::Closed));
        }
        let deadline = session.poll_timeout().unwrap_or_else(Instant::now);
        tokio::select! {
            readable = conn.stream.readable() => {
                readable.map_err(Fault::Io)?;
                if conn.try_read(session).map_err(Fault::Io)? {
                    session
                        .handle_buffered(Instant::now())
                        .map_err(Fault::Session)?;
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                session.handle_timeout(Instant::now()).map_err(Fault::Session)?;
            }
        }
    }
}

/// A process-unique, non-zero cookie (drivers may use clocks; sessions may not).
fn new_cookie() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    (nanos ^ (u64::from(std::process::id()) << 40)).wrapping_add(count.wrapping_mul(0x9e37_79b9))
        | 1
}

/// Connects to `addr` and returns once the session is established. Messages from the
/// peer and the final `Closed` go to `events` (no `Established` event: the handle is
/// the result). A lossless session reconnects and replays behind the same handle.
pub async fn connect(
    addr: SocketAddr,
    config: SessionConfig,
    target_shard: ShardIndex,
    events: mpsc::UnboundedSender<NetEvent>,
) -> Result<ConnectionHandle, ConnectError> {
    connect_with(addr, config, target_shard, |handle| ChannelDispatch {
        conn_id: handle.id(),
        peer: handle.peer(),
        events,
    })
    .await
}

/// Connects to `addr` and returns once the session is established; from then on the
/// connection's task hands every message from the peer to the dispatcher `make`
/// builds (given the connection's handle), and reports the end to it. A lossless
/// session reconnects and replays behind the same handle and dispatcher.
pub async fn connect_with<D: Dispatch + Send>(
    addr: SocketAddr,
    config: SessionConfig,
    target_shard: ShardIndex,
    make: impl FnOnce(&ConnectionHandle) -> D,
) -> Result<ConnectionHandle, ConnectError> {
    let (session, conn, handle, commands) = connect_session(addr, config, target_shard).await?;
    let dispatch: Box<dyn Dispatch + Send> = Box::new(make(&handle));
    let driver = Driver::new(session, &handle, commands, dispatch);
    tokio::spawn(driver.run(conn, Role::Connector { addr }));
    Ok(handle)
}

/// [`connect_with`] for a dispatcher that is not `Send`: the connection's task runs on
/// the current thread's `LocalSet` (call from inside one).
pub async fn connect_local_with<D: Dispatch>(
    addr: SocketAddr,
    config: SessionConfig,
    target_shard: ShardIndex,
    make: impl FnOnce(&ConnectionHandle) -> D,
) -> Result<ConnectionHandle, ConnectError> {
    let (session, conn, handle, commands) = connect_session(addr, config, target_shard).await?;
    let dispatch: Box<dyn Dispatch> = Box::new(make(&handle));
    let driver = Driver::new(session, &handle, commands, dispatch);
    tokio::task::spawn_local(driver.run(conn, Role::Connector { addr }));
    Ok(handle)
}

/// Connects, completes the handshake and makes the connection's handle.
async fn connect_session(
    addr: SocketAddr,
    config: SessionConfig,
    target_shard: ShardIndex,
) -> Result<(Session, Conn, ConnectionHandle, mpsc::Receiver<Message>), ConnectError> {
    let mut session = Session::connect(config, target_shard, Instant::now());
    session.set_cookie(new_cookie());
    let conn = establish(addr, &mut session).await?;
    let Some(SessionEvent::Established { peer, peer_shard }) = session.poll_event() else {
        let error = io::Error::other("session established without an Established event");
        return Err(ConnectError::Io(error));
    };
    let (handle, commands) = ConnectionHandle::new(session.config(), peer, peer_shard);
    tracing::debug!(conn_id = handle.id, %peer, %addr, "messenger: connected");
    Ok((session, conn, handle, commands))
}

/// Connects and completes the first handshake before the handshake timeout. A lossless
/// session retries after recoverable faults (with backoff) until then.
async fn establish(addr: SocketAddr, session: &mut Session) -> Result<Conn, ConnectError> {
    let after = session.config().handshake_timeout;
    let deadline = tokio::time::Instant::now() + after;
    let mut backoff = RECONNECT_BACKOFF_MIN;
    loop {
        let fault = match tokio::time::timeout_at(deadline, open_connection(addr, session)).await {
            Err(_) => return Err(ConnectError::TimedOut { after }),
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(fault)) => fault,
        };
        if session.policy() != Policy::Lossless || !fault.recoverable() {
            return Err(match fault {
                Fault::Io(error) => ConnectError::Io(error),
                Fault::Session(error) => ConnectError::Session(error),
                other => ConnectError::Io(io::Error::other(other.to_string())),
            });
        }
        tracing::debug!(%addr, %fault, "messenger: connect attempt failed, retrying");
        session.handle_transport_closed(Instant::now());
        if tokio::time::timeout_at(deadline, tokio::time::sleep(backoff))
            .await
            .is_err()
        {
            return Err(ConnectError::TimedOut { after });
        }
        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
        session.reconnect(Instant::now());
    }
}

async fn open_connection(addr: SocketAddr, session: &mut Session) -> Result<Conn, Fault> {
    let stream = TcpStream::connect(addr).await.map_err(Fault::Io)?;
    let mut conn = Conn::new(stream).map_err(Fault::Io)?;
    session.set_addresses(conn.stream.local_addr().ok(), Some(addr));
    handshake(&mut conn, session).await?;
    Ok(conn)
}

/// Accepts connections until `events`' receiver is dropped. Each established session
/// reports `Established`, then its messages, then `Closed`.
pub async fn serve(
    listener: TcpListener,
    config: SessionConfig,
    events: mpsc::UnboundedSender<NetEvent>,
) {
    let stop = events.clone();
    let make = move |handle: &ConnectionHandle| {
        let established = NetEvent::Established {
            conn: handle.clone(),
            peer: handle.peer(),
            peer_shard: handle.peer_shard(),
        };
        events.send(established).ok()?;
        Some(ChannelDispatch {
            conn_id: handle.id(),
            peer: handle.peer(),
            events: events.clone(),
        })
    };
    serve_until(listener, config, make, stop.closed()).await
}

/// Accepts connections (until the task running this is dropped). For each established
/// session `make` is given the connection's handle and returns its dispatcher (or
/// `None` to refuse it); the connection's task then hands every message to it.
pub async fn serve_with<D, F>(listener: TcpListener, config: SessionConfig, make: F)
where
    D: Dispatch + Send,
    F: Fn(&ConnectionHandle) -> Option<D> + Send + Sync + 'static,
{
    serve_until(listener, config, make, std::future::pending()).await
}

/// [`serve_with`] for dispatchers that are not `Send`: every connection's task runs on
/// the current thread's `LocalSet` (call from inside one), so the dispatchers of one
/// listener may share state through an `Rc` without a lock.
pub async fn serve_local_with<D, F>(listener: TcpListener, config: SessionConfig, make: F)
where
    D: Dispatch,
    F: Fn(&ConnectionHandle) -> Option<D> + 'static,
{
    let make = std::rc::Rc::new(make);
    let registry = Arc::new(Registry::default());
    accept_loop(listener, std::future::pending(), |stream, peer_addr| {
        let make = make.clone();
        let make =
            move |handle: &ConnectionHandle| make(handle).map(|d| Box::new(d) as Box<dyn Dispatch>);
        let task = accept_one(stream, peer_addr, config.clone(), make, registry.clone());
        tokio::task::spawn_local(task);
    })
    .await
}

async fn serve_until<D, F>(
    listener: TcpListener,
    config: SessionConfig,
    make: F,
    stop: impl std::future::Future<Output = ()>,
) where
    D: Dispatch + Send,
    F: Fn(&ConnectionHandle) -> Option<D> + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let registry = Arc::new(Registry::default());
    accept_loop(listener, stop, |stream, peer_addr| {
        let make = make.clone();
        let make = move |handle: &ConnectionHandle| {
            make(handle).map(|d| Box::new(d) as Box<dyn Dispatch + Send>)
        };
        let task = accept_one(stream, peer_addr, config.clone(), make, registry.clone());
        tokio::spawn(task);
    })
    .await
}

/// Accepts connections until `stop`, handing each to `spawn_accepted`.
async fn accept_loop(
    listener: TcpListener,
    stop: impl std::future::Future<Output = ()>,
    mut spawn_accepted: impl FnMut(TcpStream, SocketAddr),
) {
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stop => return,
        };
        match accepted {
            Ok((stream, peer_addr)) => spawn_accepted(stream, peer_addr),
            Err(error) => {
                tracing::warn!(%error, "messenger: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// A connection handed to an older lossless session, which answers with the
/// connection back if it cannot resume.
struct Resume {
    conn: Conn,
    fresh: Session,
    answer: oneshot::Sender<Option<(Conn, Session)>>,
}

/// Where a resuming connection is offered to the task of the session it resumes
/// (boxed: the connection task's wake-up record stays small).
type ResumeSender = mpsc::Sender<Box<Resume>>;

/// Lossless acceptor sessions that a reconnecting peer may resume.
#[derive(Default)]
struct Registry {
    sessions: Mutex<HashMap<(EntityName, u64), ResumeSender>>,
}

impl Registry {
    fn lookup(&self, key: (EntityName, u64)) -> Option<ResumeSender> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.get(&key).cloned()
    }

    fn insert(&self, key: (EntityName, u64), sender: ResumeSender) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.insert(key, sender);
    }

    fn remove(&self, key: (EntityName, u64)) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(&key);
    }
}

async fn accept_one<D: Dispatch + ?Sized>(
    stream: TcpStream,
    peer_addr: SocketAddr,
    config: SessionConfig,
    make: impl FnOnce(&ConnectionHandle) -> Option<Box<D>>,
    registry: Arc<Registry>,
) {
    let after = config.handshake_timeout;
    let mut session = Session::accept(config, Instant::now());
    session.set_cookie(new_cookie());
    let result =
        tokio::time::timeout(after, accept_handshake(stream, peer_addr, &mut session)).await;
    let mut conn = match result {
        Ok(Ok(conn)) => conn,
        Ok(Err(fault)) => {
            tracing::info!(%peer_addr, %fault, "messenger: inbound handshake failed");
            return;
        }
        Err(_) => {
            tracing::info!(%peer_addr, ?after, "messenger: inbound handshake timed out");
            return;
        }
    };
    if session.resume_pending() {
        let Some((returned_conn, returned)) = offer_resume(&registry, conn, session).await else {
            return; // an older session took the connection over
        };
        conn = returned_conn;
        session = returned;
        if let Err(error) = session.accept_new_session(Instant::now()) {
            tracing::info!(%peer_addr, %error, "messenger: inbound session failed");
            return;
        }
    }
    let Some(SessionEvent::Established { peer, peer_shard }) = session.poll_event() else {
        tracing::warn!(%peer_addr, "messenger: established without an Established event");
        return;
    };
    let (handle, commands) = ConnectionHandle::new(session.config(), peer, peer_shard);
    let Some(dispatch) = make(&handle) else {
        return;
    };
    tracing::debug!(conn_id = handle.id, %peer, %peer_addr, "messenger: accepted");
    let driver = Driver::new(session, &handle, commands, dispatch);
    let role = driver.acceptor_role(&registry);
    driver.run(conn, role).await;
}

async fn accept_handshake(
    stream: TcpStream,
    peer_addr: SocketAddr,
    session: &mut Session,
) -> Result<Conn, Fault> {
    let mut conn = Conn::new(stream).map_err(Fault::Io)?;
    session.set_addresses(conn.stream.local_addr().ok(), Some(peer_addr));
    handshake(&mut conn, session).await?;
    Ok(conn)
}

/// Offers a resuming connection to the older session registered under its cookie.
/// Returns the connection back when there is none or it cannot resume.
async fn offer_resume(
    registry: &Registry,
    conn: Conn,
    mut fresh: Session,
) -> Option<(Conn, Session)> {
    let Some(SessionEvent::ResumeRequested {
        peer,
        client_cookie,
        ..
    }) = fresh.poll_event()
    else {
        return Some((conn, fresh));
    };
    let Some(sender) = registry.lookup((peer, client_cookie)) else {
        return Some((conn, fresh));
    };
    let (answer, answered) = oneshot::channel();
    let resume = Box::new(Resume {
        conn,
        fresh,
        answer,
    });
    if let Err(mpsc::error::SendError(resume)) = sender.send(resume).await {
        return Some((resume.conn, resume.fresh));
    }
    // If the old session's task ended without answering, the connection is lost;
    // the peer will reconnect and find no session.
    answered.await.ok().flatten()
}

/// Which side of the connection a driver is, and what it needs to recover.
enum Role {
    Connector {
        addr: SocketAddr,
    },
    Acceptor {
        registry: Arc<Registry>,
        key: Option<(EntityName, u64)>,
        resumes: mpsc::Receiver<Box<Resume>>,
    },
}

/// The per-connection task's state (`D`: `dyn Dispatch + Send` for a task that may
/// run on any thread, `dyn Dispatch` for one on a `LocalSet`).
struct Driver<D: Dispatch + ?Sized> {
    id: ConnId,
    peer: EntityName,
    session: Session,
    commands: mpsc::Receiver<Message>,
    /// A message taken from `commands` that the session had no room for yet.
    stash: Option<Message>,
    /// Every handle is gone: nothing more will come from `commands`.
    commands_closed: bool,
    shared: Arc<Shared>,
    dispatch: Box<D>,
}

impl<D: Dispatch + ?Sized> Driver<D> {
    fn new(
        session: Session,
        handle: &ConnectionHandle,
        commands: mpsc::Receiver<Message>,
        dispatch: Box<D>,
    ) -> Driver<D> {
        Driver {
            id: handle.id,
            peer: handle.peer,
            session,
            commands,
            stash: None,
            commands_closed: false,
            shared: handle.shared.clone(),
            dispatch,
        }
    }

    fn acceptor_role(&self, registry: &Arc<Registry>) -> Role {
        let (sender, resumes) = mpsc::channel(RESUME_QUEUE_MAX);
        let key = match self.session.policy() {
            Policy::Lossless => Some((self.peer, self.session.client_cookie())),
            Policy::Lossy => None,
        };
        if let Some(key) = key {
            registry.insert(key, sender);
        }
        Role::Acceptor {
            registry: registry.clone(),
            key,
            resumes,
        }
    }

    /// Runs connections until the session ends for good, then reports `Closed`.
    async fn run(mut self, mut conn: Conn, mut role: Role) {
        let mut out = Outbox {
            conn_id: self.id,
            peer: self.peer,
            now: Instant::now(),
            session: &mut self.session,
            conn: &mut conn,
            shared: &self.shared,
        };
        self.dispatch.on_start(&mut out);
        let mut conn = Some(conn);
        let fault = loop {
            let fault = match conn.take() {
                Some(mut current) => self.run_connected(&mut current, &mut role).await,
                None => Fault::TimedOut,
            };
            let lossless = self.session.policy() == Policy::Lossless;
            if !fault.recoverable() || !lossless {
                break fault;
            }
            tracing::info!(conn_id = self.id, peer = %self.peer, %fault, "messenger: connection fault, resuming");
            self.session.handle_transport_closed(Instant::now());
            let recovered = match &mut role {
                Role::Connector { addr } => self.reconnect(*addr).await,
                Role::Acceptor { resumes, .. } => self.standby(resumes).await,
            };
            match recovered {
                Ok(new_conn) => conn = Some(new_conn),
                Err(fault) => break fault,
            }
        };
        self.finish(fault, role);
    }

    fn finish(mut self, fault: Fault, role: Role) {
        self.shared.closed.store(true, Ordering::Relaxed);
        if let Role::Acceptor {
            registry,
            key: Some(key),
            ..
        } = role
        {
            registry.remove(key);
        }
        let reason = fault.to_string();
        match fault {
            Fault::ClosedLocally => {
                tracing::debug!(conn_id = self.id, peer = %self.peer, "messenger: closed")
            }
            _ => {
                tracing::info!(conn_id = self.id, peer = %self.peer, %reason, "messenger: connection closed")
            }
        }
        self.dispatch.on_closed(&reason);
    }
}

#[path = "tcp_driver.rs"]
mod driver_loop;

#[cfg(test)]
#[path = "tcp_tests.rs"]
mod tests;
