//! Messenger ping-pong over loopback, shaped like `shared/tools/tcp-ceiling.c` so the
//! two can be compared: a client sends DEPTH requests of SIZE bytes back to back, the
//! server answers each with a 16-byte ack, the client waits for all DEPTH acks; ITERS
//! rounds. Client and server each run on their own thread with a current-thread tokio
//! runtime (tcp-ceiling uses two processes).
//!
//! ```text
//! cargo run --release -p carmine-msgr --example pingpong -- SIZE DEPTH ITERS [lossy|lossless]
//! ```

use bytes::Bytes;
use carmine_msgr::{connect, serve, Message, NetEvent, Policy, SessionConfig};
use carmine_types::{EntityName, OsdId, ShardIndex};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const ACK_BYTES: usize = 16;
const MSG_REQUEST: u16 = 1;
const MSG_ACK: u16 = 2;

struct Args {
    size: usize,
    depth: usize,
    iters: usize,
    policy: Policy,
}

fn parse_args() -> Result<Args, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 || args.len() > 4 {
        return Err("usage: pingpong SIZE DEPTH ITERS [lossy|lossless]".into());
    }
    let number = |text: &str| text.parse::<usize>().map_err(|e| format!("{text:?}: {e}"));
    let policy = match args.get(3).map(String::as_str) {
        None | Some("lossy") => Policy::Lossy,
        Some("lossless") => Policy::Lossless,
        Some(other) => return Err(format!("unknown policy {other:?}")),
    };
    let parsed = Args {
        size: number(&args[0])?,
        depth: number(&args[1])?,
        iters: number(&args[2])?,
        policy,
    };
    if parsed.size == 0 || parsed.depth == 0 || parsed.depth > 4096 || parsed.iters == 0 {
        return Err("bad arguments".into());
    }
    Ok(parsed)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn config(name: EntityName, policy: Policy, depth: usize) -> SessionConfig {
    SessionConfig {
        send_queue_messages_max: depth.max(64) * 2,
        ..SessionConfig::new(name, policy)
    }
}

/// Answers every request with a 16-byte ack, until the client closes.
async fn server(listener: TcpListener, policy: Policy, depth: usize) {
    let (events, mut inbox) = mpsc::unbounded_channel();
    let osd = EntityName::osd(OsdId(0));
    tokio::spawn(serve(listener, config(osd, policy, depth), events));
    let ack = Bytes::from(vec![0u8; ACK_BYTES]);
    let mut handles = HashMap::new();
    while let Some(event) = inbox.recv().await {
        match event {
            NetEvent::Established { conn, .. } => {
                handles.insert(conn.id(), conn);
            }
            NetEvent::Message {
                conn_id, message, ..
            } => {
                let reply = Message::new(MSG_ACK, message.header.tid, 0, ack.clone());
                handles[&conn_id].send(reply).expect("ack queue");
            }
            NetEvent::Closed { .. } => return,
            _ => {}
        }
    }
}

async fn client(addr: SocketAddr, args: &Args) -> f64 {
    let (events, mut inbox) = mpsc::unbounded_channel();
    let name = EntityName::client(1);
    let conn = connect(
        addr,
        config(name, args.policy, args.depth),
        ShardIndex(0),
        events,
    )
    .await
    .expect("connect");
    let payload = Bytes::from(vec![0x5au8; args.size]);
    let round =
        |tid: u64| Message::new(MSG_REQUEST, tid, 0, Bytes::new()).with_data(payload.clone());
    let start = Instant::now();
    let mut tid = 0;
    for _ in 0..args.iters {
        for _ in 0..args.depth {
            conn.send(round(tid)).expect("request queue");
            tid += 1;
        }
        let mut acks = 0;
        while acks < args.depth {
            match inbox.recv().await.expect("events") {
                NetEvent::Message { .. } => acks += 1,
                NetEvent::Closed { reason, .. } => panic!("closed: {reason}"),
                _ => {}
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    conn.close();
    seconds
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let addr = std_listener.local_addr().expect("local addr");
    let (policy, depth) = (args.policy, args.depth);
    // The work runs in spawned tasks, not in `block_on`'s own future, which a
    // current-thread runtime polls only after checking for I/O.
    let server_thread = std::thread::spawn(move || {
        runtime().block_on(async move {
            let listener = TcpListener::from_std(std_listener).expect("listener");
            tokio::spawn(server(listener, policy, depth)).await
        })
    });
    let args = std::sync::Arc::new(args);
    let client_args = args.clone();
    let seconds = runtime()
        .block_on(
            async move { tokio::spawn(async move { client(addr, &client_args).await }).await },
        )
        .expect("client task");
    server_thread
        .join()
        .expect("server thread")
        .expect("server task");
    let ops = (args.iters * args.depth) as f64;
    println!(
        "size={} depth={} ops={} seconds={:.3} ops_per_s={:.0} MB_per_s={:.0} us_per_op={:.2} policy={:?}",
        args.size,
        args.depth,
        ops,
        seconds,
        ops / seconds,
        ops * args.size as f64 / seconds / 1e6,
        seconds / args.iters as f64 * 1e6 / args.depth as f64,
        args.policy,
    );
}
