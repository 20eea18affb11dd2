//! The async client handle. [`Client`] handles submit ops straight into the shared
//! objecter (`crate::sessions`), whose OSD sessions complete them from their own
//! tasks; a driver task (`crate::driver`) keeps the monitor session, the map
//! subscription, operator commands and op timeouts.

use crate::driver::{ControlRequest, Driver};
use crate::sessions::{OpRequest, Shared};
use crate::ClientError;
use carmine_clustermap::OsdMap;
use carmine_proto::{Command, CommandOutput, OsdOpReply};
use carmine_types::Epoch;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// How a client finds and talks to the cluster.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub mon_addrs: Vec<SocketAddr>,
    /// An op that gets no answer in this long fails with a timeout.
    pub op_timeout: Duration,
    /// How long `Client::connect` waits for the monitor and the first map.
    pub connect_timeout: Duration,
}

impl ClientConfig {
    pub fn new(mon_addrs: Vec<SocketAddr>) -> Self {
        Self {
            mon_addrs,
            op_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

pub(crate) type CommandReplySender = oneshot::Sender<Result<CommandOutput, ClientError>>;

/// A handle to a connected client; cheap to clone, usable from many tasks.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    /// Commands for the driver; the driver shuts the client down once every handle
    /// (and so every sender) is gone.
    control: mpsc::UnboundedSender<ControlRequest>,
    map: watch::Receiver<Option<Arc<OsdMap>>>,
    client_id: u64,
}

fn random_client_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish() >> 1
}

impl Client {
    /// Connects to the monitors and waits for the first map. Must be called inside a
    /// tokio runtime; the driver runs as a task of it.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        if config.mon_addrs.is_empty() {
            return Err(ClientError::Config(
                "no monitor addresses configured".into(),
            ));
        }
        let client_id = random_client_id();
        let (control, control_rx) = mpsc::unbounded_channel();
        let (map_tx, mut map) = watch::channel(None);
        let timeout = config.connect_timeout;
        let driver = Driver::new(client_id, config, map_tx);
        let shared = driver.shared().clone();
        tokio::spawn(driver.run(control_rx));
        let ready = tokio::time::timeout(timeout, async {
            map.wait_for(|m| m.is_some()).await.map(|_| ())
        })
        .await;
        match ready {
            Ok(Ok(_)) => Ok(Client {
                shared,
                control,
                map,
                client_id,
            }),
            Ok(Err(_)) => Err(ClientError::Disconnected),
            Err(_) => Err(ClientError::MonUnreachable(timeout)),
        }
    }

    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The newest map the client holds.
    pub fn map(&self) -> Arc<OsdMap> {
        self.map
            .borrow()
            .clone()
            .expect("connect() returned only after the first map")
    }

    /// Waits until the client holds a map of at least `epoch`.
    pub async fn wait_for_epoch(&self, epoch: Epoch) -> Result<Arc<OsdMap>, ClientError> {
        let mut map = self.map.clone();
        let found = map
            .wait_for(|m| m.as_ref().is_some_and(|m| m.epoch >= epoch))
            .await
            .map_err(|_| ClientError::Disconnected)?;
        Ok(found.clone().expect("checked"))
    }

    pub(crate) async fn submit(&self, request: OpRequest) -> Result<OsdOpReply, ClientError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.shared.submit(request, reply_tx);
        let reply = reply_rx.await.map_err(|_| ClientError::Disconnected)?;
        let reply = reply.map_err(ClientError::from)?;
        match &reply.result {
            Ok(()) => Ok(reply),
            Err(error) => Err(ClientError::Op(error.clone())),
        }
    }

    /// Sends an operator command to the monitor.
    pub async fn command(&self, command: Command) -> Result<CommandOutput, ClientError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.control
            .send(ControlRequest::Command(command, reply_tx))
            .map_err(|_| ClientError::Disconnected)?;
        reply_rx.await.map_err(|_| ClientError::Disconnected)?
    }
}
