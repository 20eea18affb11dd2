//! [`Image`]: an open image, for byte-range I/O.
//!
//! Reads and writes are split at object boundaries and the pieces run concurrently.
//! Absent objects read as zeros; short objects are padded with zeros. Discard and
//! write-zeroes remove whole objects and zero partial ranges, so a discarded range
//! costs no space.

use crate::ancestry::Ancestry;
use crate::concurrent::join_all;
use crate::header::{data_object, ImageHeader};
use crate::layout::{extents, in_bounds, object_size_bytes, ObjectExtent};
use crate::lease::{self, WriterLease};
use crate::spec::ImageSpec;
use crate::tracker::{WriteGuard, WriteTracker};
use crate::{admin, BlockError};
use bytes::{Bytes, BytesMut};
use carmine_client::{Client, ClientError, OpSnaps};
use carmine_proto::{OpCode, OpError, OpOutput, SnapContext};
use carmine_types::limits::WRITE_BYTES_MAX;
use carmine_types::{PoolId, SnapId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Held by a write for as long as it is in flight: which context it carries. When the
/// last holder of a retired context drops it, the sender inside goes with it and
/// [`CurrentContext::retire`]'s receiver completes.
type ContextUse = Arc<tokio::sync::oneshot::Sender<()>>;

/// The snapshot context writes carry now, the header version it (and the size in
/// force) came from, and the token its writes hold.
#[derive(Debug)]
struct CurrentContext {
    snapc: SnapContext,
    header_version: u64,
    users: ContextUse,
    drained: tokio::sync::oneshot::Receiver<()>,
}

impl CurrentContext {
    fn new(snapc: SnapContext, header_version: u64) -> CurrentContext {
        let (users, drained) = tokio::sync::oneshot::channel();
        CurrentContext {
            snapc,
            header_version,
            users: Arc::new(users),
            drained,
        }
    }

    /// Replaced by a newer context: completes once no write carries it any more.
    fn retire(self) -> tokio::sync::oneshot::Receiver<()> {
        self.drained
    }
}

/// An open image. Cheap to share behind an `Arc`: every method takes `&self`, and
/// flushes see the writes of every user of the same handle.
pub struct Image {
    client: Client,
    spec: ImageSpec,
    /// The pool's id, looked up once at opening: one-object I/O addresses the pool by
    /// id, skipping a lookup by name in the current map per op.
    pool_id: PoolId,
    id: String,
    order: u8,
    size_bytes: AtomicU64,
    tracker: WriteTracker,
    /// What writes carry: the image's snapshots as of opening or the last
    /// [`Image::refresh_header`] (a long-lived writer's lease renewals call it:
    /// `lease.rs`). Held only to copy or replace it, never across I/O.
    snapc: std::sync::Mutex<CurrentContext>,
    /// Set once a long-lived writer takes a lease ([`Image::take_writer_lease`]).
    lease: std::sync::OnceLock<WriterLease>,
    /// `Some(name, id)` for a handle on a snapshot: reads see it, writes are refused.
    snapshot: Option<(String, u64)>,
    /// A clone's parents, nearest first: reads fall through to them, first writes copy
    /// up from them.
    ancestry: Ancestry,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("spec", &self.spec)
            .field("id", &self.id)
            .field("order", &self.order)
            .field("size_bytes", &self.size())
            .finish()
    }
}

impl Image {
    /// Opens `spec`: looks its id up in the pool's directory and loads its header.
    pub async fn open(client: &Client, spec: &ImageSpec) -> Result<Image, BlockError> {
        let id = admin::lookup_id(client, spec).await?;
        let (header, _) = admin::load_header(client, spec, &id).await?;
        Image::from_header(client.clone(), spec.clone(), &header).await
    }

    /// Opens snapshot `snap` of `spec` (or the head for `None`): reads see the image as
    /// it was when the snapshot was taken, with its size then; writes are refused.
    pub async fn open_at(
        client: &Client,
        spec: &ImageSpec,
        snap: Option<&str>,
    ) -> Result<Image, BlockError> {
        let id = admin::lookup_id(client, spec).await?;
        let (header, _) = admin::load_header(client, spec, &id).await?;
        let mut image = Image::from_header(client.clone(), spec.clone(), &header).await?;
        if let Some(name) = snap {
            let found = header
                .snap(name)
                .ok_or_else(|| BlockError::NoSuchSnap(format!("{spec}@{name}")))?;
            image.size_bytes = AtomicU64::new(found.size_bytes);
            image.snapshot = Some((name.to_string(), found.id));
        }
        Ok(image)
    }

