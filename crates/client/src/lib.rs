//! The client library (the librados role): a pure [`Objecter`] that targets ops from
//! the cluster map, an async [`Client`] that drives it over the messenger, and a
//! [`BlockingClient`] wrapper for scripts and tests.
//!
//! ```no_run
//! # async fn example() -> Result<(), carmine_client::ClientError> {
//! use carmine_client::{Client, ClientConfig};
//! let client = Client::connect(ClientConfig::new(vec!["127.0.0.1:6789".parse().unwrap()])).await?;
//! client.write_full("rbd", "greeting", bytes::Bytes::from_static(b"hello")).await?;
//! let data = client.read("rbd", "greeting", 0, 0).await?;
//! assert_eq!(&data[..], b"hello");
//! # Ok(()) }
//! ```

mod api;
mod blocking;
mod client;
mod driver;
mod mon_hunt;
pub mod objecter;
mod sessions;

pub use api::ObjectStat;
pub use blocking::BlockingClient;
pub use client::{Client, ClientConfig};
pub use mon_hunt::MonHunt;
pub use objecter::{Objecter, ObjecterError, ObjecterOutput, OpSnaps, Target};
pub use sessions::to_message;

use carmine_proto::OpError;
use std::time::Duration;

/// Why a client call failed; each reads as one sentence for the CLI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("no monitor answered within {0:?}; is the cluster running?")]
    MonUnreachable(Duration),
    #[error("the client was shut down")]
    Disconnected,
    #[error("pool '{0}' does not exist")]
    NoSuchPool(String),
    #[error("{0}")]
    Op(OpError),
    #[error("timed out after {0:?} waiting for the cluster")]
    TimedOut(Duration),
    #[error("{0}")]
    Command(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("too many operations in flight")]
    TooManyOps,
    #[error("{0}")]
    Other(String),
}

impl From<ObjecterError> for ClientError {
    fn from(error: ObjecterError) -> Self {
        match error {
            ObjecterError::TimedOut(after) => ClientError::TimedOut(after),
            ObjecterError::TooManyOps => ClientError::TooManyOps,
            ObjecterError::PoolGone(pool) => ClientError::NoSuchPool(pool.to_string()),
            other => ClientError::Other(other.to_string()),
        }
    }
}

impl ClientError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Op(OpError::NotFound))
    }
}
