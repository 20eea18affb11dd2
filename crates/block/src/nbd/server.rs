//! The tokio driver: accepts connections, runs the handshake state machine over the
//! socket, then reads requests, runs them on the connection's task, and writes replies
//! in completion order (a client matches them by handle).

use super::in_flight::InFlight;
use super::negotiate::{Negotiation, Outcome};
use super::proto::{
    simple_reply, Command, ExportInfo, ProtocolError, Request, RequestDecoder, EIO,
    SIMPLE_REPLY_BYTES,
};
use crate::image::Image;
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

/// Requests one connection may have in flight.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 128;
/// Payload bytes one connection may have in flight, counted in KiB permits.
pub const PAYLOAD_KIB_IN_FLIGHT_MAX: u32 = 256 * 1024;
/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 256 * 1024;
/// Reply bytes waiting for the socket above which no more requests are read (a
/// client that does not read its replies stops being served).
const OUTPUT_BYTES_MAX: usize = PAYLOAD_KIB_IN_FLIGHT_MAX as usize * 1024;
/// Most buffers handed to one vectored write (two per reply that carries data).
const WRITE_SLICES_MAX: usize = 64;

const _: () = assert!(super::proto::REQUEST_PAYLOAD_BYTES_MAX / 1024 < PAYLOAD_KIB_IN_FLIGHT_MAX);

/// What the server needs to serve one image.
#[derive(Debug, Clone)]
pub struct NbdServer {
    image: Arc<Image>,
    read_only: bool,
}

/// A request's answer, ready to write.
struct Reply {
    header: [u8; SIMPLE_REPLY_BYTES],
    data: Bytes,
    /// The payload budget the request held.
    cost_kib: u32,
}

impl NbdServer {
    pub fn new(image: Arc<Image>, read_only: bool) -> NbdServer {
        NbdServer { image, read_only }
    }

    /// The export as a client sees it now.
    pub fn export(&self) -> ExportInfo {
        let spec = self.image.spec();
        ExportInfo {
            name: spec.to_string(),
            aliases: vec![spec.image.clone()],
            size_bytes: self.image.size(),
            read_only: self.read_only,
        }
    }

    /// Serves connections from `listener` until the task is dropped.
    pub async fn serve_tcp(&self, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, peer) = listener.accept().await?;
            stream.set_nodelay(true)?;
            carmine_msgr::idle_poll::watch(&stream);
            let server = self.clone();
            tokio::spawn(async move {
                if let Err(error) = server.serve_connection(stream).await {
                    tracing::warn!("nbd connection from {peer}: {error}");
                }
            });
        }
    }

    /// Serves connections on a Unix socket at `path` until the task is dropped.
    pub async fn serve_unix(&self, path: &Path) -> std::io::Result<()> {
        let listener = UnixListener::bind(path)?;
        loop {
            let (stream, _) = listener.accept().await?;
            carmine_msgr::idle_poll::watch(&stream);
            let server = self.clone();
            tokio::spawn(async move {
                if let Err(error) = server.serve_connection(stream).await {
                    tracing::warn!("nbd connection on a unix socket: {error}");
                }
            });
        }
    }

    /// Runs one connection to its end: handshake, then transmission.
    pub async fn serve_connection<S>(&self, mut stream: S) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let export = self.export();
        let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
        let mut negotiation = Negotiation::new(export.clone());
        loop {
            negotiation.handle_input(&mut input)?;
            if let Some(bytes) = negotiation.poll_transmit() {
                stream.write_all(&bytes).await?;
            }
            match negotiation.outcome() {
                Some(Outcome::Transmission) => break,
                Some(Outcome::Closed) => return Ok(()),
                None => {}
            }
            if stream.read_buf(&mut input).await? == 0 {
                return Ok(());
            }
        }
        Transmission::run(self, stream, input, export).await
    }
}

/// One connection in transmission: the connection's task reads requests, runs them
/// (their futures live in [`InFlight`], polled by this task), and writes each reply
/// as soon as it is ready, everything ready in one write. No other task takes part,
/// so a request costs one wake-up: its reply's.
struct Transmission<'a, S> {
    server: &'a NbdServer,
    stream: S,
    export: ExportInfo,
    input: BytesMut,
    decoder: RequestDecoder,
    in_flight: InFlight<Reply>,
    /// A decoded request waiting for payload budget.
    stalled: Option<Request>,
    /// KiB of payload the requests in flight carry or will return.
    payload_kib: u32,
    /// Replies waiting for the socket, and the bytes in them.
    output: VecDeque<Bytes>,
    output_bytes: usize,
    /// Reply headers gathered since the last buffer was pushed to `output`.
    headers: BytesMut,
    /// Whether bytes were written since the last flush.
    unflushed: bool,
    /// Still reading requests (not after a DISCONNECT, the end of the stream or a
    /// protocol error).
    reading: bool,
    protocol_error: Option<ProtocolError>,
}

