//! Backward compatibility: a device written by LogStore format version 1 is kept in
//! `tests/fixtures/logstore_v1.sectors` (every non-zero 512-byte sector of a 4 MiB
//! device, each as `u64 offset | 512 bytes`), and must keep opening with the same
//! contents. Regenerate (only when adding a new version's fixture) with
//! `CARMINE_WRITE_FIXTURES=1 cargo test -p carmine-store --test logstore_fixture`.

use bytes::Bytes;
use carmine_store::device::MemDevice;
use carmine_store::logstore::{self, LogStoreConfig};
use carmine_store::{BlockDevice, CollectionId, LogStore, ObjectStore, Transaction};
use carmine_types::{ObjectId, PgId};

const DEVICE_BYTES: usize = 4 << 20;
const SECTOR_BYTES: usize = 512;
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/logstore_v1.sectors"
);

fn pg() -> CollectionId {
    CollectionId::Pg(PgId::new(3, 7))
}

/// The contents: inline and out-of-line data, an overwrite, xattrs, omap, a removal;
/// part checkpointed by `close`, part only in the log.
fn write_contents() -> MemDevice {
    let mut store = LogStore::open(MemDevice::new(DEVICE_BYTES), LogStoreConfig::small()).unwrap();
    let mut tx = Transaction::new();
    tx.create_collection(pg());
    tx.write(
        pg(),
        ObjectId::head("small"),
        0,
        Bytes::from_static(b"version one"),
    );
    tx.write(
        pg(),
        ObjectId::head("large"),
        0,
        Bytes::from(vec![7u8; 100_000]),
    );
    tx.set_xattr(
        pg(),
        ObjectId::head("small"),
        "_".into(),
        Bytes::from_static(b"oi"),
    );
    store.submit(tx).unwrap();
    let device = store.close().unwrap();
    let mut store = LogStore::open(device, LogStoreConfig::small()).unwrap();
    let mut tx = Transaction::new();
    tx.write(
        pg(),
        ObjectId::head("large"),
        4096,
        Bytes::from(vec![9u8; 4096]),
    );
    tx.omap_set(
        pg(),
        ObjectId::head("small"),
        vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v"))],
    );
    tx.touch(pg(), ObjectId::head("gone"));
    tx.remove(pg(), ObjectId::head("gone"));
    store.submit(tx).unwrap();
    store.flush().unwrap();
    store.into_device()
}

fn save(device: &MemDevice) {
    let mut out = Vec::new();
    let mut sector = vec![0u8; SECTOR_BYTES];
    for offset in (0..DEVICE_BYTES).step_by(SECTOR_BYTES) {
        device.read_at(offset as u64, &mut sector).unwrap();
        if sector.iter().any(|&b| b != 0) {
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            out.extend_from_slice(&sector);
        }
    }
    std::fs::write(FIXTURE, out).unwrap();
}

fn load() -> MemDevice {
    let raw = std::fs::read(FIXTURE).expect("fixture present");
    let mut device = MemDevice::new(DEVICE_BYTES);
    for entry in raw.chunks(8 + SECTOR_BYTES) {
        let offset = u64::from_le_bytes(entry[..8].try_into().unwrap());
        device.write_at(offset, &entry[8..]).unwrap();
    }
    device
}

#[test]
fn version_1_fixture_still_opens() {
    if std::env::var_os("CARMINE_WRITE_FIXTURES").is_some() {
        save(&write_contents());
    }
    let device = load();
    let report = logstore::fsck(&device).unwrap();
    assert!(report.is_clean(), "{:?}", report.errors);
    assert_eq!(
        report.records_checked, 2,
        "one transaction and its padding replay"
    );
    let store = LogStore::open(device, LogStoreConfig::small()).unwrap();
    assert_eq!(store.committed_through(), 2);
    let small = ObjectId::head("small");
    assert_eq!(
        &store.read(pg(), &small, 0, 100).unwrap()[..],
        b"version one"
    );
    assert_eq!(&store.getxattr(pg(), &small, "_").unwrap()[..], b"oi");
    assert_eq!(store.omap_list(pg(), &small, None, 10).unwrap().len(), 1);
    let large = store
        .read(pg(), &ObjectId::head("large"), 0, u64::MAX)
        .unwrap();
    assert_eq!(large.len(), 100_000);
    assert!(large[..4096].iter().all(|&b| b == 7));
    assert!(large[4096..8192].iter().all(|&b| b == 9));
    assert!(large[8192..].iter().all(|&b| b == 7));
    assert!(!store.exists(pg(), &ObjectId::head("gone")));
}
