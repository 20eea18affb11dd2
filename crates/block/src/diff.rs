//! `export-diff` / `import-diff`: the changes between two snapshots of an image (or a
//! snapshot and the head) as a stream in RBD's diff format v1, so a diff taken here
//! reads like one from `rbd export-diff`.
//!
//! Format (all integers little-endian):
//!
//! ```text
//! "rbd diff v1\n"
//! ['f' u32 len, from-snap name]     the snapshot the diff starts from (absent: from empty)
//! ['t' u32 len, to-snap name]       the snapshot it ends at (absent: the head)
//! 's' u64 size                      the image size at the end
//! ('w' u64 offset, u64 length, data | 'z' u64 offset, u64 length)*
//! 'e'
//! ```
//!
//! The export compares object by object: one `ListSnaps` per object tells whether the
//! same copy serves both ends (unchanged: nothing is read); otherwise the object is
//! read at both ends and each differing 4 KiB block becomes a `w` record (coalesced),
//! or the whole object a `z` record when it is gone at the end. A clone's diff covers
//! its own objects, not what it reads through from its parent.

use crate::admin::{load_header, lookup_id};
use crate::concurrent::{map_ordered, OBJECT_OPS_IN_FLIGHT_MAX};
use crate::header::data_object;
use crate::image::Image;
use crate::layout::object_count;
use crate::spec::ImageSpec;
use crate::BlockError;
use bytes::Bytes;
use carmine_client::{Client, OpSnaps};
use carmine_proto::{OpCode, OpOutput, SnapContext, SnapTarget};
use carmine_types::SnapId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The stream's first bytes.
pub const DIFF_BANNER: &[u8] = b"rbd diff v1\n";
/// Granularity of the comparison inside an object.
const DIFF_BLOCK_BYTES: usize = 4096;
/// Longest `w` record an import accepts (larger ones are refused, not allocated).
const RECORD_BYTES_MAX: u64 = 64 << 20;

/// One change record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffRecord {
    Write { offset: u64, data: Bytes },
    Zero { offset: u64, length: u64 },
}

/// What a diff stream says besides its records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiffHeader {
    pub from_snap: Option<String>,
    pub to_snap: Option<String>,
    pub size_bytes: u64,
}

/// Writes the banner and header records.
pub fn encode_header(header: &DiffHeader, out: &mut Vec<u8>) {
    out.extend_from_slice(DIFF_BANNER);
    for (tag, name) in [(b'f', &header.from_snap), (b't', &header.to_snap)] {
        if let Some(name) = name {
            out.push(tag);
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
        }
    }
    out.push(b's');
    out.extend_from_slice(&header.size_bytes.to_le_bytes());
}

pub fn encode_record(record: &DiffRecord, out: &mut Vec<u8>) {
    match record {
        DiffRecord::Write { offset, data } => {
            out.push(b'w');
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(data.len() as u64).to_le_bytes());
            out.extend_from_slice(data);
        }
        DiffRecord::Zero { offset, length } => {
            out.push(b'z');
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&length.to_le_bytes());
        }
    }
}

/// The records that turn `before` into `after` (the same object, `base` its image
/// offset); `None` stands for an absent object.
pub fn object_records(base: u64, before: Option<&[u8]>, after: Option<&[u8]>) -> Vec<DiffRecord> {
    let (before, after) = match (before, after) {
        (_, None) if before.is_some_and(|b| !b.is_empty()) => {
            let length = before.map_or(0, <[u8]>::len) as u64;
            return vec![DiffRecord::Zero {
                offset: base,
                length,
            }];
        }
        (_, None) => return Vec::new(),
        (before, Some(after)) => (before.unwrap_or(&[]), after),
    };
    let mut records = Vec::new();
    let mut run: Option<(usize, usize)> = None;
    let blocks = after.len().max(before.len()).div_ceil(DIFF_BLOCK_BYTES);
    for block in 0..blocks {
        let start = block * DIFF_BLOCK_BYTES;
        let end = start + DIFF_BLOCK_BYTES;
        let piece = |data: &[u8]| -> Vec<u8> {
            let mut piece = data[start.min(data.len())..end.min(data.len())].to_vec();
            piece.resize(DIFF_BLOCK_BYTES, 0);
            piece
        };
        if piece(before) != piece(after) {
            run = Some(run.map_or((start, end), |(s, _)| (s, end)));
        } else if let Some(changed) = run.take() {
            push_run(&mut records, base, after, changed);
        }
    }
    if let Some(changed) = run {
        push_run(&mut records, base, after, changed);
    }
    records
}

fn push_run(records: &mut Vec<DiffRecord>, base: u64, after: &[u8], (start, end): (usize, usize)) {
    let mut data = after[start.min(after.len())..end.min(after.len())].to_vec();
    data.resize(end - start, 0);
    let offset = base + start as u64;
    if data.iter().all(|&byte| byte == 0) {
        records.push(DiffRecord::Zero {
            offset,
            length: data.len() as u64,
        });
    } else {
        records.push(DiffRecord::Write {
            offset,
            data: Bytes::from(data),
        });
    }
}