impl<'a, S: AsyncRead + AsyncWrite + Unpin> Transmission<'a, S> {
    async fn run(
        server: &'a NbdServer,
        stream: S,
        input: BytesMut,
        export: ExportInfo,
    ) -> Result<(), ConnectionError> {
        let mut transmission = Transmission {
            server,
            stream,
            export,
            input,
            decoder: RequestDecoder::default(),
            in_flight: InFlight::new(),
            stalled: None,
            payload_kib: 0,
            output: VecDeque::new(),
            output_bytes: 0,
            headers: BytesMut::new(),
            unflushed: false,
            reading: true,
            protocol_error: None,
        };
        std::future::poll_fn(|cx| transmission.poll_run(cx)).await
    }

    /// Runs the connection until it ends: once reading stopped, every request in
    /// flight has been answered and every reply written.
    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectionError>> {
        loop {
            self.start_requests();
            let (in_flight, headers, output, output_bytes, payload_kib) = (
                &mut self.in_flight,
                &mut self.headers,
                &mut self.output,
                &mut self.output_bytes,
                &mut self.payload_kib,
            );
            let mut completed = 0;
            in_flight.poll_completed(cx, |reply| {
                completed += 1;
                *payload_kib -= reply.cost_kib;
                headers.extend_from_slice(&reply.header);
                *output_bytes += reply.header.len() + reply.data.len();
                if !reply.data.is_empty() {
                    output.push_back(headers.split().freeze());
                    output.push_back(reply.data);
                }
            });
            if !self.headers.is_empty() {
                self.output.push_back(self.headers.split().freeze());
            }
            if completed > 0 && (self.stalled.is_some() || !self.input.is_empty()) {
                // Completions freed room: start what waited for it.
                continue;
            }
            if let Poll::Ready(Err(error)) = self.poll_write(cx) {
                return Poll::Ready(Err(error.into()));
            }
            if self.can_read() {
                if self.input.capacity() - self.input.len() < READ_CHUNK_BYTES / 4 {
                    self.input.reserve(READ_CHUNK_BYTES);
                }
                let read = std::pin::pin!(self.stream.read_buf(&mut self.input)).poll(cx);
                match read {
                    Poll::Ready(Ok(0)) => {
                        self.reading = false;
                        continue;
                    }
                    Poll::Ready(Ok(_)) => continue,
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error.into())),
                    Poll::Pending => {}
                }
            }
            let finished = !self.reading
                && self.stalled.is_none()
                && self.in_flight.is_empty()
                && self.output.is_empty()
                && !self.unflushed;
            if !finished {
                return Poll::Pending;
            }
            if let Err(error) = ready!(Pin::new(&mut self.stream).poll_shutdown(cx)) {
                tracing::debug!("nbd: shutting the socket down: {error}");
            }
            return Poll::Ready(match self.protocol_error.take() {
                Some(error) => Err(error.into()),
                None => Ok(()),
            });
        }
    }

    /// Starts every decoded request the limits allow.
    fn start_requests(&mut self) {
        loop {
            if self.in_flight.len() >= REQUESTS_IN_FLIGHT_MAX {
                return;
            }
            let request = match self.stalled.take() {
                Some(request) => request,
                None if !self.reading => return,
                None => match self.decoder.decode(&mut self.input, &self.export) {
                    Ok(Some(request)) => request,
                    Ok(None) => return,
                    Err(error) => {
                        self.protocol_error = Some(error);
                        self.reading = false;
                        return;
                    }
                },
            };
            if request.command == Ok(Command::Disconnect) {
                self.reading = false;
                return;
            }
            if !self.fits(&request) {
                self.stalled = Some(request);
                return;
            }
            let cost_kib = cost_kib(&request);
            self.payload_kib += cost_kib;
            self.in_flight.push(self.server.start(request, cost_kib));
        }
    }

    /// Whether `request`'s payload fits the budget now (always when nothing else is in
    /// flight: no request is larger than the budget).
    fn fits(&self, request: &Request) -> bool {
        self.payload_kib + cost_kib(request) <= PAYLOAD_KIB_IN_FLIGHT_MAX
    }

    /// Reads more only while requests can start and replies are not piling up.
    fn can_read(&self) -> bool {
        self.reading
            && self.stalled.is_none()
            && self.in_flight.len() < REQUESTS_IN_FLIGHT_MAX
            && self.output_bytes <= OUTPUT_BYTES_MAX
    }

    /// Writes what the socket takes now, many replies per system call.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.output.is_empty() {
            let mut slices = [IoSlice::new(&[]); WRITE_SLICES_MAX];
            let mut count = 0;
            for (slot, chunk) in slices.iter_mut().zip(&self.output) {
                *slot = IoSlice::new(chunk);
                count += 1;
            }
            let written =
                ready!(Pin::new(&mut self.stream).poll_write_vectored(cx, &slices[..count]))?;
            if written == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.unflushed = true;
            self.consume(written);
        }
        if self.unflushed {
            ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
            self.unflushed = false;
        }
        Poll::Ready(Ok(()))
    }

    fn consume(&mut self, mut written: usize) {
        self.output_bytes -= written;
        while written > 0 {
            let front = self.output.front_mut().expect("wrote more than queued");
            if front.len() <= written {
                written -= front.len();
                self.output.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }
}

impl<S> Drop for Transmission<'_, S> {
    /// A connection that fails leaves its requests running to their end, as if each
    /// had a task of its own: a write stays registered with the image's tracker (and
    /// so in front of later flushes on other connections) until it is done.
    fn drop(&mut self) {
        let in_flight = std::mem::take(&mut self.in_flight);
        if in_flight.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(in_flight.finish());
            }
            Err(_) => tracing::warn!("nbd: dropping requests in flight outside a runtime"),
        }
    }
}

