//! A blocking wrapper: a private current-thread runtime runs the async client.

use crate::{Client, ClientConfig, ClientError};
use std::future::Future;

/// The async [`Client`] behind a blocking interface, for scripts and tests.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl BlockingClient {
    pub fn connect(config: ClientConfig) -> Result<Self, ClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Other(format!("cannot start a runtime: {e}")))?;
        let client = runtime.block_on(Client::connect(config))?;
        Ok(Self { runtime, client })
    }

    /// Runs one async call of the client to completion, e.g.
    /// `blocking.run(|c| async move { c.stat("rbd", "x").await })`.
    pub fn run<F, Fut, T>(&self, call: F) -> T
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = T>,
    {
        self.runtime.block_on(call(self.client.clone()))
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}
