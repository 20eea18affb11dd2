//! Convenience calls on [`Client`]: whole-object put/get, stat, remove, listing,
//! xattrs and omap, each one compound op.

use crate::client::Client;
use crate::objecter::OpSnaps;
use crate::sessions::OpRequest;
use crate::ClientError;
use bytes::Bytes;
use carmine_proto::{
    parse_snap_allocated, Command, CommandOutput, OpCode, OpOutput, OsdOp, OsdOpReply, SnapSet,
};
use carmine_types::limits::{LIST_ENTRIES_MAX, OBJECT_NAME_BYTES_MAX};
use carmine_types::{EVersion, OsdId, PgId, PoolId, SnapId};
use std::collections::BTreeMap;

/// What `stat` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectStat {
    pub size_bytes: u64,
    pub mtime_ns: u64,
    pub version: u64,
}

fn validate_name(oid: &str) -> Result<(), ClientError> {
    if oid.is_empty() {
        return Err(ClientError::Invalid("object name is empty".into()));
    }
    if oid.len() > OBJECT_NAME_BYTES_MAX {
        return Err(ClientError::Invalid(format!(
            "object name is {} bytes; the limit is {OBJECT_NAME_BYTES_MAX}",
            oid.len()
        )));
    }
    Ok(())
}

fn output(reply: &OsdOpReply, index: usize) -> Result<&OpOutput, ClientError> {
    reply.outputs.get(index).ok_or_else(|| {
        ClientError::Other("the OSD sent a reply without the expected output".into())
    })
}

fn unexpected() -> ClientError {
    ClientError::Other("the OSD sent a reply of an unexpected shape".into())
}

impl Client {
    /// The id of pool `name` in the current map.
    pub fn pool_id(&self, name: &str) -> Result<PoolId, ClientError> {
        self.map()
            .pool_by_name(name)
            .map(|pool| pool.id)
            .ok_or_else(|| ClientError::NoSuchPool(name.to_string()))
    }

    /// Runs a compound op on one object, atomically.
    pub async fn operate(
        &self,
        pool: &str,
        oid: &str,
        ops: Vec<OpCode>,
    ) -> Result<OsdOpReply, ClientError> {
        self.operate_with(pool, oid, ops, 0, None, OpSnaps::default())
            .await
    }

    /// [`Client::operate`] with a snapshot context for writes, or a snapshot id to
    /// read at (`snaps.snapid`; writes must leave it at the head).
    pub async fn operate_snaps(
        &self,
        pool: &str,
        oid: &str,
        ops: Vec<OpCode>,
        snaps: OpSnaps,
    ) -> Result<OsdOpReply, ClientError> {
        self.operate_with(pool, oid, ops, 0, None, snaps).await
    }

    /// [`Client::operate_snaps`] for a pool already looked up by id and an object name
    /// the caller gives away. A block image's data path names a fresh object for every
    /// I/O and knows its pool from when it was opened, so this skips the pool lookup
    /// by name (a read of the current map) and a copy of the name per op. An op on a
    /// pool that no longer exists fails with [`ClientError::NoSuchPool`].
    pub async fn operate_pool_id(
        &self,
        pool: PoolId,
        oid: String,
        ops: Vec<OpCode>,
        snaps: OpSnaps,
    ) -> Result<OsdOpReply, ClientError> {
        validate_name(&oid)?;
        if ops.is_empty() {
            return Err(ClientError::Invalid("no operations given".into()));
        }
        self.submit(OpRequest {
            pool,
            oid,
            list_pg: None,
            ops,
            flags: 0,
            pinned_osd: None,
            snaps,
        })
        .await
    }

    /// Allocates a self-managed snapshot id in `pool` (librados'
    /// `selfmanaged_snap_create`); waits until this client's map shows it.
    pub async fn selfmanaged_snap_create(&self, pool: &str) -> Result<u64, ClientError> {
        let command = Command::PoolSnapCreate {
            pool: pool.to_string(),
        };
        let CommandOutput::Done { epoch, message } = self.command(command).await? else {
            return Err(unexpected());
        };
        let snap = parse_snap_allocated(&message).ok_or_else(unexpected)?;
        self.wait_for_epoch(epoch).await?;
        Ok(snap)
    }

