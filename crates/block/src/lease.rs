//! Writers' leases: a snapshot taken while an image is being written holds the writes
//! acknowledged before `snap create` returned, and none acknowledged after; a shrink
//! trims the tail only once no writer can still write there.
//!
//! librbd gets this from a watch on the header object: `rbd snap create` and `rbd
//! resize` notify the watchers and wait for their answers, and they refresh the header
//! before answering. Carmine's OSDs have no watch/notify, so a long-lived writer (the
//! NBD server, `image bench`) holds a lease recorded in the image's registration object
//! `rbd_writers.<ID>` instead:
//!
//! - **Renewal**, every [`RENEW_INTERVAL`]: the writer sets its key in the object's omap
//!   (value: the version of the header object its writes follow, u64 little-endian),
//!   then reads the header. When the header changed, its writes from then on carry the
//!   new snapshot context and stay within the new size; it waits until no write
//!   admitted under the old header is in flight, and sets its key again with the new
//!   version: the acknowledgement. A renewal that succeeds lets it write
//!   until [`WRITER_LEASE`] after the renewal *started*; a write that finds the lease
//!   run out renews first, and fails if it cannot.
//! - **`snap create`**, once the header holds the new snapshot, and **`resize`** to a
//!   smaller size, once the header holds it and before trimming, wait until every key
//!   acknowledges that header version ([`wait_for_writers`]). A key still behind after
//!   [`SNAP_ACK_WAIT`] (longer than a lease) belongs to a writer whose lease ran out after the header
//!   changed: it can write again only after a renewal that reads the new header. Such
//!   keys are removed, guarded by the object's version so that a key set meanwhile
//!   stays.
//!
//! Why the key is set before the header is read: a writer whose read saw the old header
//! had its key in place before `snap create` changed the header, so `snap create`
//! finds it and waits for it. A writer that registers later reads the new header.
//!
//! What it does not cover, as librbd without blocklisting does not: a writer that is cut
//! off for longer than its lease with writes in flight (a paused or partitioned process)
//! may still have those applied after `snap create` or `resize` gave up on it; they say
//! so in their log when they give up on a writer. Short-lived writers (`import`, `cp`,
//! `rollback`) take no lease: take snapshots while they are not running.

use crate::header::writers_object;
use crate::BlockError;
use bytes::Bytes;
use carmine_client::{Client, ClientError};
use carmine_proto::{OpCode, OpError, OpOutput};
use std::time::{Duration, Instant};

/// How often a writer renews its lease (and so how soon it sees a new snapshot).
pub const RENEW_INTERVAL: Duration = Duration::from_millis(500);
/// How long a writer may write after a renewal started.
pub const WRITER_LEASE: Duration = Duration::from_secs(10);
/// How long `snap create` waits for a writer's acknowledgement: a lease and a margin
/// for the two processes' clocks running at slightly different rates.
pub const SNAP_ACK_WAIT: Duration = Duration::from_secs(12);
/// How often `snap create` looks at the acknowledgements while it waits.
const ACK_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Writers listed per omap read of the registration object.
const WRITERS_PER_READ: u32 = 256;
/// Rounds of removing stale keys before `snap create` leaves them in place.
const REMOVE_ATTEMPTS_MAX: usize = 8;

/// One writer's lease on an image.
#[derive(Debug)]
pub(crate) struct WriterLease {
    /// Its key in the registration object.
    key: Bytes,
    /// When the lease runs out; `None` before the first renewal succeeded.
    valid_until: std::sync::Mutex<Option<Instant>>,
    /// One renewal at a time (the periodic one and a write's).
    renewing: tokio::sync::Mutex<()>,
    /// Given up for good ([`crate::Image::release_writer_lease`]).
    released: std::sync::atomic::AtomicBool,
}

