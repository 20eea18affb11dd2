//! Clones (RBD layering): `clone POOL/PARENT@SNAP POOL/CHILD`, `children`, `flatten`.
//!
//! A clone is an image whose header names a parent: a protected snapshot of another
//! image, and the overlap (the parent's size at the snapshot). The clone has the
//! parent's order, so its object N corresponds to the parent's object N: a read of an
//! absent clone object falls through to the parent at the snapshot, and the first
//! write to one copies the parent's object up in the same request (see `image.rs`).
//! The parent's pool keeps a `rbd_children` object whose omap lists each clone, so a
//! snapshot with children cannot be unprotected. Flatten copies up every object still
//! reading through, then drops the parent link and the registration.
//!
//! A protected snapshot of a clone can be cloned in turn: reads then fall through the
//! whole chain (see `ancestry.rs`), and flattening copies from whichever ancestor has
//! each object.

use crate::admin::{self, load_header, lookup_id, update_header};
use crate::ancestry::Ancestry;
use crate::concurrent::{map_ordered, OBJECT_OPS_IN_FLIGHT_MAX};
use crate::header::{children_key, children_prefix, data_object, ParentInfo, CHILDREN_OBJECT};
use crate::image::whole_object_writes;
use crate::layout::object_count;
use crate::spec::ImageSpec;
use crate::BlockError;
use bytes::Bytes;
use carmine_client::{Client, ClientError, OpSnaps};
use carmine_proto::{OpCode, OpError};
use carmine_types::SnapId;

/// Creates `child` as a clone of `parent@snap`, which must be protected.
pub async fn clone(
    client: &Client,
    parent: &ImageSpec,
    snap: &str,
    child: &ImageSpec,
) -> Result<(), BlockError> {
    let parent_id = lookup_id(client, parent).await?;
    let (header, _) = load_header(client, parent, &parent_id).await?;
    let found = header
        .snap(snap)
        .ok_or_else(|| BlockError::NoSuchSnap(format!("{parent}@{snap}")))?;
    if !found.protected {
        return Err(BlockError::Invalid(format!(
            "snapshot {parent}@{snap} is not protected; protect it first (image snap protect)"
        )));
    }
    let info = ParentInfo {
        pool: parent.pool.clone(),
        image_id: parent_id.clone(),
        snap_id: found.id,
        overlap_bytes: found.size_bytes,
    };
    let created = admin::create(client, child, found.size_bytes, header.order).await?;
    // Register first: a child never exists unregistered, so unprotect cannot miss it.
    let key = children_key(&parent_id, found.id, &child.pool, &created.id);
    let ops = vec![
        OpCode::Create { exclusive: false },
        OpCode::OmapSet {
            entries: vec![(key, Bytes::from(child.to_string()))],
        },
    ];
    client.operate(&parent.pool, CHILDREN_OBJECT, ops).await?;
    update_header(client, child, |header| {
        header.parent = Some(info.clone());
        Ok(())
    })
    .await?;
    Ok(())
}

/// The clones (`POOL/NAME`) of `parent@snap`.
pub async fn children(
    client: &Client,
    parent: &ImageSpec,
    snap: &str,
) -> Result<Vec<String>, BlockError> {
    let parent_id = lookup_id(client, parent).await?;
    let (header, _) = load_header(client, parent, &parent_id).await?;
    let found = header
        .snap(snap)
        .ok_or_else(|| BlockError::NoSuchSnap(format!("{parent}@{snap}")))?;
    children_of(client, &parent.pool, &parent_id, found.id).await
}

pub(crate) async fn children_of(
    client: &Client,
    pool: &str,
    parent_id: &str,
    snap_id: u64,
) -> Result<Vec<String>, BlockError> {
    let entries = match client.omap_list(pool, CHILDREN_OBJECT).await {
        Err(error) if error.is_not_found() => Vec::new(),
        other => other?,
    };
    let prefix = children_prefix(parent_id, snap_id);
    Ok(entries
        .into_iter()
        .filter(|(key, _)| key.starts_with(prefix.as_bytes()))
        .map(|(_, value)| String::from_utf8_lossy(&value).into_owned())
        .collect())
}

/// Forgets `child` (image id `child_id`) as a clone of `parent`.
pub(crate) async fn unregister(
    client: &Client,
    parent: &ParentInfo,
    child_pool: &str,
    child_id: &str,
) -> Result<(), BlockError> {
    let key = children_key(&parent.image_id, parent.snap_id, child_pool, child_id);
    let ops = vec![OpCode::OmapRm { keys: vec![key] }];
    match client.operate(&parent.pool, CHILDREN_OBJECT, ops).await {
        Err(error) if !error.is_not_found() => Err(error.into()),
        _ => Ok(()),
    }
}

/// Copies every object of `child` that still reads through to its parent, then drops
/// the parent link. Returns the number of objects copied up.
pub async fn flatten(client: &Client, child: &ImageSpec) -> Result<u64, BlockError> {
    let id = lookup_id(client, child).await?;
    let (header, _) = load_header(client, child, &id).await?;
    let Some(parent) = header.parent.clone() else {
        return Err(BlockError::Invalid(format!("image {child} has no parent")));
    };
    if !header.snaps.is_empty() {
        // Its snapshots read through to the parent where they have no object (the
        // header keeps one parent, not one per snapshot, as RBD does): dropping the
        // link would turn that data into zeros.
        return Err(BlockError::Invalid(format!(
            "clone {child} has {} snapshots, which still read through to its parent; \
             remove them before flattening",
            header.snaps.len()
        )));
    }
    let snapc = header.snap_context();
    let order = header.order;
    let ancestry = Ancestry::load(client, Some(&parent)).await?;
    let numbers: Vec<u64> = (0..object_count(parent.overlap_bytes, order)).collect();
    let copied = map_ordered(numbers, OBJECT_OPS_IN_FLIGHT_MAX, |number| {
        let (client, pool, ancestry) = (client.clone(), child.pool.clone(), ancestry.clone());
        let oid = data_object(&id, number);
        let snaps = OpSnaps {
            snapc: snapc.clone(),
            snapid: SnapId::HEAD,
        };
        async move {
            let data = ancestry.copyup_data(&client, number, order).await?;
            if data.is_empty() {
                return Ok(0u64);
            }
            // Only where the child has no object: its own data wins.
            let mut ops = vec![OpCode::Create { exclusive: true }];
            ops.extend(whole_object_writes(data));
            match client.operate_snaps(&pool, &oid, ops, snaps).await {
                Ok(_) => Ok(1),
                Err(ClientError::Op(OpError::Exists)) => Ok(0),
                Err(error) => Err(BlockError::from(error)),
            }
        }
    })
    .await?;
    update_header(client, child, |header| {
        header.parent = None;
        Ok(())
    })
    .await?;
    unregister(client, &parent, &child.pool, &id).await?;
    Ok(copied.iter().sum())
}