    pub(crate) async fn from_header(
        client: Client,
        spec: ImageSpec,
        header: &ImageHeader,
    ) -> Result<Image, BlockError> {
        let ancestry = Ancestry::load(&client, header.parent.as_ref()).await?;
        let pool_id = client.pool_id(&spec.pool)?;
        Ok(Image {
            client,
            pool_id,
            spec,
            id: header.id.clone(),
            order: header.order,
            size_bytes: AtomicU64::new(header.size_bytes),
            tracker: WriteTracker::default(),
            // Version 0: the first refresh applies whatever the header holds then.
            snapc: std::sync::Mutex::new(CurrentContext::new(header.snap_context(), 0)),
            lease: std::sync::OnceLock::new(),
            snapshot: None,
            ancestry,
        })
    }

    /// Reloads the header: writes from now on carry its snapshot context (preserving
    /// snapshots taken by other processes since) and stay within its size. When the
    /// header changed, returns once no write admitted under the old one is still in
    /// flight. Returns whether it changed.
    pub async fn refresh_header(&self) -> Result<bool, BlockError> {
        if self.snapshot.is_some() {
            return Ok(false);
        }
        let (header, version) = admin::load_header(&self.client, &self.spec, &self.id).await?;
        let drained = {
            let mut current = self.snapc.lock().expect("snap context lock poisoned");
            // Never step back (a header read that raced a newer one).
            if version <= current.header_version {
                return Ok(false);
            }
            // Before the new token: a write holding it sees this size.
            self.size_bytes.store(header.size_bytes, Ordering::Release);
            let fresh = CurrentContext::new(header.snap_context(), version);
            std::mem::replace(&mut *current, fresh).retire()
        };
        // Nothing is ever sent: the receiver completes when the last sender is dropped.
        let _ = drained.await;
        Ok(true)
    }

    /// The context a write carries now, and the token it holds while in flight. Take
    /// it before checking the write's range, so that a write checked against a size
    /// since shrunk holds the old token and is waited for.
    fn write_context(&self) -> (SnapContext, ContextUse) {
        let current = self.snapc.lock().expect("snap context lock poisoned");
        (current.snapc.clone(), current.users.clone())
    }

    /// Makes this handle a long-lived writer with a lease (see `lease.rs`): registers it
    /// with the image and renews once, so that `snap create` waits for it to switch to
    /// each new snapshot. Renew with [`Image::renew_writer_lease`] every
    /// [`lease::RENEW_INTERVAL`]; a write that finds the lease run out renews first.
    pub async fn take_writer_lease(&self) -> Result<(), BlockError> {
        self.check_writable()?;
        if self.lease.set(WriterLease::new()).is_err() {
            return Err(BlockError::Invalid(format!(
                "{} already holds a writer lease",
                self.spec
            )));
        }
        self.renew(true).await
    }

    /// One lease renewal: sets this writer's key, rereads the header, switches to a
    /// newer snapshot context (waiting out the writes under the old one) and
    /// acknowledges it. A no-op for a handle without a lease.
    pub async fn renew_writer_lease(&self) -> Result<(), BlockError> {
        self.renew(false).await
    }

    /// A renewal; `first` registers (creating the registration object if need be).
    async fn renew(&self, first: bool) -> Result<(), BlockError> {
        let Some(lease) = self.lease.get() else {
            return Ok(());
        };
        let _turn = lease.turn().await;
        if lease.is_released() {
            return Err(BlockError::Invalid(format!(
                "{} gave its writer lease up; reopen it to write",
                self.spec
            )));
        }
        let started = Instant::now();
        let (pool, id, key) = (&self.spec.pool, &self.id, lease.key());
        let acked = self.header_version();
        lease::set_writer_key(&self.client, pool, id, key, acked, first).await?;
        if self.refresh_header().await? {
            let acked = self.header_version();
            lease::set_writer_key(&self.client, pool, id, key, acked, false).await?;
        }
        lease.renewed(started);
        Ok(())
    }

    /// Gives the lease up (a writer that stops): later writes through this handle fail;
    /// flushes, then removes its key, so the next `snap create` does not wait for it.
    pub async fn release_writer_lease(&self) -> Result<(), BlockError> {
        let Some(lease) = self.lease.get() else {
            return Ok(());
        };
        // After any renewal in progress (which would set the key again), and for good:
        // a later write must not go out unregistered.
        let _turn = lease.turn().await;
        lease.release();
        self.flush().await?;
        lease::remove_writer_key(&self.client, &self.spec.pool, &self.id, lease.key()).await
    }

