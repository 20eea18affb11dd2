//! A shard's outgoing sessions to the shards of other OSDs (lossless: the messenger
//! replays unacknowledged messages across reconnects). One session per (OSD, shard);
//! messages sent while it is being established wait in a bounded queue. Each session's
//! messages go to a dispatcher on its own task (on the shard's `LocalSet`), which
//! handles them in place, as an inbound connection's do.

use carmine_msgr::tcp::{connect_local_with, ConnId, ConnectionHandle, Dispatch};
use carmine_msgr::{Message, SessionConfig};
use carmine_types::{OsdId, ShardIndex};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use tokio::sync::mpsc;

/// Messages queued for one peer while its session is being established.
pub const PEER_QUEUE_MESSAGES_MAX: usize = 65_536;

pub type PeerKey = (OsdId, ShardIndex);

/// The result of a connection attempt, reported back to the shard loop.
pub struct PeerConnected {
    pub key: PeerKey,
    pub addr: SocketAddr,
    pub result: Result<ConnectionHandle, String>,
}

enum PeerConn {
    Connecting {
        addr: SocketAddr,
        queued: Vec<Message>,
    },
    Ready {
        addr: SocketAddr,
        handle: ConnectionHandle,
    },
}

/// Makes the dispatcher of a new outgoing session.
pub type MakeDispatch = Rc<dyn Fn(&ConnectionHandle) -> Box<dyn Dispatch>>;

pub struct Peers {
    session: SessionConfig,
    conns: HashMap<PeerKey, PeerConn>,
    keys_by_conn: HashMap<ConnId, PeerKey>,
    make_dispatch: MakeDispatch,
    connected_tx: mpsc::UnboundedSender<PeerConnected>,
}

impl Peers {
    pub fn new(
        session: SessionConfig,
        make_dispatch: MakeDispatch,
        connected_tx: mpsc::UnboundedSender<PeerConnected>,
    ) -> Self {
        Self {
            session,
            conns: HashMap::new(),
            keys_by_conn: HashMap::new(),
            make_dispatch,
            connected_tx,
        }
    }

    pub fn send(&mut self, key: PeerKey, addr: SocketAddr, message: Message) {
        match self.conns.get_mut(&key) {
            Some(PeerConn::Ready {
                addr: known,
                handle,
            }) if *known == addr => {
                if let Err(error) = handle.send(message) {
                    tracing::warn!("send to {} shard {} failed: {error}", key.0, key.1 .0);
                }
                return;
            }
            Some(PeerConn::Connecting {
                addr: known,
                queued,
            }) if *known == addr => {
                if queued.len() < PEER_QUEUE_MESSAGES_MAX {
                    queued.push(message);
                } else {
                    tracing::warn!("queue for {} is full; dropping a message", key.0);
                }
                return;
            }
            Some(PeerConn::Ready { handle, .. }) => {
                // The peer restarted on a new address: its old session is useless.
                self.keys_by_conn.remove(&handle.id());
                handle.close();
            }
            _ => {}
        }
        self.conns.insert(
            key,
            PeerConn::Connecting {
                addr,
                queued: vec![message],
            },
        );
        let session = self.session.clone();
        let make_dispatch = self.make_dispatch.clone();
        let connected = self.connected_tx.clone();
        tokio::task::spawn_local(async move {
            let result =
                connect_local_with(addr, session, key.1, |handle| make_dispatch(handle)).await;
            let result = result.map_err(|e| e.to_string());
            let _ = connected.send(PeerConnected { key, addr, result });
        });
    }

    pub fn handle_connected(&mut self, connected: PeerConnected) {
        let PeerConnected { key, addr, result } = connected;
        let queued = match self.conns.remove(&key) {
            Some(PeerConn::Connecting {
                addr: known,
                queued,
            }) if known == addr => queued,
            other => {
                // Superseded by a newer attempt; keep that one.
                if let Some(other) = other {
                    self.conns.insert(key, other);
                }
                if let Ok(handle) = result {
                    handle.close();
                }
                return;
            }
        };
        match result {
            Ok(handle) => {
                for message in queued {
                    if let Err(error) = handle.send(message) {
                        tracing::warn!("send to {} failed: {error}", key.0);
                    }
                }
                self.keys_by_conn.insert(handle.id(), key);
                self.conns.insert(key, PeerConn::Ready { addr, handle });
            }
            Err(error) => {
                tracing::warn!(
                    "cannot reach {} shard {} at {addr}: {error}; dropped {} messages",
                    key.0,
                    key.1 .0,
                    queued.len()
                );
            }
        }
    }

    pub fn handle_closed(&mut self, conn_id: ConnId) {
        if let Some(key) = self.keys_by_conn.remove(&conn_id) {
            if matches!(self.conns.get(&key), Some(PeerConn::Ready { handle, .. }) if handle.id() == conn_id)
            {
                self.conns.remove(&key);
            }
        }
    }
}
