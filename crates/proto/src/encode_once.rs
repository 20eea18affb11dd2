//! [`RepOpEncoder`]: encodes a replicated write once for all of its replicas.
//!
//! A primary sends the same [`RepOp`] to every replica (the copies share one
//! `Arc<Transaction>`), one after the other in the same output batch. Encoding it once
//! per replica repeated the largest encoding on the write path, about 3% of the
//! instructions of a size-3 write. The encoder remembers the last `RepOp` it encoded
//! and hands back the same front and data segments when the next message is the same
//! write; anything else is encoded as usual.

use crate::{Msg, RepOp};
use bytes::Bytes;
use std::sync::Arc;

/// Encodes messages as [`Msg::encode_parts`] does, sharing a replicated write's
/// encoding between its replicas. Call [`RepOpEncoder::clear`] after a batch so it
/// does not keep the last transaction alive.
#[derive(Debug, Default)]
pub struct RepOpEncoder {
    last: Option<(RepOp, (Bytes, Bytes))>,
}

impl RepOpEncoder {
    /// The message's front and data segments.
    pub fn encode_parts(&mut self, msg: &Msg) -> (Bytes, Bytes) {
        let Msg::RepOp(rep) = msg else {
            return msg.encode_parts();
        };
        if let Some((last, parts)) = &self.last {
            if same_write(last, rep) {
                return parts.clone();
            }
        }
        let parts = msg.encode_parts();
        self.last = Some((rep.clone(), parts.clone()));
        parts
    }

    /// Forgets the last write (and releases its transaction).
    pub fn clear(&mut self) {
        self.last = None;
    }
}

/// Whether `a` and `b` encode identically. The transaction, by far the largest part,
/// is compared by identity: the copies a primary makes of one write share it, and the
/// remembered copy keeps it alive, so the pointer cannot be reused meanwhile. The rest
/// is small and compared by value, so two writes that happen to share a transaction
/// are still told apart.
fn same_write(a: &RepOp, b: &RepOp) -> bool {
    Arc::ptr_eq(&a.tx, &b.tx)
        && a.pgid == b.pgid
        && a.map_epoch == b.map_epoch
        && a.rep_tid == b.rep_tid
        && a.entry == b.entry
        && a.info == b.info
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LogEntry, LogOp, PgInfo};
    use carmine_store::{CollectionId, Transaction};
    use carmine_types::{EVersion, Epoch, ObjectId, PgId, ReqId};

    fn pg(seed: u32) -> PgId {
        PgId::new(1, seed)
    }

    fn rep_op(tx: &Arc<Transaction>, rep_tid: u64) -> RepOp {
        let pgid = pg(2);
        RepOp {
            pgid,
            map_epoch: Epoch(3),
            rep_tid,
            entry: LogEntry {
                version: EVersion::new(3, rep_tid),
                prior_version: EVersion::default(),
                reqid: ReqId::default(),
                oid: "o".into(),
                op: LogOp::Modify,
                user_version: rep_tid,
            },
            info: PgInfo::default(),
            tx: tx.clone(),
        }
    }

    fn write_tx(payload: Bytes) -> Arc<Transaction> {
        let mut tx = Transaction::default();
        let coll = CollectionId::Pg(pg(2));
        tx.write(coll, ObjectId::head("o"), 0, payload);
        Arc::new(tx)
    }

    #[test]
    fn replicas_of_one_write_share_its_encoding() {
        let tx = write_tx(Bytes::from(vec![7u8; 8192]));
        let msg = Msg::RepOp(rep_op(&tx, 5));
        let mut encoder = RepOpEncoder::default();
        let (front, data) = encoder.encode_parts(&msg);
        assert_eq!(data.len(), 8192, "the payload rides in the data segment");
        assert_eq!((front.clone(), data.clone()), msg.encode_parts());
        let (again_front, again_data) = encoder.encode_parts(&msg.clone());
        assert_eq!(again_front.as_ptr(), front.as_ptr(), "front not shared");
        assert_eq!(again_data.as_ptr(), data.as_ptr(), "data not shared");
    }

    #[test]
    fn anything_else_is_encoded_afresh() {
        let tx = write_tx(Bytes::from_static(b"abc"));
        let mut encoder = RepOpEncoder::default();
        let first = rep_op(&tx, 5);
        encoder.encode_parts(&Msg::RepOp(first.clone()));
        let mut others = vec![
            rep_op(&tx, 6),
            rep_op(&write_tx(Bytes::from_static(b"abc")), 5),
        ];
        let mut other_epoch = first.clone();
        other_epoch.map_epoch = Epoch(4);
        let mut other_info = first.clone();
        other_info.info.last_update = EVersion::new(3, 9);
        let mut other_pg = first.clone();
        other_pg.pgid = pg(3);
        let mut other_entry = first;
        other_entry.entry.user_version = 99;
        others.extend([other_epoch, other_info, other_pg, other_entry]);
        for other in others {
            let msg = Msg::RepOp(other);
            let (front, data) = encoder.encode_parts(&msg);
            assert_eq!((front, data), msg.encode_parts(), "{msg:?}");
        }
        // Other messages pass through, and clearing forgets the write.
        let reply = Msg::RepOpReply(crate::RepOpReply {
            pgid: pg(2),
            map_epoch: Epoch(3),
            rep_tid: 1,
            version: EVersion::new(3, 1),
            result: Ok(()),
            log_only: false,
        });
        assert_eq!(encoder.encode_parts(&reply), reply.encode_parts());
        encoder.clear();
        assert!(encoder.last.is_none());
    }
}