impl WriterLease {
    pub(crate) fn new() -> WriterLease {
        let key = format!(
            "writer.{}.{:016x}",
            std::process::id(),
            rand::random::<u64>()
        );
        WriterLease {
            key: Bytes::from(key),
            valid_until: std::sync::Mutex::new(None),
            renewing: tokio::sync::Mutex::new(()),
            released: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Ends the lease for good: it is no longer valid and cannot be renewed.
    pub(crate) fn release(&self) {
        self.released
            .store(true, std::sync::atomic::Ordering::Release);
        *self.valid_until.lock().expect("lease lock poisoned") = None;
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn key(&self) -> &Bytes {
        &self.key
    }

    pub(crate) fn is_valid(&self, now: Instant) -> bool {
        self.valid_until
            .lock()
            .expect("lease lock poisoned")
            .is_some_and(|until| now < until)
    }

    /// Records a renewal that started at `started` and succeeded.
    pub(crate) fn renewed(&self, started: Instant) {
        let mut until = self.valid_until.lock().expect("lease lock poisoned");
        let renewed = started + WRITER_LEASE;
        *until = Some(until.map_or(renewed, |old| old.max(renewed)));
    }

    pub(crate) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.renewing.lock().await
    }
}

/// A long-lived writer's lease, renewed in the background until dropped (see
/// [`WriterLeaseTask::take`]).
#[derive(Debug)]
pub struct WriterLeaseTask {
    image: std::sync::Arc<crate::Image>,
    renewal: tokio::task::JoinHandle<()>,
}

impl WriterLeaseTask {
    /// Takes a lease on `image` ([`crate::Image::take_writer_lease`]) and renews it every
    /// [`RENEW_INTERVAL`] on the current runtime.
    pub async fn take(image: std::sync::Arc<crate::Image>) -> Result<Self, BlockError> {
        image.take_writer_lease().await?;
        let renewing = image.clone();
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(RENEW_INTERVAL).await;
                if let Err(error) = renewing.renew_writer_lease().await {
                    tracing::debug!("renewing the writer lease failed: {error}");
                }
            }
        });
        Ok(WriterLeaseTask { image, renewal })
    }

    /// Stops renewing, waits for the image's writes and gives the lease up, so the
    /// next `snap create` does not wait for this writer.
    pub async fn release(self) -> Result<(), BlockError> {
        self.renewal.abort();
        self.image.release_writer_lease().await
    }
}

