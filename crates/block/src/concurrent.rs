//! A bounded window of spawned tasks whose results come back in submission order.

use crate::BlockError;
use std::collections::VecDeque;
use std::future::Future;
use tokio::task::JoinHandle;

/// Most object operations one image call keeps in flight.
pub const OBJECT_OPS_IN_FLIGHT_MAX: usize = 16;

/// Runs `make(item)` for every item with at most `window` in flight; returns the
/// results in the order of `items`, or the first error (the rest are aborted).
pub async fn map_ordered<I, T, F, Fut>(
    items: I,
    window: usize,
    mut make: F,
) -> Result<Vec<T>, BlockError>
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future<Output = Result<T, BlockError>> + Send + 'static,
    T: Send + 'static,
{
    assert!(window > 0);
    let mut pending: VecDeque<JoinHandle<Result<T, BlockError>>> = VecDeque::new();
    let mut results = Vec::new();
    let mut items = items.into_iter();
    loop {
        while pending.len() < window {
            match items.next() {
                Some(item) => pending.push_back(tokio::spawn(make(item))),
                None => break,
            }
        }
        let Some(head) = pending.pop_front() else {
            return Ok(results);
        };
        match join(head).await {
            Ok(value) => results.push(value),
            Err(error) => {
                for task in pending {
                    task.abort();
                }
                return Err(error);
            }
        }
    }
}

/// Runs the futures concurrently (inline when there is only one) and returns their
/// results in order.
pub async fn join_all<T, Fut>(futures: Vec<Fut>) -> Result<Vec<T>, BlockError>
where
    Fut: Future<Output = Result<T, BlockError>> + Send + 'static,
    T: Send + 'static,
{
    if futures.len() == 1 {
        let future = futures.into_iter().next().expect("one future");
        return Ok(vec![future.await?]);
    }
    let window = futures.len().max(1);
    map_ordered(futures, window, |future| future).await
}

async fn join<T>(handle: JoinHandle<Result<T, BlockError>>) -> Result<T, BlockError> {
    handle.await.map_err(|error| {
        BlockError::Io(std::io::Error::other(format!(
            "an object task failed: {error}"
        )))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_order_and_stops_at_the_first_error() {
        let got = map_ordered(0..50u64, 4, |i| async move { Ok(i * 2) })
            .await
            .unwrap();
        assert_eq!(got, (0..50).map(|i| i * 2).collect::<Vec<_>>());
        let failed = map_ordered(0..50u64, 4, |i| async move {
            if i == 7 {
                Err(BlockError::Invalid("seven".into()))
            } else {
                Ok(i)
            }
        })
        .await;
        assert!(matches!(failed, Err(BlockError::Invalid(_))));
    }
}