    /// Marks snapshot id `snap` of `pool` removed; the OSDs trim its clones in the
    /// background.
    pub async fn selfmanaged_snap_remove(&self, pool: &str, snap: u64) -> Result<(), ClientError> {
        let command = Command::PoolSnapRemove {
            pool: pool.to_string(),
            snap,
        };
        let CommandOutput::Done { epoch, .. } = self.command(command).await? else {
            return Err(unexpected());
        };
        self.wait_for_epoch(epoch).await?;
        Ok(())
    }

    /// The object's snapshot set and whether its head exists (`LIST_SNAPS`).
    pub async fn list_snaps(&self, pool: &str, oid: &str) -> Result<(SnapSet, bool), ClientError> {
        let reply = self.operate(pool, oid, vec![OpCode::ListSnaps]).await?;
        match output(&reply, 0)? {
            OpOutput::Snaps {
                snapset,
                head_exists,
            } => Ok((snapset.clone(), *head_exists)),
            _ => Err(unexpected()),
        }
    }

    /// Runs a read-only op against the copy held by `osd` (to compare replicas).
    pub async fn operate_on_osd(
        &self,
        pool: &str,
        oid: &str,
        ops: Vec<OpCode>,
        osd: OsdId,
    ) -> Result<OsdOpReply, ClientError> {
        if ops.iter().any(OpCode::is_write) {
            return Err(ClientError::Invalid(
                "only reads may be sent to a named OSD".into(),
            ));
        }
        let snaps = OpSnaps::default();
        self.operate_with(pool, oid, ops, OsdOp::FLAG_LOCAL_READ, Some(osd), snaps)
            .await
    }

    async fn operate_with(
        &self,
        pool: &str,
        oid: &str,
        ops: Vec<OpCode>,
        flags: u32,
        pinned_osd: Option<OsdId>,
        snaps: OpSnaps,
    ) -> Result<OsdOpReply, ClientError> {
        validate_name(oid)?;
        if ops.is_empty() {
            return Err(ClientError::Invalid("no operations given".into()));
        }
        let pool = self.pool_id(pool)?;
        self.submit(OpRequest {
            pool,
            oid: oid.to_string(),
            list_pg: None,
            ops,
            flags,
            pinned_osd,
            snaps,
        })
        .await
    }

    /// Replaces the object's data with `data`, creating it if needed. Returns the
    /// object's new version.
    pub async fn write_full(&self, pool: &str, oid: &str, data: Bytes) -> Result<u64, ClientError> {
        let reply = self
            .operate(pool, oid, vec![OpCode::WriteFull { data }])
            .await?;
        Ok(reply.user_version)
    }

    /// Reads `length` bytes at `offset` (0 = to the end).
    pub async fn read(
        &self,
        pool: &str,
        oid: &str,
        offset: u64,
        length: u64,
    ) -> Result<Bytes, ClientError> {
        let reply = self
            .operate(pool, oid, vec![OpCode::Read { offset, length }])
            .await?;
        match output(&reply, 0)? {
            OpOutput::Data(data) => Ok(data.clone()),
            _ => Err(unexpected()),
        }
    }

    pub async fn stat(&self, pool: &str, oid: &str) -> Result<ObjectStat, ClientError> {
        let reply = self.operate(pool, oid, vec![OpCode::Stat]).await?;
        match output(&reply, 0)? {
            OpOutput::Stat {
                size_bytes,
                mtime_ns,
                version,
            } => Ok(ObjectStat {
                size_bytes: *size_bytes,
                mtime_ns: *mtime_ns,
                version: *version,
            }),
            _ => Err(unexpected()),
        }
    }

    pub async fn remove(&self, pool: &str, oid: &str) -> Result<(), ClientError> {
        self.operate(pool, oid, vec![OpCode::Remove]).await?;
        Ok(())
    }

    pub async fn getxattrs(
        &self,
        pool: &str,
        oid: &str,
    ) -> Result<BTreeMap<String, Bytes>, ClientError> {
        let reply = self.operate(pool, oid, vec![OpCode::GetXattrs]).await?;
        match output(&reply, 0)? {
            OpOutput::Xattrs(map) => Ok(map.clone()),
            _ => Err(unexpected()),
        }
    }

