//! Image snapshots (`rbd snap create|ls|rm|rollback|protect|unprotect`).
//!
//! A snapshot is a pool self-managed snapshot id recorded in the image header with
//! its name, the image size then and a protection flag. Image writes carry the
//! header's snapshot context, so each OSD clones a data object on its first write after
//! a snapshot; reads of `IMAGE@SNAP` read at the snapshot id. Removing a snapshot
//! drops it from the header, then marks the id removed in the pool so the OSDs trim
//! its clones in the background.

use crate::admin::{
    existing_objects_at, load_header, lookup_id, update_header, update_header_versioned,
};
use crate::concurrent::{map_ordered, OBJECT_OPS_IN_FLIGHT_MAX};
use crate::header::{data_object, ImageSnap, IMAGE_SNAPS_MAX};
use crate::image::whole_object_writes;
use crate::spec::{validate_snap_name, ImageSpec};
use crate::BlockError;
use carmine_client::{Client, OpSnaps};
use carmine_proto::{OpCode, OpOutput, SnapContext};
use carmine_types::SnapId;

fn snap_spec(spec: &ImageSpec, name: &str) -> String {
    format!("{spec}@{name}")
}

/// Takes snapshot `name` of `spec`: it holds every write acknowledged before this
/// returns and none acknowledged after. Long-lived writers (the NBD server, `image
/// bench`) hold leases, and this waits until each has switched to the new snapshot
/// context and has no write under the old one in flight (`lease.rs`; up to
/// [`crate::lease::SNAP_ACK_WAIT`] for one that has died). Writers without a lease
/// (`import`, `cp`, `rollback`) are not waited for.
pub async fn create(
    client: &Client,
    spec: &ImageSpec,
    name: &str,
) -> Result<ImageSnap, BlockError> {
    validate_snap_name(name).map_err(BlockError::Invalid)?;
    let id = lookup_id(client, spec).await?;
    let (header, _) = load_header(client, spec, &id).await?;
    if header.snap(name).is_some() {
        return Err(BlockError::SnapExists(snap_spec(spec, name)));
    }
    if header.snaps.len() >= IMAGE_SNAPS_MAX {
        return Err(BlockError::Invalid(format!(
            "{spec} already has {IMAGE_SNAPS_MAX} snapshots; remove some first"
        )));
    }
    let snap_id = client.selfmanaged_snap_create(&spec.pool).await?;
    let mut created = None;
    let result = update_header_versioned(client, spec, |header| {
        if header.snap(name).is_some() {
            return Err(BlockError::SnapExists(snap_spec(spec, name)));
        }
        let snap = ImageSnap {
            id: snap_id,
            name: name.to_string(),
            size_bytes: header.size_bytes,
            protected: false,
        };
        header.snap_seq = header.snap_seq.max(snap_id);
        header.snaps.push(snap.clone());
        created = Some(snap);
        Ok(())
    })
    .await;
    let (_, version) = match result {
        Ok(updated) => updated,
        Err(error) => {
            // The id was never used: give it back so nothing waits to trim it.
            let _ = client.selfmanaged_snap_remove(&spec.pool, snap_id).await;
            return Err(error);
        }
    };
    crate::lease::wait_for_writers(client, &spec.pool, &id, version).await?;
    Ok(created.expect("the header update ran"))
}

/// The snapshots of `spec`, oldest first.
pub async fn list(client: &Client, spec: &ImageSpec) -> Result<Vec<ImageSnap>, BlockError> {
    let id = lookup_id(client, spec).await?;
    Ok(load_header(client, spec, &id).await?.0.snaps)
}

/// Removes snapshot `name`; refused while it is protected. Its clones are trimmed by
/// the OSDs in the background.
pub async fn remove(client: &Client, spec: &ImageSpec, name: &str) -> Result<(), BlockError> {
    let mut removed = None;
    update_header(client, spec, |header| {
        let index = header
            .snaps
            .iter()
            .position(|snap| snap.name == name)
            .ok_or_else(|| BlockError::NoSuchSnap(snap_spec(spec, name)))?;
        if header.snaps[index].protected {
            return Err(BlockError::SnapProtected(snap_spec(spec, name)));
        }
        removed = Some(header.snaps.remove(index));
        Ok(())
    })
    .await?;
    let snap = removed.expect("the header update ran");
    client.selfmanaged_snap_remove(&spec.pool, snap.id).await?;
    Ok(())
}

