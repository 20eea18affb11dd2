//! The tokio driver: accepts connections, runs the handshake state machine over the
//! socket, then reads requests, spawns each one, and writes replies in completion
//! order (a client matches them by handle).

use super::negotiate::{Negotiation, Outcome};
use super::proto::{
    simple_reply, Command, ExportInfo, ProtocolError, Request, RequestDecoder, EIO,
};
use crate::image::Image;
use bytes::{Bytes, BytesMut};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Requests one connection may have in flight.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 128;
/// Payload bytes one connection may have in flight, counted in KiB permits.
pub const PAYLOAD_KIB_IN_FLIGHT_MAX: u32 = 256 * 1024;
/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 256 * 1024;

const _: () = assert!(super::proto::REQUEST_PAYLOAD_BYTES_MAX / 1024 < PAYLOAD_KIB_IN_FLIGHT_MAX);

/// What the server needs to serve one image.
#[derive(Debug, Clone)]
pub struct NbdServer {
    image: Arc<Image>,
    read_only: bool,
}

struct Reply {
    header: [u8; 16],
    data: Bytes,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
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
        let (reader, writer) = tokio::io::split(stream);
        let (replies, reply_queue) = mpsc::channel(REQUESTS_IN_FLIGHT_MAX);
        let writer_task = tokio::spawn(write_replies(writer, reply_queue));
        let read_result = self.read_requests(reader, input, &export, replies).await;
        // Every request task holds a sender; the writer ends once all have replied.
        let write_result = writer_task
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        read_result?;
        write_result?;
        Ok(())
    }

    async fn read_requests<R: AsyncRead + Unpin>(
        &self,
        mut reader: R,
        mut input: BytesMut,
        export: &ExportInfo,
        replies: mpsc::Sender<Reply>,
    ) -> Result<(), ConnectionError> {
        let mut decoder = RequestDecoder::default();
        let requests = Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT_MAX));
        let payload_kib = Arc::new(Semaphore::new(PAYLOAD_KIB_IN_FLIGHT_MAX as usize));
        loop {
            while let Some(request) = decoder.decode(&mut input, export)? {
                if request.command == Ok(Command::Disconnect) {
                    return Ok(());
                }
                let cost = 1 + request_bytes(&request) / 1024;
                let permits = (
                    requests
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("semaphore never closed"),
                    payload_kib
                        .clone()
                        .acquire_many_owned(cost)
                        .await
                        .expect("semaphore never closed"),
                );
                self.dispatch(request, permits, replies.clone());
            }
            if input.capacity() - input.len() < READ_CHUNK_BYTES / 4 {
                input.reserve(READ_CHUNK_BYTES);
            }
            if reader.read_buf(&mut input).await? == 0 {
                return Ok(());
            }
        }
    }

    /// Spawns the request. Writes register with the image's tracker here, in request
    /// order, so that a later FLUSH waits for them even if it runs first.
    fn dispatch(
        &self,
        request: Request,
        permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
        replies: mpsc::Sender<Reply>,
    ) {
        let image = self.image.clone();
        let guard = match &request.command {
            Ok(Command::Write { .. } | Command::Trim { .. } | Command::WriteZeroes { .. }) => {
                Some(image.start_write())
            }
            _ => None,
        };
        tokio::spawn(async move {
            let (error, data) = match execute(&image, request.command, guard).await {
                Ok(data) => (0, data),
                Err(errno) => (errno, Bytes::new()),
            };
            let reply = Reply {
                header: simple_reply(request.handle, error),
                data,
                _permits: permits,
            };
            // The writer is gone only when the connection failed; nothing to tell.
            let _ = replies.send(reply).await;
        });
    }
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

/// Writes replies as they complete, batching whatever is queued into one flush.
async fn write_replies<W: AsyncWrite + Unpin>(
    writer: W,
    mut queue: mpsc::Receiver<Reply>,
) -> std::io::Result<()> {
    let mut writer = BufWriter::with_capacity(256 * 1024, writer);
    while let Some(reply) = queue.recv().await {
        write_reply(&mut writer, reply).await?;
        while let Ok(reply) = queue.try_recv() {
            write_reply(&mut writer, reply).await?;
        }
        writer.flush().await?;
    }
    writer.shutdown().await
}

async fn write_reply<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    reply: Reply,
) -> std::io::Result<()> {
    writer.write_all(&reply.header).await?;
    writer.write_all(&reply.data).await
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
