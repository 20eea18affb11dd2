//! Raw export and import: an image to or from a stream of its bytes (a file, or
//! stdin/stdout for `-`), object by object with several objects in flight.

use crate::admin;
use crate::concurrent::{map_ordered, OBJECT_OPS_IN_FLIGHT_MAX};
use crate::header::data_object;
use crate::image::{read_image_extent, whole_object_writes, Image};
use crate::layout::{extents, object_size_bytes};
use crate::spec::ImageSpec;
use crate::BlockError;
use bytes::{Bytes, BytesMut};
use carmine_client::Client;
use std::collections::VecDeque;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

/// Objects read ahead of the writer during an export (memory: this × object size).
const EXPORT_OBJECTS_AHEAD_MAX: usize = 8;

/// Writes every byte of the image to `writer` (absent objects as zeros). Returns the
/// byte count.
pub async fn export<W: AsyncWrite + Unpin>(
    image: &Image,
    writer: &mut W,
) -> Result<u64, BlockError> {
    let size_bytes = image.size();
    let client = image.client().clone();
    let mut pending: VecDeque<JoinHandle<Result<Bytes, BlockError>>> = VecDeque::new();
    let source = image.read_source();
    let mut pieces = extents(0, size_bytes, image.order());
    let mut written = 0u64;
    loop {
        while pending.len() < EXPORT_OBJECTS_AHEAD_MAX {
            let Some(extent) = pieces.next() else { break };
            let (client, source) = (client.clone(), source.clone());
            pending.push_back(tokio::spawn(async move {
                read_image_extent(&client, &source, extent).await
            }));
        }
        let Some(head) = pending.pop_front() else {
            break;
        };
        let data = head
            .await
            .map_err(|error| std::io::Error::other(error.to_string()))??;
        writer.write_all(&data).await?;
        written += data.len() as u64;
    }
    writer.flush().await?;
    assert_eq!(written, size_bytes);
    Ok(written)
}

/// Exports to `path`, or to stdout for `-`; a file is created (or truncated) and
/// synced before this returns.
pub async fn export_to_path(image: &Image, path: &str) -> Result<u64, BlockError> {
    if path == "-" {
        return export(image, &mut tokio::io::stdout()).await;
    }
    let mut file = tokio::fs::File::create(path).await?;
    let written = export(image, &mut file).await?;
    file.sync_all().await?;
    Ok(written)
}

/// Imports from `path`, or from stdin for `-`.
pub async fn import_from_path(
    client: &Client,
    path: &str,
    spec: &ImageSpec,
    order: u8,
) -> Result<u64, BlockError> {
    if path == "-" {
        return import(client, &mut tokio::io::stdin(), spec, order, None).await;
    }
    let mut file = tokio::fs::File::open(path).await?;
    let length = file.metadata().await?.len();
    import(client, &mut file, spec, order, Some(length)).await
}

/// Fills `buffer` from `reader` up to its capacity or the end of the stream.
async fn fill<R: AsyncRead + Unpin>(
    reader: &mut R,
    buffer: &mut BytesMut,
) -> Result<(), BlockError> {
    while buffer.len() < buffer.capacity() {
        if reader.read_buf(buffer).await? == 0 {
            break;
        }
    }
    Ok(())
}

/// Creates image `spec` from the raw bytes of `reader`. `size_hint` (a file's length)
/// sizes the image up front; without it (stdin) the image grows as data arrives.
/// All-zero objects are not written, so the image stays thin. Returns the image size.
pub async fn import<R: AsyncRead + Unpin>(
    client: &Client,
    reader: &mut R,
    spec: &ImageSpec,
    order: u8,
    size_hint: Option<u64>,
) -> Result<u64, BlockError> {
    let header = admin::create(client, spec, size_hint.unwrap_or(0), order).await?;
    let object_bytes = object_size_bytes(order) as usize;
    let mut size_bytes = header.size_bytes;
    let mut total = 0u64;
    let mut object_number = 0u64;
    loop {
        let mut chunks = Vec::new();
        for _ in 0..OBJECT_OPS_IN_FLIGHT_MAX {
            let mut buffer = BytesMut::with_capacity(object_bytes);
            fill(reader, &mut buffer).await?;
            if buffer.is_empty() {
                break;
            }
            total += buffer.len() as u64;
            chunks.push((object_number, buffer.freeze()));
            object_number += 1;
        }
        if chunks.is_empty() {
            break;
        }
        if total > size_bytes {
            admin::resize(client, spec, total, false).await?;
            size_bytes = total;
        }
        write_objects(client, &spec.pool, &header.id, chunks).await?;
    }
    if total < size_bytes {
        admin::resize(client, spec, total, true).await?;
    }
    Ok(total)
}

async fn write_objects(
    client: &Client,
    pool: &str,
    id: &str,
    chunks: Vec<(u64, Bytes)>,
) -> Result<(), BlockError> {
    let chunks = chunks
        .into_iter()
        .filter(|(_, data)| data.iter().any(|&byte| byte != 0));
    map_ordered(chunks, OBJECT_OPS_IN_FLIGHT_MAX, |(number, data)| {
        let (client, pool, oid) = (client.clone(), pool.to_string(), data_object(id, number));
        async move {
            client
                .operate(&pool, &oid, whole_object_writes(data))
                .await?;
            Ok(())
        }
    })
    .await?;
    Ok(())
}