impl NbdServer {
    /// Starts a request. Writes register with the image's tracker here, in request
    /// order, so that a later FLUSH waits for them even if it runs first.
    fn start(&self, request: Request, cost_kib: u32) -> BoxedReply {
        let image = self.image.clone();
        let guard = match &request.command {
            Ok(Command::Write { .. } | Command::Trim { .. } | Command::WriteZeroes { .. }) => {
                Some(image.start_write())
            }
            _ => None,
        };
        Box::pin(async move {
            let (error, data) = match execute(&image, request.command, guard).await {
                Ok(data) => (0, data),
                Err(errno) => (errno, Bytes::new()),
            };
            Reply {
                header: simple_reply(request.handle, error),
                data,
                cost_kib,
            }
        })
    }
}

type BoxedReply = Pin<Box<dyn Future<Output = Reply> + Send>>;

fn cost_kib(request: &Request) -> u32 {
    1 + request_bytes(request) / 1024
}

fn request_bytes(request: &Request) -> u32 {
    match &request.command {
        Ok(Command::Read { length, .. }) => *length,
        Ok(Command::Write { data, .. }) => data.len() as u32,
        _ => 0,
    }
}

/// Carries out one command; the data to return (reads) or an errno.
async fn execute(
    image: &Image,
    command: Result<Command, u32>,
    guard: Option<crate::tracker::WriteGuard>,
) -> Result<Bytes, u32> {
    let command = command?;
    let result = match (command, guard) {
        (Command::Read { offset, length }, _) => {
            return image
                .read(offset, u64::from(length))
                .await
                .map_err(|e| e.errno())
        }
        // Writes are durable when acknowledged, so FUA needs nothing extra.
        (Command::Write { offset, data, .. }, Some(guard)) => {
            image.write_started(guard, offset, data).await
        }
        (
            Command::Trim { offset, length, .. } | Command::WriteZeroes { offset, length, .. },
            Some(guard),
        ) => {
            image
                .discard_started(guard, offset, u64::from(length))
                .await
        }
        (Command::Flush, _) => image.flush().await,
        (command, guard) => unreachable!("command {command:?} dispatched with guard {guard:?}"),
    };
    match result {
        Ok(()) => Ok(Bytes::new()),
        Err(error) => {
            tracing::warn!("nbd request failed: {error}");
            Err(if error.errno() == 0 {
                EIO
            } else {
                error.errno()
            })
        }
    }
}

/// Why a connection ended abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    #[error("protocol: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}
