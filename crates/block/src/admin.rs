//! Image management: create, list, remove, rename, resize, copy, disk usage.
//!
//! The directory and header objects are updated with optimistic concurrency: read the
//! object with its version, then write guarded by `AssertVersion` (or an exclusive
//! `Create` when the object is new), and retry when another client got there first.

use crate::concurrent::{map_ordered, OBJECT_OPS_IN_FLIGHT_MAX};
use crate::header::{
    data_object, data_prefix, directory_id_key, directory_name_key, header_object, new_image_id,
    parse_data_object, writers_object, ImageHeader, DIRECTORY_OBJECT,
};
use crate::image::whole_object_writes;
use crate::layout::{object_count, object_size_bytes, ORDER_MAX, ORDER_MIN};
use crate::spec::{validate_image_name, ImageSpec};
use crate::BlockError;
use bytes::Bytes;
use carmine_client::{Client, ClientError, OpSnaps};
use carmine_proto::{OpCode, OpError, OpOutput};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::SnapId;
use std::collections::BTreeMap;

/// Attempts at an optimistic update before giving up with `Conflict`.
const UPDATE_ATTEMPTS_MAX: usize = 32;
/// Images up to this many objects are scanned object by object; larger ones by listing
/// the pool (cheaper than probing millions of absent objects).
const PROBE_OBJECTS_MAX: u64 = 4096;
/// Largest image size: the object count must fit the 16 hex digits of a name, and
/// offsets must not overflow.
pub const IMAGE_SIZE_BYTES_MAX: u64 = 1 << 60;

/// What `du` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    pub provisioned_bytes: u64,
    pub used_bytes: u64,
    pub object_count: u64,
}

fn is_conflict(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Op(OpError::VersionMismatch { .. }) | ClientError::Op(OpError::Exists)
    )
}

/// The id of image `spec`, from the pool's directory.
pub async fn lookup_id(client: &Client, spec: &ImageSpec) -> Result<String, BlockError> {
    let (_, entries) =
        read_directory(client, &spec.pool, vec![directory_name_key(&spec.image)]).await?;
    let id = entries
        .get(&directory_name_key(&spec.image))
        .ok_or_else(|| BlockError::NotFound(spec.to_string()))?;
    String::from_utf8(id.to_vec())
        .map_err(|_| BlockError::Invalid(format!("the directory entry of {spec} is not UTF-8")))
}

/// The header of image `id` and the header object's version.
pub async fn load_header(
    client: &Client,
    spec: &ImageSpec,
    id: &str,
) -> Result<(ImageHeader, u64), BlockError> {
    let ops = vec![
        OpCode::Read {
            offset: 0,
            length: 0,
        },
        OpCode::Stat,
    ];
    let reply = match client.operate(&spec.pool, &header_object(id), ops).await {
        Err(error) if error.is_not_found() => return Err(BlockError::NotFound(spec.to_string())),
        other => other?,
    };
    let (Some(OpOutput::Data(data)), Some(OpOutput::Stat { version, .. })) =
        (reply.outputs.first(), reply.outputs.get(1))
    else {
        return Err(ClientError::Other("header read returned an unexpected reply".into()).into());
    };
    let header =
        ImageHeader::from_shared(data.clone()).map_err(|source| BlockError::CorruptHeader {
            spec: spec.to_string(),
            source,
        })?;
    Ok((header, *version))
}

/// Applies `change` to the header of image `spec` atomically (retrying on races).
pub async fn update_header(
    client: &Client,
    spec: &ImageSpec,
    change: impl FnMut(&mut ImageHeader) -> Result<(), BlockError>,
) -> Result<ImageHeader, BlockError> {
    Ok(update_header_versioned(client, spec, change).await?.0)
}

