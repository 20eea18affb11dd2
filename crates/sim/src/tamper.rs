//! Copies made wrong behind their PG's back, for the scrub comparisons to find.
//!
//! Bit flips rot data that its checksum then fails; these are intact and wrong: at the
//! start of the read-back (the cluster converged, faults long healed, primaries settled)
//! one or two replica copies of the bit-flip seeds (LogStore, scrubbing) lose an object
//! or get other bytes written into it, with no log entry. The primaries' scrub
//! comparisons must find and repair them: the run converges again only once every such
//! copy equals its primary's again, and the final checks compare every copy anyway.
//! The read-back reads from primaries, which are never touched.

use crate::osd_node::Process;
use crate::rng::Rng;
use crate::sim::Sim;
use carmine_clustermap::pg_shard;
use carmine_store::{CollectionId, ObjectStore, Transaction};
use carmine_types::{ObjectId, OsdId, PgId, SnapId};

/// A replica copy made wrong.
#[derive(Debug, Clone)]
pub struct Tampered {
    pub osd: OsdId,
    pub pgid: PgId,
    pub name: String,
}

pub struct TamperState {
    rng: Rng,
    done: bool,
    pub tampered: Vec<Tampered>,
}

impl TamperState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x5441_4d50), // "TAMP"
            done: false,
            tampered: Vec::new(),
        }
    }
}

impl Sim {
    /// At the read-back's start, once per run: one or two replica copies lose an
    /// object, or get other bytes, an omap key or an xattr in it.
    pub(crate) fn tamper_replica_copies(&mut self) {
        if !self.flips_enabled() || self.config.canary == crate::Canary::NoScrub || self.tamper.done
        {
            return;
        }
        self.tamper.done = true;
        let map = self.newest_map.clone();
        let pgs: Vec<PgId> = map.all_pgs().collect();
        let count = self.tamper.rng.between(1, 2);
        for _ in 0..count {
            let pgid = pgs[self.tamper.rng.below(pgs.len() as u64) as usize];
            let Some(mapping) = map.pg_mapping(pgid) else {
                continue;
            };
            let acting = &mapping.acting;
            if acting.len() < 2 {
                continue;
            }
            let osd = acting[1 + self.tamper.rng.below(acting.len() as u64 - 1) as usize];
            let how = self.tamper.rng.below(4);
            let pick = self.tamper.rng.next_u64();
            // Only a copy that stays a replica: under a pg_temp entry (a backfill
            // just done) the monitor soon hands the PG to its up primary, which may
            // be this copy, and a primary's copy is the one scrub keeps (seed 17 of
            // remaps, disk errors and expansion with snapshots). Drawn first, so
            // other seeds keep their streams.
            if mapping.up != mapping.acting {
                continue;
            }
            let shard = usize::from(pg_shard(pgid, self.config.shards_per_osd).0);
            let Process::Up(shards) = &mut self.osds.get_mut(&osd).expect("exists").process else {
                continue;
            };
            let store = shards[shard].store_mut();
            let coll = CollectionId::Pg(pgid);
            let heads: Vec<ObjectId> = (store.list_objects(coll, None, 4096))
                .unwrap_or_default()
                .into_iter()
                .filter(|oid| oid.snap == SnapId::HEAD && !oid.name.is_empty())
                .collect();
            if heads.is_empty() {
                continue;
            }
            let oid = heads[(pick % heads.len() as u64) as usize].clone();
            let mut tx = Transaction::new();
            let tampered = bytes::Bytes::from_static(b"tampered");
            let what = match how {
                0 => {
                    tx.remove(coll, oid.clone());
                    "removed"
                }
                1 => {
                    tx.write(coll, oid.clone(), 0, tampered);
                    "overwrote"
                }
                2 => {
                    tx.omap_set(coll, oid.clone(), vec![(tampered.clone(), tampered)]);
                    "added an omap key to"
                }
                _ => {
                    tx.set_xattr(coll, oid.clone(), "tampered".into(), tampered);
                    "added an xattr to"
                }
            };
            if store.submit(tx).is_err() {
                continue;
            }
            self.trace.note(self.now(), || {
                format!("tamper: {what} {osd}'s copy of {} in {pgid}", oid.name)
            });
            self.tamper.tampered.push(Tampered {
                osd,
                pgid,
                name: oid.name,
            });
        }
    }

    /// A tampered copy of an acting replica that still differs from its primary's.
    pub(crate) fn tampered_problem(&self) -> Option<String> {
        let map = &self.newest_map;
        self.tamper.tampered.iter().find_map(|t| {
            let mapping = map.pg_mapping(t.pgid)?;
            let primary = mapping.primary?;
            if primary == t.osd || !mapping.acting.contains(&t.osd) {
                return None; // a new interval's peering judges it, and the final checks
            }
            let shard = pg_shard(t.pgid, self.config.shards_per_osd);
            let object = |osd: OsdId| {
                crate::dump::dump_pg(self.osds[&osd].store(shard), t.pgid)
                    .and_then(|dump| dump.get(&t.name).cloned())
            };
            (object(primary) != object(t.osd)).then(|| {
                format!(
                    "{}'s copy of {} in {} still differs from its primary's (tampered)",
                    t.osd, t.name, t.pgid
                )
            })
        })
    }
}
