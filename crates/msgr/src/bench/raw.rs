//! The raw-TCP baselines: the same scenario with no framing, no checksums, no session.
//! A request is `size_bytes` of payload; the server counts bytes and writes 16 zero
//! bytes per complete request.

use super::stats::window;
use super::{
    listen, runtime, BenchError, LatencyRecorder, Measurement, Placement, Spec, ACK_BYTES,
};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{Interest, Ready};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Bytes offered to each read.
const READ_BYTES: usize = 128 * 1024;
/// Most requests handed to one vectored write.
const WRITE_SLICES_MAX: usize = 64;
/// Acks written per write at most.
const ACKS_PER_WRITE_MAX: usize = 4096;
/// How long a run may take beyond its warmup and window before it is declared stuck.
const RUN_GRACE: Duration = Duration::from_secs(30);

/// Plain TCP on the messenger's threads and runtime: one task per connection on each
/// side, readiness-driven, vectored writes, reads that stop at a short read.
pub(super) fn run_tokio(spec: &Spec, placement: &Placement) -> Result<Measurement, BenchError> {
    let (listener, addr) = listen()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let (server_placement, size_bytes) = (*placement, spec.size_bytes);
    let server = std::thread::Builder::new()
        .name("raw-server".into())
        .spawn(move || -> io::Result<()> {
            server_placement.pin_server();
            runtime()?.block_on(async move {
                let listener = TcpListener::from_std(listener)?;
                let task = tokio::spawn(serve(listener, size_bytes));
                let _ = stopped.await;
                task.abort();
                Ok(())
            })
        })?;
    let (client_spec, client_placement) = (*spec, *placement);
    let client = std::thread::Builder::new()
        .name("raw-client".into())
        .spawn(move || -> Result<Measurement, BenchError> {
            client_placement.pin_client();
            let runtime = runtime()?;
            let task = runtime.spawn(clients(addr, client_spec));
            runtime
                .block_on(task)
                .map_err(|error| BenchError::Closed(format!("client task: {error}")))?
        })?;
    let result = client.join().expect("raw client thread panicked");
    let _ = stop.send(());
    server.join().expect("raw server thread panicked")?;
    result
}

async fn serve(listener: TcpListener, size_bytes: usize) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            if let Err(error) = echo(stream, size_bytes).await {
                tracing::debug!(%error, "raw bench: connection ended");
            }
        });
    }
}

/// Reads requests, writes one ack per complete request.
async fn echo(stream: TcpStream, size_bytes: usize) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buffer = vec![0u8; READ_BYTES];
    let acks = vec![0u8; ACK_BYTES * ACKS_PER_WRITE_MAX];
    let mut partial_bytes = 0;
    let mut owed_bytes = 0;
    loop {
        let interest = match owed_bytes {
            0 => Interest::READABLE,
            _ => Interest::READABLE | Interest::WRITABLE,
        };
        let ready = stream.ready(interest).await?;
        if ready.is_readable() {
            match read_short(&stream, &mut buffer)? {
                Some(0) => return Ok(()),
                Some(received) => {
                    partial_bytes += received;
                    owed_bytes += partial_bytes / size_bytes * ACK_BYTES;
                    partial_bytes %= size_bytes;
                }
                None => {}
            }
        }
        while owed_bytes > 0 {
            match stream.try_write(&acks[..owed_bytes.min(acks.len())]) {
                Ok(written) => owed_bytes -= written,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(error),
            }
        }
    }
}

/// One read; `None` if nothing was there. A read shorter than the buffer clears the
/// readiness at once (as the messenger's driver does), saving the read that would
/// only return `WouldBlock`.
fn read_short(stream: &TcpStream, buffer: &mut [u8]) -> io::Result<Option<usize>> {
    let offered = buffer.len();
    let mut received = 0;
    let result = stream.try_io(Interest::READABLE, || {
        received = stream.try_read(buffer)?;
        match received {
            0 => Ok(0),
            short if short < offered => Err(io::ErrorKind::WouldBlock.into()),
            full => Ok(full),
        }
    });
    match result {
        Ok(count) => Ok(Some(count)),
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
            Ok((received > 0).then_some(received))
        }
        Err(error) => Err(error),
    }
}