impl Drop for WriterLeaseTask {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

/// Sets `key` to header version `seq` in the registration object of image `id`. Only the first
/// registration (`create`) may create the object: a renewal that finds it gone finds
/// the image removed, and must not leave an orphan registration object behind.
pub(crate) async fn set_writer_key(
    client: &Client,
    pool: &str,
    id: &str,
    key: &Bytes,
    seq: u64,
    create: bool,
) -> Result<(), BlockError> {
    let guard = if create {
        OpCode::Create { exclusive: false }
    } else {
        OpCode::AssertExists
    };
    let ops = vec![
        guard,
        OpCode::OmapSet {
            entries: vec![(key.clone(), Bytes::copy_from_slice(&seq.to_le_bytes()))],
        },
    ];
    match client.operate(pool, &writers_object(id), ops).await {
        Err(error) if error.is_not_found() => Err(BlockError::NotFound(format!(
            "{pool} image id {id} (removed while being written)"
        ))),
        other => other.map(drop).map_err(BlockError::from),
    }
}

/// Refuses while image `id` has a live writer (as `rbd rm` refuses an image with
/// watchers): registered keys whose registration object changes within three renewal
/// intervals. Keys that stay still belong to writers that died; they go with the image.
pub async fn check_no_live_writers(
    client: &Client,
    pool: &str,
    id: &str,
    spec: &str,
) -> Result<(), BlockError> {
    let Some((version, writers)) = list_writers(client, pool, id).await? else {
        return Ok(());
    };
    if writers.is_empty() {
        return Ok(());
    }
    tokio::time::sleep(3 * RENEW_INTERVAL).await;
    let Some((now, writers)) = list_writers(client, pool, id).await? else {
        return Ok(());
    };
    if now == version || writers.is_empty() {
        return Ok(());
    }
    Err(BlockError::Invalid(format!(
        "image {spec} is being written by {} writer(s) (an `image nbd` server or `image \
         bench`); stop them first",
        writers.len()
    )))
}

/// Removes `key` from the registration object of image `id` (a writer that stops).
pub(crate) async fn remove_writer_key(
    client: &Client,
    pool: &str,
    id: &str,
    key: &Bytes,
) -> Result<(), BlockError> {
    let ops = vec![OpCode::OmapRm {
        keys: vec![key.clone()],
    }];
    match client.operate(pool, &writers_object(id), ops).await {
        Err(error) if !error.is_not_found() => Err(error.into()),
        _ => Ok(()),
    }
}

/// The registration object's version and its writers with the header version each
/// acknowledged
/// (`None` when the image has never had a writer).
async fn list_writers(
    client: &Client,
    pool: &str,
    id: &str,
) -> Result<Option<(u64, Vec<(Bytes, u64)>)>, BlockError> {
    let mut writers = Vec::new();
    let mut after = None;
    let mut first_version = None;
    loop {
        let ops = vec![
            OpCode::Stat,
            OpCode::OmapGetVals {
                after: after.clone(),
                max_entries: WRITERS_PER_READ,
            },
        ];
        let reply = match client.operate(pool, &writers_object(id), ops).await {
            Err(error) if error.is_not_found() => return Ok(None),
            other => other?,
        };
        let (Some(OpOutput::Stat { version, .. }), Some(OpOutput::Omap { entries, more })) =
            (reply.outputs.first(), reply.outputs.get(1))
        else {
            return Err(
                ClientError::Other("writer list read returned an unexpected reply".into()).into(),
            );
        };
        if *first_version.get_or_insert(*version) != *version {
            // Changed between pages: start over for a consistent listing.
            writers.clear();
            after = None;
            first_version = None;
            continue;
        }
        for (key, value) in entries {
            writers.push((key.clone(), decode_seq(value)));
        }
        match (more, entries.last()) {
            (true, Some((last, _))) => after = Some(last.clone()),
            _ => return Ok(Some((*version, writers))),
        }
    }
}

/// A value that is not a u64 reads as 0: behind every header version, so `snap create`
/// waits for it and then removes it.
fn decode_seq(value: &[u8]) -> u64 {
    <[u8; 8]>::try_from(value).map_or(0, u64::from_le_bytes)
}

/// Waits until every writer of image `id` has acknowledged header version `seq` (see the
/// module docs); after [`SNAP_ACK_WAIT`], removes the keys of those that did not and
/// returns how many it gave up on.
pub async fn wait_for_writers(
    client: &Client,
    pool: &str,
    id: &str,
    seq: u64,
) -> Result<usize, BlockError> {
    let deadline = Instant::now() + SNAP_ACK_WAIT;
    let mut attempts = 0;
    loop {
        let Some((version, writers)) = list_writers(client, pool, id).await? else {
            return Ok(0);
        };
        let behind: Vec<Bytes> = writers
            .into_iter()
            .filter(|(_, acked)| *acked < seq)
            .map(|(key, _)| key)
            .collect();
        if behind.is_empty() {
            return Ok(0);
        }
        if Instant::now() < deadline {
            tokio::time::sleep(ACK_POLL_INTERVAL).await;
            continue;
        }
        let ops = vec![
            OpCode::AssertVersion { version },
            OpCode::OmapRm {
                keys: behind.clone(),
            },
        ];
        match client.operate(pool, &writers_object(id), ops).await {
            Ok(_) => {
                for key in &behind {
                    tracing::warn!(
                        "writer {} of image {id} did not acknowledge header version {seq} within \
                         {} s; its lease has run out, but writes it still had in flight may \
                         be in the snapshot",
                        String::from_utf8_lossy(key),
                        SNAP_ACK_WAIT.as_secs_f64()
                    );
                }
                return Ok(behind.len());
            }
            Err(ClientError::Op(OpError::VersionMismatch { .. }))
                if attempts < REMOVE_ATTEMPTS_MAX =>
            {
                // A writer set its key meanwhile: look again.
                attempts += 1;
            }
            Err(error) if error.is_not_found() => return Ok(0),
            Err(error) => return Err(error.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_values_decode_and_junk_reads_as_behind() {
        assert_eq!(decode_seq(&7u64.to_le_bytes()), 7);
        assert_eq!(decode_seq(b"short"), 0);
        assert_eq!(decode_seq(b""), 0);
    }

    #[test]
    fn a_renewal_extends_from_when_it_started_and_never_shortens() {
        let lease = WriterLease::new();
        let now = Instant::now();
        assert!(!lease.is_valid(now), "no renewal yet");
        lease.renewed(now);
        assert!(lease.is_valid(now + WRITER_LEASE - Duration::from_millis(1)));
        assert!(!lease.is_valid(now + WRITER_LEASE));
        lease.renewed(now - Duration::from_secs(5));
        assert!(
            lease.is_valid(now + WRITER_LEASE - Duration::from_millis(1)),
            "an older renewal finishing late keeps the later expiry"
        );
        assert!(SNAP_ACK_WAIT > WRITER_LEASE);
        assert!(lease.key().starts_with(b"writer."));
        lease.release();
        assert!(!lease.is_valid(now), "a released lease is over");
        assert!(lease.is_released());
    }
}