    /// Every omap entry of the object, fetched page by page.
    pub async fn omap_list(
        &self,
        pool: &str,
        oid: &str,
    ) -> Result<Vec<(Bytes, Bytes)>, ClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let ops = vec![OpCode::OmapGetVals {
                after: after.clone(),
                max_entries: LIST_ENTRIES_MAX as u32,
            }];
            let reply = self.operate(pool, oid, ops).await?;
            let OpOutput::Omap { entries, more } = output(&reply, 0)? else {
                return Err(unexpected());
            };
            after = entries.last().map(|(key, _)| key.clone());
            all.extend(entries.iter().cloned());
            if !more || after.is_none() {
                return Ok(all);
            }
        }
    }

    /// One page of the objects in `pg`, after `cursor`.
    pub async fn list_pg(
        &self,
        pg: PgId,
        cursor: Option<String>,
        max_entries: u32,
    ) -> Result<(Vec<String>, Option<String>), ClientError> {
        self.list_pg_at(pg, cursor, max_entries, SnapId::HEAD).await
    }

    /// [`Client::list_pg`] for snapshot `snapid`: other than the head, the page also
    /// names objects whose head was removed while clones remain, so it is a superset of
    /// what exists at the snapshot (stat each name at `snapid` to filter).
    pub async fn list_pg_at(
        &self,
        pg: PgId,
        cursor: Option<String>,
        max_entries: u32,
        snapid: SnapId,
    ) -> Result<(Vec<String>, Option<String>), ClientError> {
        let list = OpCode::PgList {
            after: cursor,
            max_entries,
        };
        let reply = self.submit_pg_op(pg, list, snapid).await?;
        match output(&reply, 0)? {
            OpOutput::List { names, next } => Ok((names.clone(), next.clone())),
            _ => Err(unexpected()),
        }
    }

    /// One page of PG `pg`'s unfound objects after `cursor`, each with the version the
    /// PG's history needs (`pg PGID list_unfound`); the cursor to continue from, or
    /// `None` at the end.
    pub async fn list_unfound(
        &self,
        pg: PgId,
        cursor: Option<String>,
        max_entries: u32,
    ) -> Result<(Vec<(String, EVersion)>, Option<String>), ClientError> {
        let list = OpCode::PgListUnfound {
            after: cursor,
            max_entries,
        };
        let reply = self.submit_pg_op(pg, list, SnapId::HEAD).await?;
        match output(&reply, 0)? {
            OpOutput::Unfound { objects, next } => Ok((objects.clone(), next.clone())),
            _ => Err(unexpected()),
        }
    }

    /// Gives up PG `pg`'s unfound objects (`pg PGID mark_unfound_lost delete`): the
    /// primary logs the removal of each. Returns those removed, with the version each
    /// needed, once every member holds the removals.
    pub async fn mark_unfound_lost(
        &self,
        pg: PgId,
    ) -> Result<Vec<(String, EVersion)>, ClientError> {
        let mark = OpCode::PgMarkUnfoundLost;
        let reply = self.submit_pg_op(pg, mark, SnapId::HEAD).await?;
        match output(&reply, 0)? {
            OpOutput::Unfound { objects, .. } => Ok(objects.clone()),
            _ => Err(unexpected()),
        }
    }

    /// Sends `op`, an op on PG `pg` itself (no object name), to its primary.
    async fn submit_pg_op(
        &self,
        pg: PgId,
        op: OpCode,
        snapid: SnapId,
    ) -> Result<OsdOpReply, ClientError> {
        self.submit(OpRequest {
            pool: pg.pool,
            oid: String::new(),
            list_pg: Some(pg),
            ops: vec![op],
            flags: 0,
            pinned_osd: None,
            snaps: OpSnaps {
                snapc: Default::default(),
                snapid,
            },
        })
        .await
    }

    /// Every object name in the pool, PG by PG (not a snapshot: objects written
    /// during the listing may or may not appear).
    pub async fn list(&self, pool: &str) -> Result<Vec<String>, ClientError> {
        self.list_at(pool, SnapId::HEAD).await
    }

    /// [`Client::list`] at snapshot `snapid` (see [`Client::list_pg_at`]).
    pub async fn list_at(&self, pool: &str, snapid: SnapId) -> Result<Vec<String>, ClientError> {
        let pool_id = self.pool_id(pool)?;
        let pg_num = self
            .map()
            .pools
            .get(&pool_id)
            .map(|p| p.pg_num)
            .ok_or_else(|| ClientError::NoSuchPool(pool.to_string()))?;
        let mut names = Vec::new();
        for seed in 0..pg_num {
            let pg = PgId {
                pool: pool_id,
                seed,
            };
            let mut cursor = None;
            loop {
                let (page, next) = self.list_pg_at(pg, cursor, 1000, snapid).await?;
                names.extend(page);
                match next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        Ok(names)
    }
}