async fn clients(addr: SocketAddr, spec: Spec) -> Result<Measurement, BenchError> {
    let recorder = window(spec.warmup, spec.measure);
    let deadline = recorder.end() + RUN_GRACE;
    let tasks: Vec<_> = (0..spec.connections)
        .map(|_| tokio::spawn(client(addr, spec, recorder.clone())))
        .collect();
    let mut total: Option<LatencyRecorder> = None;
    for task in tasks {
        let joined = tokio::time::timeout_at(deadline.into(), task)
            .await
            .map_err(|_| BenchError::Closed("the run made no progress; timed out".into()))?;
        let recorded =
            joined.map_err(|error| BenchError::Closed(format!("client task: {error}")))??;
        match &mut total {
            None => total = Some(recorded),
            Some(total) => total.merge(recorded),
        }
    }
    Ok(total
        .expect("at least one connection")
        .finish(spec.size_bytes))
}

/// Keeps `depth` requests in flight until the window ends.
async fn client(
    addr: SocketAddr,
    spec: Spec,
    mut recorder: LatencyRecorder,
) -> Result<LatencyRecorder, BenchError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let payload = vec![0x5au8; spec.size_bytes];
    let mut buffer = vec![0u8; READ_BYTES];
    let mut sent_at: VecDeque<Instant> = VecDeque::with_capacity(spec.depth);
    // Requests queued but not completely written, and how much of the first is.
    let mut unsent = 0;
    let mut offset = 0;
    let mut ack_partial_bytes = 0;
    loop {
        let now = Instant::now();
        if now < recorder.end() {
            while sent_at.len() < spec.depth {
                sent_at.push_back(now);
                unsent += 1;
            }
        } else if sent_at.is_empty() {
            return Ok(recorder);
        }
        while unsent > 0 {
            let count = unsent.min(WRITE_SLICES_MAX);
            let mut slices = [IoSlice::new(&payload); WRITE_SLICES_MAX];
            slices[0] = IoSlice::new(&payload[offset..]);
            match stream.try_write_vectored(&slices[..count]) {
                Ok(written) => {
                    let total = offset + written;
                    unsent -= total / spec.size_bytes;
                    offset = total % spec.size_bytes;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(error.into()),
            }
        }
        let interest = match unsent {
            0 => Interest::READABLE,
            _ => Interest::READABLE | Interest::WRITABLE,
        };
        let ready: Ready = stream.ready(interest).await?;
        if !ready.is_readable() {
            continue;
        }
        match read_short(&stream, &mut buffer)? {
            Some(0) => return Err(BenchError::Closed("raw server closed".into())),
            Some(received) => {
                let done = Instant::now();
                ack_partial_bytes += received;
                for _ in 0..ack_partial_bytes / ACK_BYTES {
                    let sent = sent_at
                        .pop_front()
                        .ok_or_else(|| BenchError::Closed("an ack for no request".into()))?;
                    recorder.record(sent, done);
                }
                ack_partial_bytes %= ACK_BYTES;
            }
            None => {}
        }
    }
}

/// Blocking TCP, one request in flight: the loop of `tcp-ceiling.c`.
pub(super) fn run_blocking(spec: &Spec, placement: &Placement) -> Result<Measurement, BenchError> {
    if spec.depth != 1 || spec.connections != 1 {
        return Err(BenchError::Unsupported(
            "blocking raw TCP runs one request in flight on one connection",
        ));
    }
    let (listener, addr) = listen()?;
    listener.set_nonblocking(false)?;
    let (server_placement, size_bytes) = (*placement, spec.size_bytes);
    let server = std::thread::Builder::new()
        .name("raw-server".into())
        .spawn(move || -> io::Result<()> {
            server_placement.pin_server();
            let (mut stream, _) = listener.accept()?;
            stream.set_nodelay(true)?;
            let mut request = vec![0u8; size_bytes];
            let ack = [0u8; ACK_BYTES];
            loop {
                match stream.read_exact(&mut request) {
                    Ok(()) => stream.write_all(&ack)?,
                    Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                    Err(error) => return Err(error),
                }
            }
        })?;
    let (client_spec, client_placement) = (*spec, *placement);
    let client = std::thread::Builder::new()
        .name("raw-client".into())
        .spawn(move || -> io::Result<Measurement> {
            client_placement.pin_client();
            let mut stream = std::net::TcpStream::connect(addr)?;
            stream.set_nodelay(true)?;
            let payload = vec![0x5au8; client_spec.size_bytes];
            let mut ack = [0u8; ACK_BYTES];
            let mut recorder = window(client_spec.warmup, client_spec.measure);
            loop {
                let sent = Instant::now();
                if sent >= recorder.end() {
                    return Ok(recorder.finish(client_spec.size_bytes));
                }
                stream.write_all(&payload)?;
                stream.read_exact(&mut ack)?;
                recorder.record(sent, Instant::now());
            }
        })?;
    let result = client.join().expect("raw client thread panicked");
    server.join().expect("raw server thread panicked")?;
    Ok(result?)
}
