//! A clone's ancestry: its parent snapshot, that parent's own parent, and so on, as
//! RBD follows a chain of clones of clones.
//!
//! Where a clone has no object, the data comes from the nearest ancestor that has the
//! object at its snapshot, cut at the overlap: the smallest overlap on the way up, since
//! each level shows its own parent only up to its own overlap. The chain is read once,
//! when the image is opened. It stays valid while the image is open: a parent snapshot
//! that has children is protected, and a clone with snapshots can be neither flattened
//! nor shrunk below its overlap, so no level's link or overlap changes under a reader.

use crate::admin::load_header;
use crate::header::{data_object, ParentInfo};
use crate::layout::object_size_bytes;
use crate::spec::ImageSpec;
use crate::BlockError;
use bytes::Bytes;
use carmine_client::{Client, ClientError, OpSnaps};
use carmine_proto::{OpCode, OpError, OpOutput, SnapContext};
use carmine_types::SnapId;
use std::sync::Arc;

/// Deepest chain of clones followed. Deeper chains are refused with an error rather than
/// read as zeros; a loop (only a corrupt header could make one) stops here too.
pub const ANCESTRY_DEPTH_MAX: usize = 16;

/// The parents of an image, nearest first, each with its effective overlap.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ancestry(Arc<[ParentInfo]>);

impl Ancestry {
    /// Follows the parent links up from `parent` (an image header's own link).
    pub async fn load(client: &Client, parent: Option<&ParentInfo>) -> Result<Self, BlockError> {
        let mut levels: Vec<ParentInfo> = Vec::new();
        let mut next = parent.cloned();
        while let Some(mut level) = next.take() {
            if levels.len() == ANCESTRY_DEPTH_MAX {
                return Err(BlockError::Invalid(format!(
                    "clone chain deeper than {ANCESTRY_DEPTH_MAX} levels (at image id {} in \
                     pool {}); flatten a clone in the middle",
                    level.image_id, level.pool
                )));
            }
            if let Some(child) = levels.last() {
                level.overlap_bytes = level.overlap_bytes.min(child.overlap_bytes);
            }
            let spec = ImageSpec {
                pool: level.pool.clone(),
                image: format!("(id {})", level.image_id),
            };
            let (header, _) = load_header(client, &spec, &level.image_id).await?;
            next = header.parent;
            levels.push(level);
        }
        Ok(Ancestry(levels.into()))
    }

    /// Whether object `object_number` of a clone of order `order` may read through.
    pub fn covers(&self, object_number: u64, order: u8) -> bool {
        self.0
            .first()
            .is_some_and(|parent| (object_number << order) < parent.overlap_bytes)
    }

    /// The bytes `offset..offset + length` of object `object_number` as the nearest
    /// ancestor holding it has them at its snapshot, cut at the overlap (possibly
    /// shorter than `length`; empty when no ancestor has the object).
    pub async fn read(
        &self,
        client: &Client,
        object_number: u64,
        order: u8,
        offset: u64,
        length: u64,
    ) -> Result<Bytes, BlockError> {
        let start = (object_number << order) + offset;
        for level in self.0.iter() {
            let visible = level.overlap_bytes.saturating_sub(start).min(length);
            if visible == 0 {
                // Overlaps only shrink going up: no higher level shows this range.
                return Ok(Bytes::new());
            }
            let oid = data_object(&level.image_id, object_number);
            let ops = vec![OpCode::Read {
                offset,
                length: visible,
            }];
            let snaps = OpSnaps {
                snapc: SnapContext::default(),
                snapid: SnapId(level.snap_id),
            };
            match client.operate_snaps(&level.pool, &oid, ops, snaps).await {
                Ok(reply) => {
                    return match reply.outputs.first() {
                        Some(OpOutput::Data(data)) => Ok(data.clone()),
                        _ => Err(
                            ClientError::Op(OpError::Io("read reply without data".into())).into(),
                        ),
                    }
                }
                Err(error) if error.is_not_found() => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Ok(Bytes::new())
    }

    /// The whole object a copy-up writes into the clone (empty if no ancestor has it).
    pub async fn copyup_data(
        &self,
        client: &Client,
        object_number: u64,
        order: u8,
    ) -> Result<Bytes, BlockError> {
        self.read(client, object_number, order, 0, object_size_bytes(order))
            .await
    }
}