/// Writes the diff of `spec` from `from_snap` (or from nothing) to `to_snap` (or the
/// head) to `writer`. Returns the number of change records.
pub async fn export_diff<W: AsyncWrite + Unpin>(
    client: &Client,
    spec: &ImageSpec,
    from_snap: Option<&str>,
    to_snap: Option<&str>,
    writer: &mut W,
) -> Result<u64, BlockError> {
    let id = lookup_id(client, spec).await?;
    let (header, _) = load_header(client, spec, &id).await?;
    let snap_id = |name: Option<&str>| -> Result<(SnapId, u64), BlockError> {
        match name {
            None => Ok((SnapId::HEAD, header.size_bytes)),
            Some(name) => header
                .snap(name)
                .map(|snap| (SnapId(snap.id), snap.size_bytes))
                .ok_or_else(|| BlockError::NoSuchSnap(format!("{spec}@{name}"))),
        }
    };
    let (from, from_size) = match from_snap {
        Some(_) => {
            let (id, size) = snap_id(from_snap)?;
            (Some(id), size)
        }
        None => (None, 0),
    };
    let (to, to_size) = snap_id(to_snap)?;
    if let (Some(from), true) = (from, to != SnapId::HEAD) {
        if from.0 >= to.0 {
            return Err(BlockError::Invalid(
                "the from-snapshot must be older than the end of the diff".into(),
            ));
        }
    }
    let mut out = Vec::new();
    let diff_header = DiffHeader {
        from_snap: from_snap.map(str::to_string),
        to_snap: to_snap.map(str::to_string),
        size_bytes: to_size,
    };
    encode_header(&diff_header, &mut out);
    writer.write_all(&out).await?;
    let count = object_count(from_size.max(to_size), header.order);
    let numbers: Vec<u64> = (0..count).collect();
    let order = header.order;
    let per_object = map_ordered(numbers, OBJECT_OPS_IN_FLIGHT_MAX, |number| {
        let (client, pool, oid) = (client.clone(), spec.pool.clone(), data_object(&id, number));
        async move {
            let base = number << order;
            object_diff(&client, &pool, &oid, base, from, to).await
        }
    })
    .await?;
    let mut records = 0u64;
    for object in per_object {
        let mut out = Vec::new();
        for record in &object {
            encode_record(record, &mut out);
        }
        records += object.len() as u64;
        writer.write_all(&out).await?;
    }
    writer.write_all(b"e").await?;
    writer.flush().await?;
    Ok(records)
}

async fn object_diff(
    client: &Client,
    pool: &str,
    oid: &str,
    base: u64,
    from: Option<SnapId>,
    to: SnapId,
) -> Result<Vec<DiffRecord>, BlockError> {
    let (snapset, head_exists) = client.list_snaps(pool, oid).await?;
    let target = |snap: SnapId| -> SnapTarget {
        match snapset.resolve(snap) {
            SnapTarget::Head if !head_exists => SnapTarget::Absent,
            other => other,
        }
    };
    let to_target = target(to);
    if let Some(from) = from {
        if target(from) == to_target {
            return Ok(Vec::new());
        }
    }
    let before = match from {
        Some(from) => read_whole(client, pool, oid, from).await?,
        None => None,
    };
    let after = read_whole(client, pool, oid, to).await?;
    Ok(object_records(base, before.as_deref(), after.as_deref()))
}

/// The whole object at `snap`; `None` when absent.
async fn read_whole(
    client: &Client,
    pool: &str,
    oid: &str,
    snap: SnapId,
) -> Result<Option<Bytes>, BlockError> {
    let ops = vec![OpCode::Read {
        offset: 0,
        length: 0,
    }];
    let snaps = OpSnaps {
        snapc: SnapContext::default(),
        snapid: snap,
    };
    match client.operate_snaps(pool, oid, ops, snaps).await {
        Ok(reply) => match reply.outputs.first() {
            Some(OpOutput::Data(data)) => Ok(Some(data.clone())),
            _ => Err(BlockError::Invalid(format!(
                "read of {oid} returned no data"
            ))),
        },
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error.into()),
    }
}

async fn read_u64<R: AsyncRead + Unpin>(reader: &mut R) -> Result<u64, BlockError> {
    Ok(reader.read_u64_le().await?)
}

async fn read_name<R: AsyncRead + Unpin>(reader: &mut R) -> Result<String, BlockError> {
    let length = reader.read_u32_le().await?;
    if length as usize > crate::spec::IMAGE_NAME_BYTES_MAX {
        return Err(BlockError::Invalid(format!(
            "diff names a snapshot of {length} bytes"
        )));
    }
    let mut name = vec![0u8; length as usize];
    reader.read_exact(&mut name).await?;
    String::from_utf8(name).map_err(|_| BlockError::Invalid("snapshot name is not UTF-8".into()))
}