    /// Before a write: a handle with a lease that has run out renews it first.
    async fn hold_lease(&self) -> Result<(), BlockError> {
        let Some(lease) = self.lease.get() else {
            return Ok(());
        };
        // A renewal slower than a lease (the header's PG was unavailable that long)
        // leaves it run out again: renew until one is in force, as a write to an
        // unavailable PG waits for it.
        while !lease.is_valid(Instant::now()) {
            self.renew_writer_lease().await?;
        }
        Ok(())
    }

    /// The header version whose snapshot context and size this handle's writes follow.
    fn header_version(&self) -> u64 {
        self.snapc
            .lock()
            .expect("snap context lock poisoned")
            .header_version
    }

    /// Where this handle's reads come from.
    pub(crate) fn read_source(&self) -> ReadSource {
        ReadSource {
            pool: self.spec.pool.clone(),
            id: self.id.clone(),
            snap: self.read_snap(),
            order: self.order,
            ancestry: self.ancestry.clone(),
        }
    }

    /// Whether object `object_number` may still read through to the parent.
    fn parent_covers(&self, object_number: u64) -> bool {
        self.ancestry.covers(object_number, self.order)
    }

    /// The snapshot id reads use ([`SnapId::HEAD`] for the live image).
    pub fn read_snap(&self) -> SnapId {
        self.snapshot
            .as_ref()
            .map_or(SnapId::HEAD, |(_, id)| SnapId(*id))
    }

    /// The snapshot this handle reads, if it is one.
    pub fn snapshot_name(&self) -> Option<&str> {
        self.snapshot.as_ref().map(|(name, _)| name.as_str())
    }

    fn check_writable(&self) -> Result<(), BlockError> {
        match &self.snapshot {
            Some((name, _)) => Err(BlockError::ReadOnly(format!("{}@{name}", self.spec))),
            None => Ok(()),
        }
    }