/// [`update_header`], also returning the header object's version after the update
/// (what writers acknowledge: `lease.rs`).
pub async fn update_header_versioned(
    client: &Client,
    spec: &ImageSpec,
    mut change: impl FnMut(&mut ImageHeader) -> Result<(), BlockError>,
) -> Result<(ImageHeader, u64), BlockError> {
    let id = lookup_id(client, spec).await?;
    for _ in 0..UPDATE_ATTEMPTS_MAX {
        let (mut header, version) = load_header(client, spec, &id).await?;
        change(&mut header)?;
        let ops = vec![
            OpCode::AssertVersion { version },
            OpCode::WriteFull {
                data: header.to_bytes(),
            },
        ];
        match client.operate(&spec.pool, &header_object(&id), ops).await {
            Ok(reply) => return Ok((header, reply.user_version)),
            Err(error) if is_conflict(&error) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(BlockError::Conflict(spec.to_string()))
}

/// The directory's version (`None` when it does not exist yet) and the entries among `keys`.
async fn read_directory(
    client: &Client,
    pool: &str,
    keys: Vec<Bytes>,
) -> Result<(Option<u64>, BTreeMap<Bytes, Bytes>), BlockError> {
    let ops = vec![OpCode::Stat, OpCode::OmapGetValsByKeys { keys }];
    let reply = match client.operate(pool, DIRECTORY_OBJECT, ops).await {
        Err(error) if error.is_not_found() => return Ok((None, BTreeMap::new())),
        other => other?,
    };
    match (reply.outputs.first(), reply.outputs.get(1)) {
        (Some(OpOutput::Stat { version, .. }), Some(OpOutput::Omap { entries, .. })) => {
            Ok((Some(*version), entries.iter().cloned().collect()))
        }
        _ => Err(ClientError::Other("directory read returned an unexpected reply".into()).into()),
    }
}

/// Reads the directory entries `keys`, lets `decide` turn them into omap updates, and
/// applies those guarded by the version it read, retrying on races.
async fn update_directory(
    client: &Client,
    pool: &str,
    keys: Vec<Bytes>,
    mut decide: impl FnMut(&BTreeMap<Bytes, Bytes>) -> Result<Vec<OpCode>, BlockError>,
) -> Result<(), BlockError> {
    for _ in 0..UPDATE_ATTEMPTS_MAX {
        let (version, entries) = read_directory(client, pool, keys.clone()).await?;
        let mut ops = vec![match version {
            Some(version) => OpCode::AssertVersion { version },
            None => OpCode::Create { exclusive: true },
        }];
        ops.extend(decide(&entries)?);
        match client.operate(pool, DIRECTORY_OBJECT, ops).await {
            Ok(_) => return Ok(()),
            Err(error) if is_conflict(&error) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(BlockError::Conflict(format!("{pool}/{DIRECTORY_OBJECT}")))
}

fn validate_geometry(size_bytes: u64, order: u8) -> Result<(), BlockError> {
    if !(ORDER_MIN..=ORDER_MAX).contains(&order) {
        return Err(BlockError::Invalid(format!(
            "order must be {ORDER_MIN}..={ORDER_MAX} (object size 4 KiB..32 MiB), not {order}"
        )));
    }
    if size_bytes > IMAGE_SIZE_BYTES_MAX {
        return Err(BlockError::Invalid(format!(
            "size {size_bytes} exceeds the limit of {IMAGE_SIZE_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// Creates an empty (thin) image of `size_bytes` with objects of 2^`order` bytes.
pub async fn create(
    client: &Client,
    spec: &ImageSpec,
    size_bytes: u64,
    order: u8,
) -> Result<ImageHeader, BlockError> {
    validate_geometry(size_bytes, order)?;
    validate_image_name(&spec.image).map_err(BlockError::Invalid)?;
    client.pool_id(&spec.pool)?;
    let header = ImageHeader {
        id: new_image_id(),
        name: spec.image.clone(),
        size_bytes,
        order,
        features: 0,
        snap_seq: 0,
        snaps: Vec::new(),
        parent: None,
    };
    let (name_key, id_key) = (
        directory_name_key(&spec.image),
        directory_id_key(&header.id),
    );
    update_directory(client, &spec.pool, vec![name_key.clone()], |entries| {
        if entries.contains_key(&name_key) {
            return Err(BlockError::Exists(spec.to_string()));
        }
        let entries = vec![
            (name_key.clone(), Bytes::from(header.id.clone())),
            (id_key.clone(), Bytes::from(spec.image.clone())),
        ];
        Ok(vec![OpCode::OmapSet { entries }])
    })
    .await?;
    let ops = vec![
        OpCode::Create { exclusive: true },
        OpCode::WriteFull {
            data: header.to_bytes(),
        },
    ];
    if let Err(error) = client
        .operate(&spec.pool, &header_object(&header.id), ops)
        .await
    {
        let undo = vec![OpCode::OmapRm {
            keys: vec![name_key, id_key],
        }];
        let _ = client.operate(&spec.pool, DIRECTORY_OBJECT, undo).await;
        return Err(error.into());
    }
    Ok(header)
}

/// Every image of `pool` as (name, id), sorted by name.
pub async fn list(client: &Client, pool: &str) -> Result<Vec<(String, String)>, BlockError> {
    client.pool_id(pool)?;
    let entries = match client.omap_list(pool, DIRECTORY_OBJECT).await {
        Err(error) if error.is_not_found() => Vec::new(),
        other => other?,
    };
    Ok(entries
        .into_iter()
        .filter_map(|(key, value)| {
            let name = std::str::from_utf8(&key)
                .ok()?
                .strip_prefix("name_")?
                .to_string();
            Some((name, String::from_utf8(value.to_vec()).ok()?))
        })
        .collect())
}

/// The data objects of the image that exist, as (object number, size in bytes).
pub async fn existing_objects(
    client: &Client,
    pool: &str,
    header: &ImageHeader,
) -> Result<Vec<(u64, u64)>, BlockError> {
    existing_objects_at(client, pool, header, SnapId::HEAD).await
}

/// [`existing_objects`] as of snapshot `snap` (objects past `header.size_bytes` are
/// not looked at).
pub async fn existing_objects_at(
    client: &Client,
    pool: &str,
    header: &ImageHeader,
    snap: SnapId,
) -> Result<Vec<(u64, u64)>, BlockError> {
    let count = object_count(header.size_bytes, header.order);
    let candidates: Vec<u64> = if count <= PROBE_OBJECTS_MAX {
        (0..count).collect()
    } else {
        let prefix = data_prefix(&header.id);
        // At a snapshot the listing also names objects removed since (whiteout heads
        // kept for their clones); the stats below drop those absent at `snap`.
        let mut numbers: Vec<u64> = client
            .list_at(pool, snap)
            .await?
            .iter()
            .filter(|name| name.starts_with(&prefix))
            .filter_map(|name| parse_data_object(&header.id, name))
            .collect();
        numbers.sort_unstable();
        numbers
    };
    let sizes = map_ordered(candidates, OBJECT_OPS_IN_FLIGHT_MAX, |number| {
        let (client, pool, oid) = (
            client.clone(),
            pool.to_string(),
            data_object(&header.id, number),
        );
        async move {
            let snaps = OpSnaps {
                snapc: Default::default(),
                snapid: snap,
            };
            match client
                .operate_snaps(&pool, &oid, vec![OpCode::Stat], snaps)
                .await
            {
                Ok(reply) => match reply.outputs.first() {
                    Some(OpOutput::Stat { size_bytes, .. }) => Ok(Some((number, *size_bytes))),
                    _ => Err(ClientError::Other("stat returned no size".into()).into()),
                },
                Err(error) if error.is_not_found() => Ok(None),
                Err(error) => Err(error.into()),
            }
        }
    })
    .await?;
    Ok(sizes.into_iter().flatten().collect())
}

/// Provisioned size against the bytes its objects hold.
pub async fn du(client: &Client, spec: &ImageSpec) -> Result<DiskUsage, BlockError> {
    let id = lookup_id(client, spec).await?;
    let (header, _) = load_header(client, spec, &id).await?;
    let objects = existing_objects(client, &spec.pool, &header).await?;
    Ok(DiskUsage {
        provisioned_bytes: header.size_bytes,
        used_bytes: objects.iter().map(|(_, size)| size).sum(),
        object_count: objects.len() as u64,
    })
}

/// Removes the data objects numbered `numbers` (absent ones are fine).
/// Under `snapc`, so that the image's snapshots keep what is removed.
async fn remove_objects(
    client: &Client,
    pool: &str,
    id: &str,
    numbers: Vec<u64>,
    snapc: &carmine_proto::SnapContext,
) -> Result<(), BlockError> {
    map_ordered(numbers, OBJECT_OPS_IN_FLIGHT_MAX, |number| {
        let (client, pool, oid) = (client.clone(), pool.to_string(), data_object(id, number));
        let snaps = OpSnaps {
            snapc: snapc.clone(),
            snapid: SnapId::HEAD,
        };
        async move {
            match client
                .operate_snaps(&pool, &oid, vec![OpCode::Remove], snaps)
                .await
            {
                Err(error) if !error.is_not_found() => Err(error.into()),
                _ => Ok(()),
            }
        }
    })
    .await?;
    Ok(())
}

/// Removes the image: its data objects, its header, then its directory entries (so an
/// interrupted removal can be repeated).
pub async fn remove(client: &Client, spec: &ImageSpec) -> Result<(), BlockError> {
    let id = lookup_id(client, spec).await?;
    crate::lease::check_no_live_writers(client, &spec.pool, &id, &spec.to_string()).await?;
    match load_header(client, spec, &id).await {
        Ok((header, _)) => {
            if !header.snaps.is_empty() {
                return Err(BlockError::Invalid(format!(
                    "image {spec} has {} snapshots; remove them first (image snap rm)",
                    header.snaps.len()
                )));
            }
            let numbers = existing_objects(client, &spec.pool, &header).await?;
            remove_objects(
                client,
                &spec.pool,
                &id,
                numbers.into_iter().map(|(n, _)| n).collect(),
                &header.snap_context(),
            )
            .await?;
            if let Some(parent) = &header.parent {
                crate::clone::unregister(client, parent, &spec.pool, &id).await?;
            }
            for object in [writers_object(&id), header_object(&id)] {
                match client.remove(&spec.pool, &object).await {
                    Err(error) if !error.is_not_found() => return Err(error.into()),
                    _ => {}
                }
            }
        }
        Err(BlockError::NotFound(_)) => {}
        Err(error) => return Err(error),
    }
    let (name_key, id_key) = (directory_name_key(&spec.image), directory_id_key(&id));
    update_directory(client, &spec.pool, vec![name_key.clone()], |entries| {
        if entries.get(&name_key).map(|v| &v[..]) != Some(id.as_bytes()) {
            return Err(BlockError::NotFound(spec.to_string()));
        }
        Ok(vec![OpCode::OmapRm {
            keys: vec![name_key.clone(), id_key.clone()],
        }])
    })
    .await
}

/// Renames an image within its pool.
pub async fn rename(
    client: &Client,
    source: &ImageSpec,
    destination: &ImageSpec,
) -> Result<(), BlockError> {
    if source.pool != destination.pool {
        return Err(BlockError::Invalid(format!(
            "{source} and {destination} are in different pools; use cp and rm to move an image"
        )));
    }
    let id = lookup_id(client, source).await?;
    let (old_key, new_key) = (
        directory_name_key(&source.image),
        directory_name_key(&destination.image),
    );
    update_directory(
        client,
        &source.pool,
        vec![old_key.clone(), new_key.clone()],
        |entries| {
            if entries.contains_key(&new_key) {
                return Err(BlockError::Exists(destination.to_string()));
            }
            if entries.get(&old_key).map(|v| &v[..]) != Some(id.as_bytes()) {
                return Err(BlockError::NotFound(source.to_string()));
            }
            let set = vec![
                (new_key.clone(), Bytes::from(id.clone())),
                (
                    directory_id_key(&id),
                    Bytes::from(destination.image.clone()),
                ),
            ];
            Ok(vec![
                OpCode::OmapRm {
                    keys: vec![old_key.clone()],
                },
                OpCode::OmapSet { entries: set },
            ])
        },
    )
    .await?;
    update_header(client, destination, |header| {
        header.name = destination.image.clone();
        Ok(())
    })
    .await?;
    Ok(())
}

/// Sets the size. Shrinking needs `allow_shrink`; it removes the objects past the new
/// end and truncates the one it cuts *before* the header changes, so that growing
/// again later can never expose stale data.
pub async fn resize(
    client: &Client,
    spec: &ImageSpec,
    size_bytes: u64,
    allow_shrink: bool,
) -> Result<(), BlockError> {
    let id = lookup_id(client, spec).await?;
    let (header, _) = load_header(client, spec, &id).await?;
    validate_geometry(size_bytes, header.order)?;
    if size_bytes < header.size_bytes {
        if !allow_shrink {
            return Err(BlockError::ShrinkNotAllowed {
                spec: spec.to_string(),
                from_bytes: header.size_bytes,
                to_bytes: size_bytes,
            });
        }
        let cuts_overlap = header
            .parent
            .as_ref()
            .is_some_and(|parent| size_bytes < parent.overlap_bytes);
        if cuts_overlap && !header.snaps.is_empty() {
            // The clone's snapshots read through to the parent up to the overlap,
            // which one header field records for the head and its snapshots alike.
            return Err(BlockError::Invalid(format!(
                "shrinking clone {spec} below its parent overlap while it has snapshots \
                 would change them; remove its snapshots first"
            )));
        }
    } else if size_bytes > header.size_bytes {
        // What will be the new range must read as zeros: remove anything a shrink
        // left past the old end (one whose trimming failed), before the header grows.
        let mut grown = header.clone();
        grown.size_bytes = size_bytes;
        trim_tail(client, &spec.pool, &grown, header.size_bytes).await?;
    }
    let (_, version) = update_header_versioned(client, spec, |header| {
        header.size_bytes = size_bytes;
        // Shrinking a clone cuts what reads through to its parent for good: growing
        // again later shows zeros there, as RBD does.
        if let Some(parent) = header.parent.as_mut() {
            parent.overlap_bytes = parent.overlap_bytes.min(size_bytes);
        }
        Ok(())
    })
    .await?;
    if size_bytes < header.size_bytes {
        // The header shrinks first and the tail goes only once every writer refuses
        // writes past the new end and has none in flight there (`lease.rs`); the
        // other order lets a running NBD server write into a tail already trimmed,
        // where a later grow would show the data again.
        crate::lease::wait_for_writers(client, &spec.pool, &id, version).await?;
        trim_tail(client, &spec.pool, &header, size_bytes).await?;
    }
    Ok(())
}

async fn trim_tail(
    client: &Client,
    pool: &str,
    header: &ImageHeader,
    size_bytes: u64,
) -> Result<(), BlockError> {
    let object_bytes = object_size_bytes(header.order);
    let first_whole = object_count(size_bytes, header.order);
    let doomed: Vec<u64> = existing_objects(client, pool, header)
        .await?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|&n| n >= first_whole)
        .collect();
    let snapc = header.snap_context();
    remove_objects(client, pool, &header.id, doomed, &snapc).await?;
    let cut = size_bytes % object_bytes;
    if cut != 0 {
        let oid = data_object(&header.id, size_bytes / object_bytes);
        let ops = vec![OpCode::AssertExists, OpCode::Truncate { size_bytes: cut }];
        let snaps = OpSnaps {
            snapc,
            snapid: SnapId::HEAD,
        };
        match client.operate_snaps(pool, &oid, ops, snaps).await {
            Err(error) if !error.is_not_found() => return Err(error.into()),
            _ => {}
        }
    }
    Ok(())
}

/// Copies `source` to a new image `destination` of the same size and order, skipping
/// absent and all-zero objects. Returns the bytes written.
pub async fn copy(
    client: &Client,
    source: &ImageSpec,
    destination: &ImageSpec,
) -> Result<u64, BlockError> {
    let id = lookup_id(client, source).await?;
    let (header, _) = load_header(client, source, &id).await?;
    let target = create(client, destination, header.size_bytes, header.order).await?;
    let objects = existing_objects(client, &source.pool, &header).await?;
    let written = map_ordered(objects, OBJECT_OPS_IN_FLIGHT_MAX, |(number, _)| {
        let client = client.clone();
        let (from_pool, from) = (source.pool.clone(), data_object(&id, number));
        let (to_pool, to) = (destination.pool.clone(), data_object(&target.id, number));
        async move {
            let data = match client.read(&from_pool, &from, 0, 0).await {
                Err(error) if error.is_not_found() => return Ok(0),
                other => other?,
            };
            if data.iter().all(|&byte| byte == 0) {
                return Ok(0);
            }
            let length = data.len() as u64;
            client
                .operate(&to_pool, &to, whole_object_writes(data))
                .await?;
            Ok(length)
        }
    })
    .await?;
    Ok(written.iter().sum())
}