/// Sets or clears the protection of snapshot `name`.
pub async fn set_protected(
    client: &Client,
    spec: &ImageSpec,
    name: &str,
    protected: bool,
) -> Result<(), BlockError> {
    if !protected {
        let id = lookup_id(client, spec).await?;
        let (header, _) = load_header(client, spec, &id).await?;
        if let Some(snap) = header.snap(name) {
            let children = crate::clone::children_of(client, &spec.pool, &id, snap.id).await?;
            if !children.is_empty() {
                return Err(BlockError::Invalid(format!(
                    "snapshot {} has {} clones ({}); flatten or remove them first",
                    snap_spec(spec, name),
                    children.len(),
                    children.join(", ")
                )));
            }
        }
    }
    update_header(client, spec, |header| {
        let snap = header
            .snaps
            .iter_mut()
            .find(|snap| snap.name == name)
            .ok_or_else(|| BlockError::NoSuchSnap(snap_spec(spec, name)))?;
        if snap.protected == protected {
            return Err(BlockError::Invalid(format!(
                "snapshot {} is already {}",
                snap_spec(spec, name),
                if protected {
                    "protected"
                } else {
                    "unprotected"
                }
            )));
        }
        snap.protected = protected;
        Ok(())
    })
    .await?;
    Ok(())
}

/// Writes snapshot `name`'s content back to the image head, object by object (read at
/// the snapshot, write the whole object; absent then → remove now), and restores its
/// size. The writes carry the image's snapshot context, so every snapshot, this one
/// included, keeps its content. Refused while a writer with a lease (a running NBD
/// server) is live, as the disk would change beneath it. Returns the number of objects
/// written or removed.
pub async fn rollback(client: &Client, spec: &ImageSpec, name: &str) -> Result<u64, BlockError> {
    let id = lookup_id(client, spec).await?;
    // Rolling back under a running writer would change its disk beneath it.
    crate::lease::check_no_live_writers(client, &spec.pool, &id, &spec.to_string()).await?;
    let (header, _) = load_header(client, spec, &id).await?;
    let snap = header
        .snap(name)
        .ok_or_else(|| BlockError::NoSuchSnap(snap_spec(spec, name)))?
        .clone();
    let snapc = header.snap_context();
    // Objects that exist now or at the snapshot: the rest are absent in both.
    let mut numbers: Vec<u64> = existing_objects_at(client, &spec.pool, &header, SnapId::HEAD)
        .await?
        .into_iter()
        .map(|(number, _)| number)
        .collect();
    let mut at_snap = header.clone();
    at_snap.size_bytes = snap.size_bytes;
    numbers.extend(
        existing_objects_at(client, &spec.pool, &at_snap, SnapId(snap.id))
            .await?
            .into_iter()
            .map(|(number, _)| number),
    );
    numbers.sort_unstable();
    numbers.dedup();
    let count = numbers.len() as u64;
    map_ordered(numbers, OBJECT_OPS_IN_FLIGHT_MAX, |number| {
        let (client, pool) = (client.clone(), spec.pool.clone());
        let oid = data_object(&id, number);
        let snapc = snapc.clone();
        async move { rollback_object(&client, &pool, &oid, snap.id, snapc).await }
    })
    .await?;
    update_header(client, spec, |header| {
        header.size_bytes = snap.size_bytes;
        Ok(())
    })
    .await?;
    Ok(count)
}

async fn rollback_object(
    client: &Client,
    pool: &str,
    oid: &str,
    snap: u64,
    snapc: SnapContext,
) -> Result<(), BlockError> {
    let read = OpSnaps {
        snapc: SnapContext::default(),
        snapid: SnapId(snap),
    };
    let full = vec![OpCode::Read {
        offset: 0,
        length: 0,
    }];
    let write = |ops| {
        let snaps = OpSnaps {
            snapc: snapc.clone(),
            snapid: SnapId::HEAD,
        };
        client.operate_snaps(pool, oid, ops, snaps)
    };
    match client.operate_snaps(pool, oid, full, read).await {
        Ok(reply) => {
            let Some(OpOutput::Data(data)) = reply.outputs.first() else {
                return Err(BlockError::Invalid(format!(
                    "read of {oid} returned no data"
                )));
            };
            write(whole_object_writes(data.clone())).await?;
        }
        Err(error) if error.is_not_found() => match write(vec![OpCode::Remove]).await {
            Err(error) if !error.is_not_found() => return Err(error.into()),
            _ => {}
        },
        Err(error) => return Err(error.into()),
    }
    Ok(())
}