    pub fn spec(&self) -> &ImageSpec {
        &self.spec
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn order(&self) -> u8 {
        self.order
    }

    pub fn object_size_bytes(&self) -> u64 {
        object_size_bytes(self.order)
    }

    pub fn size(&self) -> u64 {
        self.size_bytes.load(Ordering::Acquire)
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    fn check_range(&self, offset: u64, length: u64) -> Result<(), BlockError> {
        let size_bytes = self.size();
        if in_bounds(offset, length, size_bytes) {
            Ok(())
        } else {
            Err(BlockError::OutOfRange {
                offset,
                length,
                size_bytes,
            })
        }
    }

    /// Reads `length` bytes at `offset`.
    pub async fn read(&self, offset: u64, length: u64) -> Result<Bytes, BlockError> {
        self.check_range(offset, length)?;
        let mut pieces = extents(offset, length, self.order);
        if let (Some(extent), None) = (pieces.next(), pieces.next()) {
            // One object (every 4 KiB NBD read): read right here, borrowing the handle,
            // with no task, no join, no copies of the pool and image names.
            let oid = data_object(&self.id, extent.object_number);
            let snaps = OpSnaps {
                snapc: SnapContext::default(),
                snapid: self.read_snap(),
            };
            let reply = self
                .client
                .operate_pool_id(self.pool_id, oid, read_ops(extent), snaps)
                .await;
            return finish_extent_read(&self.client, &self.ancestry, self.order, extent, reply)
                .await;
        }
        let pieces: Vec<_> = extents(offset, length, self.order)
            .map(|extent| {
                let (client, source) = (self.client.clone(), self.read_source());
                async move { read_image_extent(&client, &source, extent).await }
            })
            .collect();
        let mut pieces = join_all(pieces).await?;
        if pieces.len() == 1 {
            return Ok(pieces.pop().expect("one piece"));
        }
        let mut buffer = BytesMut::with_capacity(length as usize);
        for piece in pieces {
            buffer.extend_from_slice(&piece);
        }
        assert_eq!(buffer.len() as u64, length);
        Ok(buffer.freeze())
    }

    /// Registers a write that is about to start, so that a flush issued after this
    /// call waits for it (the NBD server calls this in request order, before it spawns
    /// the request).
    pub fn start_write(&self) -> WriteGuard {
        self.tracker.begin()
    }

    /// Writes `data` at `offset`. Returns once every replica has it durable.
    pub async fn write(&self, offset: u64, data: Bytes) -> Result<(), BlockError> {
        self.write_started(self.start_write(), offset, data).await
    }

    /// [`Image::write`] for a write registered with [`Image::start_write`].
    pub async fn write_started(
        &self,
        guard: WriteGuard,
        offset: u64,
        data: Bytes,
    ) -> Result<(), BlockError> {
        self.check_writable()?;
        self.hold_lease().await?;
        let context = self.write_context();
        self.check_range(offset, data.len() as u64)?;
        if data.len() <= WRITE_BYTES_MAX {
            let mut pieces = extents(offset, data.len() as u64, self.order);
            if let (Some(extent), None) = (pieces.next(), pieces.next()) {
                // One object, one op (every 4 KiB NBD write): awaited right here, with
                // no shared guard, no join and no copies of the pool name or client.
                let op = OpCode::Write {
                    offset: extent.offset_in_object,
                    data,
                };
                let result = self
                    .object_op_here(extent.object_number, vec![op], context)
                    .await;
                drop(guard);
                return result;
            }
        }
        let guard = Arc::new(guard);
        let mut writes = Vec::new();
        for extent in extents(offset, data.len() as u64, self.order) {
            let start = extent.buffer_offset as usize;
            let piece = data.slice(start..start + extent.length as usize);
            // Objects of order 25 are larger than one message may carry.
            for chunk_start in (0..piece.len()).step_by(WRITE_BYTES_MAX) {
                let chunk_end = (chunk_start + WRITE_BYTES_MAX).min(piece.len());
                let op = OpCode::Write {
                    offset: extent.offset_in_object + chunk_start as u64,
                    data: piece.slice(chunk_start..chunk_end),
                };
                writes.push(self.object_op(
                    extent.object_number,
                    vec![op],
                    guard.clone(),
                    &context,
                ));
            }
        }
        join_all(writes).await?;
        Ok(())
    }

    /// Deallocates `[offset, offset + length)`: it reads as zeros afterwards.
    pub async fn discard(&self, offset: u64, length: u64) -> Result<(), BlockError> {
        self.discard_started(self.start_write(), offset, length)
            .await
    }

    /// [`Image::discard`] for a write registered with [`Image::start_write`].
    pub async fn discard_started(
        &self,
        guard: WriteGuard,
        offset: u64,
        length: u64,
    ) -> Result<(), BlockError> {
        self.check_writable()?;
        self.hold_lease().await?;
        let context = self.write_context();
        self.check_range(offset, length)?;
        let guard = Arc::new(guard);
        let order = self.order;
        let ops: Vec<_> = extents(offset, length, order)
            .map(|extent| {
                let op = if self.parent_covers(extent.object_number) {
                    // Removing or zeroing an absent object would let the parent show
                    // through: write zeros instead (copying the object up first).
                    OpCode::Write {
                        offset: extent.offset_in_object,
                        data: Bytes::from(vec![0u8; extent.length as usize]),
                    }
                } else if extent.is_whole_object(order) {
                    OpCode::Remove
                } else {
                    OpCode::Zero {
                        offset: extent.offset_in_object,
                        length: extent.length,
                    }
                };
                self.object_op(extent.object_number, vec![op], guard.clone(), &context)
            })
            .collect();
        join_all(ops).await?;
        Ok(())
    }

    /// Makes `[offset, offset + length)` read as zeros; the same as a discard, since
    /// deallocated ranges read as zeros.
    pub async fn write_zeroes(&self, offset: u64, length: u64) -> Result<(), BlockError> {
        self.discard(offset, length).await
    }

    /// Returns once every write that started before this call is durable.
    pub async fn flush(&self) -> Result<(), BlockError> {
        self.tracker.wait_for_earlier().await;
        Ok(())
    }

    /// Changes the size (see [`admin::resize`]) and this handle's view of it.
    pub async fn resize(&self, size_bytes: u64, allow_shrink: bool) -> Result<(), BlockError> {
        self.check_writable()?;
        self.flush().await?;
        admin::resize(&self.client, &self.spec, size_bytes, allow_shrink).await?;
        self.size_bytes.store(size_bytes, Ordering::Release);
        Ok(())
    }

    /// One op on one data object; a missing object is fine for removes and zeroes.
    fn object_op(
        &self,
        object_number: u64,
        ops: Vec<OpCode>,
        guard: Arc<WriteGuard>,
        context: &(SnapContext, ContextUse),
    ) -> impl std::future::Future<Output = Result<(), BlockError>> + Send + 'static {
        let (client, pool) = (self.client.clone(), self.spec.pool.clone());
        let oid = data_object(&self.id, object_number);
        let context_use = context.1.clone();
        let snaps = OpSnaps {
            snapc: context.0.clone(),
            snapid: SnapId::HEAD,
        };
        let parent = self
            .parent_covers(object_number)
            .then(|| (self.ancestry.clone(), object_number, self.order));
        let missing_ok = missing_object_is_success(&ops);
        async move {
            let result = match parent {
                Some((parent, number, order)) => {
                    write_with_copyup(&client, &pool, &oid, ops, snaps, &parent, number, order)
                        .await
                }
                None => client
                    .operate_snaps(&pool, &oid, ops, snaps)
                    .await
                    .map(drop),
            };
            drop((guard, context_use));
            object_op_result(result, missing_ok)
        }
    }

    /// [`Image::object_op`] run by the caller's future, borrowing what it needs (the
    /// caller holds the write's guard).
    async fn object_op_here(
        &self,
        object_number: u64,
        ops: Vec<OpCode>,
        context: (SnapContext, ContextUse),
    ) -> Result<(), BlockError> {
        let oid = data_object(&self.id, object_number);
        let (snapc, _context_use) = context;
        let snaps = OpSnaps {
            snapc,
            snapid: SnapId::HEAD,
        };
        let missing_ok = missing_object_is_success(&ops);
        let result = if self.parent_covers(object_number) {
            write_with_copyup(
                &self.client,
                &self.spec.pool,
                &oid,
                ops,
                snaps,
                &self.ancestry,
                object_number,
                self.order,
            )
            .await
        } else {
            self.client
                .operate_pool_id(self.pool_id, oid, ops, snaps)
                .await
                .map(drop)
        };
        object_op_result(result, missing_ok)
    }
}

/// Whether a missing object means the ops are done: removing or zeroing what is not
/// there leaves it reading as zeros. A write answered "not found" is an error.
fn missing_object_is_success(ops: &[OpCode]) -> bool {
    ops.iter()
        .all(|op| matches!(op, OpCode::Remove | OpCode::Zero { .. }))
}

/// An object op's outcome for the image (`missing_ok` from
/// [`missing_object_is_success`]).
fn object_op_result(result: Result<(), ClientError>, missing_ok: bool) -> Result<(), BlockError> {
    match result {
        Ok(()) => Ok(()),
        Err(error) if missing_ok && error.is_not_found() => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Where an image's reads come from: its objects at a snapshot (or the head), and for
/// a clone, its parent where the clone has no object.
#[derive(Debug, Clone)]
pub(crate) struct ReadSource {
    pub pool: String,
    pub id: String,
    pub snap: SnapId,
    pub order: u8,
    pub ancestry: Ancestry,
}

/// Reads one extent of an image, falling through to the parent (at its snapshot, up
/// to the overlap) where a clone has no object.
pub(crate) async fn read_image_extent(
    client: &Client,
    source: &ReadSource,
    extent: ObjectExtent,
) -> Result<Bytes, BlockError> {
    let oid = data_object(&source.id, extent.object_number);
    let snaps = OpSnaps {
        snapc: SnapContext::default(),
        snapid: source.snap,
    };
    let reply = client
        .operate_snaps(&source.pool, &oid, read_ops(extent), snaps)
        .await;
    finish_extent_read(client, &source.ancestry, source.order, extent, reply).await
}

/// The op that reads `extent` from its object.
fn read_ops(extent: ObjectExtent) -> Vec<OpCode> {
    vec![OpCode::Read {
        offset: extent.offset_in_object,
        length: extent.length,
    }]
}

/// An extent's data from the object's `reply`: padded with zeros when the object is
/// short, and read from the parents (or as zeros) when the object does not exist.
async fn finish_extent_read(
    client: &Client,
    ancestry: &Ancestry,
    order: u8,
    extent: ObjectExtent,
    reply: Result<carmine_proto::OsdOpReply, ClientError>,
) -> Result<Bytes, BlockError> {
    match reply {
        Ok(reply) => match reply.outputs.first() {
            Some(OpOutput::Data(data)) => Ok(pad_to(data.clone(), extent.length as usize)),
            _ => Err(ClientError::Op(OpError::Io("read reply without data".into())).into()),
        },
        Err(error) if error.is_not_found() => {
            let data = ancestry
                .read(
                    client,
                    extent.object_number,
                    order,
                    extent.offset_in_object,
                    extent.length,
                )
                .await?;
            Ok(pad_to(data, extent.length as usize))
        }
        Err(error) => Err(error.into()),
    }
}

/// A write to a clone's object that may still read through to the parent: applied
/// as is when the object exists; otherwise the parent's object (at the snapshot, cut
/// at the overlap) is copied up in the same request, ahead of the write.
#[allow(clippy::too_many_arguments)]
async fn write_with_copyup(
    client: &Client,
    pool: &str,
    oid: &str,
    ops: Vec<OpCode>,
    snaps: OpSnaps,
    ancestry: &Ancestry,
    object_number: u64,
    order: u8,
) -> Result<(), ClientError> {
    // Two rounds suffice: a lost race to create the object means it now exists.
    for _ in 0..2 {
        let mut guarded = vec![OpCode::AssertExists];
        guarded.extend(ops.iter().cloned());
        match client
            .operate_snaps(pool, oid, guarded, snaps.clone())
            .await
        {
            Err(error) if error.is_not_found() => {}
            other => return other.map(drop),
        }
        let data = ancestry
            .copyup_data(client, object_number, order)
            .await
            .map_err(|error| ClientError::Other(error.to_string()))?;
        let mut copyup = vec![OpCode::Create { exclusive: true }];
        if !data.is_empty() {
            copyup.extend(whole_object_writes(data));
        }
        copyup.extend(ops.iter().cloned());
        match client.operate_snaps(pool, oid, copyup, snaps.clone()).await {
            Err(ClientError::Op(OpError::Exists)) => continue,
            other => return other.map(drop),
        }
    }
    Err(ClientError::Other(format!(
        "copy-up of {oid} kept racing with another writer"
    )))
}

/// The ops that replace a whole object's data with `data`, in pieces no larger than
/// one write may carry.
pub(crate) fn whole_object_writes(data: Bytes) -> Vec<OpCode> {
    let mut ops = vec![OpCode::WriteFull {
        data: data.slice(..data.len().min(WRITE_BYTES_MAX)),
    }];
    for start in (WRITE_BYTES_MAX..data.len()).step_by(WRITE_BYTES_MAX) {
        let end = (start + WRITE_BYTES_MAX).min(data.len());
        ops.push(OpCode::Write {
            offset: start as u64,
            data: data.slice(start..end),
        });
    }
    ops
}

/// `data` padded with zeros (or cut) to exactly `length` bytes.
fn pad_to(data: Bytes, length: usize) -> Bytes {
    if data.len() == length {
        return data;
    }
    if data.len() > length {
        return data.slice(..length);
    }
    let mut padded = BytesMut::with_capacity(length);
    padded.extend_from_slice(&data);
    padded.resize(length, 0);
    padded.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_short_reads() {
        assert_eq!(&pad_to(Bytes::from_static(b"ab"), 4)[..], b"ab\0\0");
        assert_eq!(&pad_to(Bytes::new(), 3)[..], b"\0\0\0");
        assert_eq!(&pad_to(Bytes::from_static(b"abcd"), 2)[..], b"ab");
    }

    #[test]
    fn splits_large_object_writes() {
        let data = Bytes::from(vec![7u8; WRITE_BYTES_MAX * 2 + 3]);
        let ops = whole_object_writes(data);
        assert_eq!(ops.len(), 3);
        assert!(matches!(&ops[0], OpCode::WriteFull { data } if data.len() == WRITE_BYTES_MAX));
        assert!(
            matches!(&ops[2], OpCode::Write { offset, data } if *offset == 2 * WRITE_BYTES_MAX as u64 && data.len() == 3)
        );
        assert_eq!(whole_object_writes(Bytes::from_static(b"x")).len(), 1);
    }

    #[test]
    fn only_removes_and_zeroes_take_a_missing_object_as_done() {
        let not_found = || Err(ClientError::Op(OpError::NotFound));
        let remove = [OpCode::Remove];
        let zero = [OpCode::Zero {
            offset: 0,
            length: 1,
        }];
        let write = [OpCode::Write {
            offset: 0,
            data: Bytes::from_static(b"x"),
        }];
        assert!(object_op_result(not_found(), missing_object_is_success(&remove)).is_ok());
        assert!(object_op_result(not_found(), missing_object_is_success(&zero)).is_ok());
        assert!(object_op_result(not_found(), missing_object_is_success(&write)).is_err());
        assert!(object_op_result(Ok(()), missing_object_is_success(&write)).is_ok());
    }
}
