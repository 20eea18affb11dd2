//! Helpers shared by the LogStore tests: a seeded generator of random transactions,
//! and a full comparison of two stores through the `ObjectStore` read interface.

#![allow(dead_code)]

use bytes::Bytes;
use carmine_store::{CollectionId, ObjectStore, StoreError, Transaction};
use carmine_types::{ObjectId, PgId};

/// splitmix64, so every test run is reproduced by its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    pub fn bytes_below(&mut self, length_max: u64) -> Bytes {
        let length = self.below(length_max) as usize;
        self.bytes(length)
    }

    pub fn bytes(&mut self, length: usize) -> Bytes {
        let fill = self.next_u64() as u8;
        let step = (self.next_u64() as u8) | 1;
        Bytes::from(
            (0..length)
                .map(|i| fill.wrapping_add(step.wrapping_mul(i as u8)))
                .collect::<Vec<u8>>(),
        )
    }
}

pub fn pg() -> CollectionId {
    CollectionId::Pg(PgId::new(1, 0))
}

pub fn object(index: u64) -> ObjectId {
    ObjectId::head(format!("obj{index}"))
}

/// The transaction that creates the collections the workload uses.
pub fn setup_transaction() -> Transaction {
    let mut tx = Transaction::new();
    tx.create_collection(CollectionId::Meta);
    tx.create_collection(pg());
    tx
}

/// A random transaction over `object_count` objects: writes from bytes to 200 KiB
/// (so some go out of line), overwrites, truncates, removes, clones, xattrs and omap
/// (PG-log style keys), with 1 to 4 ops.
pub fn random_transaction(rng: &mut Rng, object_count: u64) -> Transaction {
    let mut tx = Transaction::new();
    for _ in 0..=rng.below(4) {
        let oid = object(rng.below(object_count));
        match rng.below(20) {
            0..=7 => {
                let length = match rng.below(10) {
                    0 => 64 * 1024 + rng.below(140 * 1024),
                    1..=3 => 4096,
                    _ => rng.below(3000),
                } as usize;
                let offset = rng.below(256 * 1024);
                tx.write(pg(), oid, offset, rng.bytes(length));
            }
            8 => tx.truncate(pg(), oid, rng.below(300 * 1024)),
            9 => tx.zero(pg(), oid, rng.below(100_000), rng.below(20_000)),
            10 => tx.remove(pg(), oid),
            11 => tx.clone_object(pg(), oid, object(rng.below(object_count))),
            12..=13 => tx.set_xattr(pg(), oid, format!("x{}", rng.below(3)), rng.bytes_below(40)),
            14 => tx.rm_xattr(pg(), oid, format!("x{}", rng.below(3))),
            15..=17 => {
                let key = Bytes::from(format!("pglog_{:06}", rng.below(50)));
                tx.omap_set(CollectionId::Meta, oid, vec![(key, rng.bytes_below(100))]);
            }
            18 => tx.omap_rm(
                CollectionId::Meta,
                oid,
                vec![Bytes::from(format!("pglog_{:06}", rng.below(50)))],
            ),
            _ => tx.set_mtime(pg(), oid, rng.next_u64()),
        }
    }
    tx
}

/// Compares everything readable in `actual` with `expected`. With `tolerate_corrupt`,
/// a data read may fail with `Corrupt` instead (never return other bytes).
pub fn compare_stores(
    actual: &dyn ObjectStore,
    expected: &dyn ObjectStore,
    tolerate_corrupt: bool,
) -> Result<(), String> {
    let collections = expected.list_collections();
    if actual.list_collections() != collections {
        return Err(format!(
            "collections {:?} != {:?}",
            actual.list_collections(),
            collections
        ));
    }
    for coll in collections {
        let objects = expected.list_objects(coll, None, usize::MAX).unwrap();
        let listed = actual.list_objects(coll, None, usize::MAX).unwrap();
        if listed != objects {
            return Err(format!("{coll}: objects {listed:?} != {objects:?}"));
        }
        for oid in objects {
            compare_object(actual, expected, coll, &oid, tolerate_corrupt)?;
        }
    }
    let (a, e) = (actual.usage(), expected.usage());
    if (a.object_count, a.data_bytes, a.metadata_bytes)
        != (e.object_count, e.data_bytes, e.metadata_bytes)
    {
        return Err(format!("usage {a:?} != {e:?}"));
    }
    Ok(())
}

fn compare_object(
    actual: &dyn ObjectStore,
    expected: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
    tolerate_corrupt: bool,
) -> Result<(), String> {
    let stat = expected.stat(coll, oid).unwrap();
    if actual.stat(coll, oid) != Ok(stat) {
        return Err(format!(
            "{coll}/{oid}: stat {:?} != {stat:?}",
            actual.stat(coll, oid)
        ));
    }
    let data = expected.read(coll, oid, 0, u64::MAX).unwrap();
    match actual.read(coll, oid, 0, u64::MAX) {
        Ok(read) if read == data => {}
        Err(StoreError::Corrupt(_)) if tolerate_corrupt => {}
        Ok(read) => {
            let first = read.iter().zip(data.iter()).position(|(a, b)| a != b);
            return Err(format!(
                "{coll}/{oid}: data differs (lengths {} {}, first difference {first:?})",
                read.len(),
                data.len()
            ));
        }
        Err(error) => return Err(format!("{coll}/{oid}: read failed: {error}")),
    }
    if actual.getxattrs(coll, oid) != expected.getxattrs(coll, oid) {
        return Err(format!("{coll}/{oid}: xattrs differ"));
    }
    if actual.omap_list(coll, oid, None, usize::MAX)
        != expected.omap_list(coll, oid, None, usize::MAX)
    {
        return Err(format!("{coll}/{oid}: omap differs"));
    }
    Ok(())
}