fn bad_diff(why: impl Into<String>) -> BlockError {
    BlockError::Invalid(format!("not a valid rbd diff v1 stream: {}", why.into()))
}

/// Applies a diff stream to `spec`: the image must have the diff's from-snapshot
/// (when it names one) and not yet its to-snapshot, which is created at the end.
/// Returns the number of records applied.
pub async fn import_diff<R: AsyncRead + Unpin>(
    client: &Client,
    spec: &ImageSpec,
    reader: &mut R,
) -> Result<u64, BlockError> {
    let mut banner = vec![0u8; DIFF_BANNER.len()];
    reader.read_exact(&mut banner).await?;
    if banner != DIFF_BANNER {
        return Err(bad_diff("the banner is missing"));
    }
    let mut image = Image::open(client, spec).await?;
    let mut to_snap = None;
    let mut records = 0u64;
    loop {
        let tag = reader.read_u8().await?;
        match tag {
            b'f' => {
                let name = read_name(reader).await?;
                let id = lookup_id(client, spec).await?;
                if load_header(client, spec, &id)
                    .await?
                    .0
                    .snap(&name)
                    .is_none()
                {
                    return Err(BlockError::NoSuchSnap(format!(
                        "{spec}@{name} (the diff starts from it)"
                    )));
                }
            }
            b't' => to_snap = Some(read_name(reader).await?),
            b's' => {
                let size = read_u64(reader).await?;
                if size != image.size() {
                    image.resize(size, true).await?;
                    image = Image::open(client, spec).await?;
                }
            }
            b'w' => {
                let offset = read_u64(reader).await?;
                let length = read_u64(reader).await?;
                if length > RECORD_BYTES_MAX {
                    return Err(bad_diff(format!("a write record of {length} bytes")));
                }
                let mut data = vec![0u8; length as usize];
                reader.read_exact(&mut data).await?;
                image.write(offset, Bytes::from(data)).await?;
                records += 1;
            }
            b'z' => {
                let offset = read_u64(reader).await?;
                let length = read_u64(reader).await?;
                image.discard(offset, length).await?;
                records += 1;
            }
            b'e' => break,
            other => return Err(bad_diff(format!("unknown record tag {other:#04x}"))),
        }
    }
    image.flush().await?;
    if let Some(name) = to_snap {
        crate::snapshot::create(client, spec, &name).await?;
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_objects_give_no_records_and_changes_coalesce_per_block() {
        let before = vec![1u8; 5 * DIFF_BLOCK_BYTES];
        assert!(object_records(0, Some(&before), Some(&before)).is_empty());
        let mut after = before.clone();
        after[DIFF_BLOCK_BYTES + 1] = 9;
        after[2 * DIFF_BLOCK_BYTES + 7] = 9;
        after[4 * DIFF_BLOCK_BYTES] = 9;
        let records = object_records(1 << 20, Some(&before), Some(&after));
        assert_eq!(records.len(), 2);
        let DiffRecord::Write { offset, data } = &records[0] else {
            panic!("{records:?}")
        };
        assert_eq!(*offset, (1 << 20) + DIFF_BLOCK_BYTES as u64);
        assert_eq!(&data[..], &after[DIFF_BLOCK_BYTES..3 * DIFF_BLOCK_BYTES]);
    }

    #[test]
    fn removed_objects_and_zeroed_blocks_become_zero_records() {
        let before = vec![3u8; 2 * DIFF_BLOCK_BYTES];
        assert_eq!(
            object_records(4096, Some(&before), None),
            vec![DiffRecord::Zero {
                offset: 4096,
                length: 2 * DIFF_BLOCK_BYTES as u64
            }]
        );
        let after = vec![0u8; DIFF_BLOCK_BYTES];
        assert_eq!(
            object_records(0, Some(&before), Some(&after)),
            vec![DiffRecord::Zero {
                offset: 0,
                length: 2 * DIFF_BLOCK_BYTES as u64
            }]
        );
        assert!(object_records(0, None, None).is_empty());
    }

    #[test]
    fn header_and_records_encode_as_rbd_diff_v1() {
        let mut out = Vec::new();
        let header = DiffHeader {
            from_snap: Some("a".into()),
            to_snap: None,
            size_bytes: 4096,
        };
        encode_header(&header, &mut out);
        encode_record(
            &DiffRecord::Write {
                offset: 8,
                data: Bytes::from_static(b"xy"),
            },
            &mut out,
        );
        let mut expected = b"rbd diff v1\nf".to_vec();
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.push(b'a');
        expected.push(b's');
        expected.extend_from_slice(&4096u64.to_le_bytes());
        expected.push(b'w');
        expected.extend_from_slice(&8u64.to_le_bytes());
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(b"xy");
        assert_eq!(out, expected);
    }
}
