//! LogStore under faults: crashes at random points (including mid-record and
//! mid-sync), torn sectors, bit flips, a full device, long overwrite workloads that
//! need the cleaner, and a real file. Every random choice comes from a seed in a fixed
//! list, and every failure names its seed.

mod common;

use bytes::Bytes;
use carmine_store::device::MemDevice;
use carmine_store::logstore::{self, LogStoreConfig};
use carmine_store::{
    BlockDevice, FaultConfig, FaultyDevice, FileDevice, LogStore, MemStore, ObjectStore,
    StoreError, Transaction,
};
use common::{compare_stores, object, pg, random_transaction, setup_transaction, Rng};

const DEVICE_BYTES: usize = 8 << 20;

fn crash_config(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        crash_keeps_random_prefix: true,
        crash_tears_last_sector: true,
        ..FaultConfig::default()
    }
}

fn open(device: FaultyDevice) -> Result<LogStore<FaultyDevice>, String> {
    LogStore::open(device, LogStoreConfig::small()).map_err(|e| format!("open: {e}"))
}

/// A MemStore holding exactly `txs`, each of which must succeed.
fn reference(txs: &[Transaction]) -> MemStore {
    let mut store = MemStore::new();
    for (index, tx) in txs.iter().enumerate() {
        assert_eq!(
            store.submit(tx.clone()),
            Ok(index as u64 + 1),
            "reference tx {index}"
        );
    }
    store
}

/// Submits random transactions, flushing at random; keeps the ones that succeeded.
fn random_workload(
    store: &mut LogStore<FaultyDevice>,
    rng: &mut Rng,
    txs: &mut Vec<Transaction>,
    count: u64,
) -> Result<(), String> {
    for _ in 0..count {
        let tx = random_transaction(rng, 6);
        match store.submit(tx.clone()) {
            Ok(seq) if seq == txs.len() as u64 + 1 => txs.push(tx),
            Ok(seq) => return Err(format!("submit returned seq {seq} after {}", txs.len())),
            Err(StoreError::NoSuchObject(..) | StoreError::NoSuchXattr(_)) => {}
            Err(error) => return Err(format!("submit: {error}")),
        }
        if rng.chance(4) {
            store.flush().map_err(|e| format!("flush: {e}"))?;
        }
    }
    Ok(())
}

fn check_recovered(
    store: &LogStore<FaultyDevice>,
    txs: &mut Vec<Transaction>,
    committed: u64,
) -> Result<(), String> {
    let recovered = store.committed_through();
    if recovered < committed || recovered > txs.len() as u64 {
        return Err(format!(
            "recovered through {recovered}: committed {committed}, submitted {}",
            txs.len()
        ));
    }
    txs.truncate(recovered as usize);
    compare_stores(store, &reference(txs), false)?;
    store.check_consistency().map_err(|e| e.to_string())?;
    let report = logstore::fsck(store.device()).map_err(|e| format!("fsck: {e}"))?;
    if !report.is_clean() {
        return Err(format!("fsck: {:?}", report.errors));
    }
    Ok(())
}

/// Random workload, then a crash: between flushes, or with the power failing after
/// 0-2 device writes of a flush (mid-record, before the sync, mid-checkpoint), keeping a
/// random prefix of the unsynced writes and tearing the next. Recovery must hold every
/// committed transaction and exactly a prefix of the submitted ones.
fn crash_run(seed: u64, rounds: usize) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let mut store = open(FaultyDevice::in_memory(DEVICE_BYTES, crash_config(seed)))?;
    let mut txs = vec![setup_transaction()];
    store
        .submit(setup_transaction())
        .map_err(|e| e.to_string())?;
    for round in 0..rounds {
        if txs.is_empty() {
            store
                .submit(setup_transaction())
                .map_err(|e| e.to_string())?;
            txs.push(setup_transaction());
        }
        let count = 10 + rng.below(50);
        random_workload(&mut store, &mut rng, &mut txs, count)?;
        if !rng.chance(4) {
            store.device_mut().fail_power_after_writes(rng.below(3));
            let _ = store.flush();
        }
        let committed = store.committed_through();
        let mut device = store.into_device();
        let crash = device.crash().map_err(|e| e.to_string())?;
        store = open(device)?;
        check_recovered(&store, &mut txs, committed)
            .map_err(|e| format!("round {round} after {crash:?}: {e}"))?;
    }
    Ok(())
}

fn run_seeds(seeds: std::ops::Range<u64>, rounds: usize) {
    for seed in seeds {
        if let Err(error) = crash_run(seed, rounds) {
            panic!("crash test failed with seed {seed}: {error}");
        }
    }
}

#[test]
fn crash_recovery_keeps_committed_prefix() {
    run_seeds(0..100, 5);
}

/// Thousands of crash points; run with `cargo test -p carmine-store -- --ignored`.
#[test]
#[ignore]
fn crash_recovery_many_seeds() {
    run_seeds(1000..3000, 6);
}

/// A bit flipped anywhere in the segments is detected: open fails cleanly, or replay
/// stops at the damaged record, or the damaged data fails its crc when read. No
/// panic, and never other bytes than the ones written.
#[test]
fn bit_flips_are_detected() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let mut store = open(FaultyDevice::in_memory(
            DEVICE_BYTES,
            FaultConfig::default(),
        ))
        .unwrap();
        let mut txs = vec![setup_transaction()];
        store.submit(setup_transaction()).unwrap();
        random_workload(&mut store, &mut rng, &mut txs, 40).unwrap();
        store.flush().unwrap();
        let committed = store.committed_through();
        let mut device = store.into_device();
        let stat = logstore::stat(&device).unwrap();
        let used = 3 * stat.segment_bytes;
        let offset = stat.segments_start + rng.below(used);
        device
            .corrupt_durable_bit(offset, rng.below(8) as u8)
            .unwrap();
        let stat_after = logstore::stat(&device);
        let store = match open(device) {
            Ok(store) => store,
            Err(error) => {
                assert!(error.contains("corrupt"), "seed {seed}: {error}");
                continue;
            }
        };
        let recovered = store.committed_through();
        assert!(recovered <= committed, "seed {seed}");
        if recovered < committed {
            let log_end = stat_after.unwrap().log_end;
            assert!(
                log_end.contains("crc") || log_end.contains("header"),
                "seed {seed}: {log_end}"
            );
        }
        txs.truncate(recovered as usize);
        compare_stores(&store, &reference(&txs), true)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// The newest checkpoint torn, truncated or rotten (as a write cut by a power failure
/// leaves it): open falls back to the older slot and replays the log from there, so
/// nothing committed is lost. A slot that claims a higher sequence number than it
/// holds does not mislead the choice either.
#[test]
fn damaged_newest_checkpoint_falls_back_to_the_older_one() {
    let slot_bytes = LogStoreConfig::small().checkpoint_slot_bytes;
    let slot_offset = |slot: usize| 4096 + slot as u64 * slot_bytes;
    // Each damage gets the slot's first 4 KiB and the checkpoint's length.
    type Damage = fn(&mut [u8], usize);
    let damages: [(&str, Damage); 5] = [
        ("bit flip", |raw, length| raw[length / 2] ^= 0x10),
        ("torn second half", |raw, length| {
            raw[length / 2..].fill(0xEE)
        }),
        ("zeroed", |raw, _| raw.fill(0)),
        ("length past the slot", |raw, _| {
            raw[6..10].copy_from_slice(&u32::MAX.to_le_bytes())
        }),
        ("truncated to its head", |raw, _| raw[18..].fill(0)),
    ];
    for (what, damage) in damages {
        let mut rng = Rng::new(11);
        let mut store = open(FaultyDevice::in_memory(
            DEVICE_BYTES,
            FaultConfig::default(),
        ))
        .unwrap();
        let mut txs = vec![setup_transaction()];
        store.submit(setup_transaction()).unwrap();
        random_workload(&mut store, &mut rng, &mut txs, 40).unwrap();
        let mut device = store.close().unwrap();
        let stat = logstore::stat(&device).unwrap();
        assert_eq!(stat.records_after_checkpoint, 0, "close checkpoints");
        let newest = stat.checkpoint_slot;
        let mut raw = vec![0u8; 4096];
        device.read_at(slot_offset(newest), &mut raw).unwrap();
        let length = 14 + u32::from_le_bytes(raw[6..10].try_into().unwrap()) as usize;
        assert!(length < raw.len(), "{what}: checkpoint of {length} bytes");
        damage(&mut raw, length);
        device.write_at(slot_offset(newest), &raw).unwrap();
        device.sync().unwrap();

        let stat = logstore::stat(&device).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(stat.checkpoint_slot, 1 - newest, "{what}");
        assert!(stat.records_after_checkpoint > 0, "{what}: replays the log");
        let store = open(device).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(store.committed_through(), txs.len() as u64, "{what}");
        compare_stores(&store, &reference(&txs), true).unwrap_or_else(|e| panic!("{what}: {e}"));

        // The older slot now claims a sequence number it does not verify with.
        let mut device = store.close().unwrap();
        let older = 1 - logstore::stat(&device).unwrap().checkpoint_slot;
        device.read_at(slot_offset(older), &mut raw).unwrap();
        raw[10..18].copy_from_slice(&u64::MAX.to_le_bytes());
        device.write_at(slot_offset(older), &raw).unwrap();
        device.sync().unwrap();
        let store = open(device).unwrap_or_else(|e| panic!("{what}, lying slot: {e}"));
        compare_stores(&store, &reference(&txs), true).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

/// Many tiny ops bring a checkpoint long before the log reaches its byte interval, so
/// a crash leaves little to replay.
#[test]
fn tiny_ops_bring_checkpoints() {
    let config = LogStoreConfig::small();
    let mut store = open(FaultyDevice::in_memory(
        DEVICE_BYTES,
        FaultConfig::default(),
    ))
    .unwrap();
    store.submit(setup_transaction()).unwrap();
    store.flush().unwrap();
    let before = store.stats();
    for index in 0..config.checkpoint_interval_ops {
        let mut tx = Transaction::new();
        tx.touch(pg(), object(index % 10));
        store.submit(tx).unwrap();
        if index % 100 == 99 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
    let after = store.stats();
    assert!(after.bytes_written - before.bytes_written < config.checkpoint_interval_bytes);
    assert_eq!(after.checkpoints, before.checkpoints + 1);
    let stat = logstore::stat(store.device()).unwrap();
    assert!(stat.records_after_checkpoint < 10, "{stat:?}");
}

/// Transient bit flips on read: reads return the right bytes or `Corrupt`.
#[test]
fn read_bit_flips_never_return_garbage() {
    let mut rng = Rng::new(7);
    let mut store = open(FaultyDevice::in_memory(
        DEVICE_BYTES,
        FaultConfig::default(),
    ))
    .unwrap();
    let mut txs = vec![setup_transaction()];
    store.submit(setup_transaction()).unwrap();
    random_workload(&mut store, &mut rng, &mut txs, 60).unwrap();
    store.flush().unwrap();
    let flips = FaultConfig {
        read_flip_one_in: 2,
        seed: 3,
        ..FaultConfig::default()
    };
    store.device_mut().set_config(flips);
    for _ in 0..5 {
        compare_stores(&store, &reference(&txs), true).unwrap();
    }
}

fn fill_object(
    store: &mut LogStore<FaultyDevice>,
    index: u64,
    length: usize,
) -> Result<u64, StoreError> {
    let mut tx = Transaction::new();
    tx.write(
        pg(),
        object(index),
        0,
        Bytes::from(vec![index as u8; length]),
    );
    store.submit(tx)
}

/// Filling the device ends in `NoSpace` without harm; deleting objects makes room.
#[test]
fn full_device_fails_with_no_space_and_keeps_data() {
    let mut store = open(FaultyDevice::in_memory(4 << 20, FaultConfig::default())).unwrap();
    store.submit(setup_transaction()).unwrap();
    let mut written = 0;
    let error = loop {
        match fill_object(&mut store, written, 48 * 1024) {
            Ok(_) => written += 1,
            Err(error) => break error,
        }
        store.flush().unwrap();
    };
    assert!(matches!(error, StoreError::NoSpace { .. }), "{error}");
    assert!(written > 20, "only {written} objects fit");
    let usage = store.usage();
    assert_eq!(usage.data_bytes, written * 48 * 1024);
    assert!(store.space().live_bytes <= store.space().capacity_bytes);
    let mut store = open(store.close().unwrap()).unwrap();
    for index in 0..written {
        let data = store.read(pg(), &object(index), 0, u64::MAX).unwrap();
        assert_eq!(
            data,
            Bytes::from(vec![index as u8; 48 * 1024]),
            "object {index}"
        );
    }
    for index in 0..written / 2 {
        let mut tx = Transaction::new();
        tx.remove(pg(), object(index));
        store.submit(tx).unwrap();
        store.flush().unwrap();
    }
    fill_object(&mut store, 1000, 48 * 1024).expect("room after deletes");
    store.flush().unwrap();
    assert!(logstore::fsck(store.device()).unwrap().is_clean());
}

/// The device reports ENOSPC mid-flush: the flush fails, nothing committed is lost.
#[test]
fn device_enospc_fails_the_flush_only() {
    let config = FaultConfig {
        enospc_at_bytes: Some(1 << 20),
        ..FaultConfig::default()
    };
    let mut store = open(FaultyDevice::in_memory(4 << 20, config)).unwrap();
    store.submit(setup_transaction()).unwrap();
    let mut index = 0;
    let committed = loop {
        fill_object(&mut store, index, 20_000).unwrap();
        index += 1;
        let committed = store.committed_through();
        if store.flush().is_err() {
            break committed;
        }
    };
    assert!(
        store.submit(setup_transaction()).is_err(),
        "a failed store refuses work"
    );
    let mut device = store.into_device();
    device.set_config(FaultConfig::default());
    device.crash().unwrap();
    let store = open(device).unwrap();
    assert_eq!(store.committed_through(), committed);
    for object_index in 0..committed - 1 {
        let data = store
            .read(pg(), &object(object_index), 0, u64::MAX)
            .unwrap();
        assert_eq!(data.len(), 20_000);
    }
}

/// Overwriting 4 KiB blocks of a few objects for many times the device size keeps
/// working (the cleaner reclaims space), each flush cleans a bounded amount, and the
/// data stays right across reopens.
#[test]
fn cleaner_keeps_a_long_overwrite_workload_running() {
    let config = LogStoreConfig::small();
    let mut store = open(FaultyDevice::in_memory(4 << 20, FaultConfig::default())).unwrap();
    let mut reference = MemStore::new();
    let mut rng = Rng::new(11);
    store.submit(setup_transaction()).unwrap();
    reference.submit(setup_transaction()).unwrap();
    let mut written_bytes = 0u64;
    let mut segments_freed = 0;
    for step in 0..3000 {
        let mut tx = Transaction::new();
        let offset = rng.below(16) * 4096;
        tx.write(pg(), object(rng.below(8)), offset, rng.bytes(4096));
        written_bytes += 4096;
        store
            .submit(tx.clone())
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        reference.submit(tx).unwrap();
        if step % 4 == 3 {
            store.flush().unwrap();
            assert!(store.stats().cleaned_bytes_last_flush <= config.clean_bytes_per_flush_max);
        }
        if step % 1000 == 999 {
            segments_freed += store.stats().segments_freed;
            store = open(store.close().unwrap()).unwrap();
            compare_stores(&store, &reference, false).unwrap();
        }
    }
    let space = store.space();
    assert!(
        written_bytes > 3 * space.capacity_bytes,
        "the workload wraps the device"
    );
    assert!(segments_freed > 10, "only {segments_freed} segments freed");
    compare_stores(&store, &reference, false).unwrap();
    store.check_consistency().unwrap();
}

/// Large objects written in one go and then overwritten in 4 KiB blocks: an overwrite
/// writes about 4 KiB (its record, the padding to a sector and the zeros to a page
/// boundary), not the object.
#[test]
fn small_overwrites_do_not_rewrite_objects() {
    let mut store = open(FaultyDevice::in_memory(8 << 20, FaultConfig::default())).unwrap();
    store.submit(setup_transaction()).unwrap();
    fill_object(&mut store, 0, 1 << 20).unwrap();
    store.flush().unwrap();
    let before = store.stats().bytes_written;
    let mut tx = Transaction::new();
    tx.write(pg(), object(0), 8192, Bytes::from(vec![9u8; 4096]));
    store.submit(tx).unwrap();
    store.flush().unwrap();
    let overwrite_bytes = store.stats().bytes_written - before;
    assert!(
        overwrite_bytes <= 3 * 4096,
        "a 4 KiB overwrite wrote {overwrite_bytes} bytes"
    );
    let data = store.read(pg(), &object(0), 4096, 3 * 4096).unwrap();
    assert_eq!(&data[..4096], &[0u8; 4096][..]);
    assert_eq!(&data[4096..8192], &[9u8; 4096][..]);
}

/// A store on a real file survives close and reopen in a new `LogStore`.
#[test]
fn file_device_round_trip() {
    let dir = std::env::temp_dir().join(format!("carmine-logstore-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = logstore::shard_device_path(&dir, 0);
    let device = FileDevice::create(&path, 4 << 20).unwrap();
    let mut store = LogStore::open(device, LogStoreConfig::small()).unwrap();
    let mut tx = setup_transaction();
    tx.write(pg(), object(1), 0, Bytes::from_static(b"persistent"));
    tx.write(pg(), object(2), 0, Bytes::from(vec![5u8; 200_000]));
    tx.omap_set(
        pg(),
        object(1),
        vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v"))],
    );
    store.submit(tx).unwrap();
    drop(store.close().unwrap());

    let store = LogStore::open(FileDevice::open(&path).unwrap(), LogStoreConfig::small()).unwrap();
    assert_eq!(
        &store.read(pg(), &object(1), 0, 100).unwrap()[..],
        b"persistent"
    );
    assert_eq!(
        store.read(pg(), &object(2), 0, u64::MAX).unwrap(),
        Bytes::from(vec![5u8; 200_000])
    );
    assert_eq!(
        store.omap_list(pg(), &object(1), None, 10).unwrap().len(),
        1
    );
    assert!(logstore::fsck(store.device()).unwrap().is_clean());
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Transactions are durable only after `flush`; unflushed ones vanish in a crash.
#[test]
fn unflushed_transactions_are_lost_whole() {
    let mut store = open(FaultyDevice::in_memory(4 << 20, crash_config(1))).unwrap();
    store.submit(setup_transaction()).unwrap();
    fill_object(&mut store, 0, 1000).unwrap();
    store.flush().unwrap();
    assert_eq!(store.committed_through(), 2);
    fill_object(&mut store, 1, 1000).unwrap();
    assert_eq!(
        store.read(pg(), &object(1), 0, 10).unwrap().len(),
        10,
        "readable before flush"
    );
    assert_eq!(store.committed_through(), 2);
    let mut device = store.into_device();
    device.crash().unwrap();
    let store = open(device).unwrap();
    assert_eq!(store.committed_through(), 2);
    assert!(!store.exists(pg(), &object(1)));
    assert!(store.exists(pg(), &object(0)));
}

#[test]
fn unformatted_or_foreign_devices() {
    assert!(logstore::fsck(&MemDevice::new(1 << 20)).is_err());
    let mut device = MemDevice::new(4 << 20);
    carmine_store::BlockDevice::write_at(&mut device, 0, b"not a store").unwrap();
    assert!(matches!(
        LogStore::open(device, LogStoreConfig::small()),
        Err(StoreError::Corrupt(_))
    ));
}

/// Xattr and omap values and keys arrive as slices of a message's receive buffer (or,
/// in replay, of the buffer a log segment was read into). A store that kept them as
/// they came would pin that whole buffer for as long as the attribute lives — the PG
/// log's thousands of entries per PG, every object's info xattr — which MemStore once
/// did to 356 MB. Both stores keep their own copy of small ones.
#[test]
fn stores_do_not_pin_the_buffers_attributes_arrive_in() {
    fn pinned_after_submit(store: &mut dyn ObjectStore) -> bool {
        let mut setup = Transaction::new();
        setup.create_collection(pg());
        setup.touch(pg(), object(1));
        store.submit(setup).unwrap();
        let receive_buffer = Bytes::from(vec![7u8; 128 * 1024]);
        let mut tx = Transaction::new();
        tx.set_xattr(pg(), object(1), "_".into(), receive_buffer.slice(0..200));
        tx.omap_set(
            pg(),
            object(1),
            vec![(
                receive_buffer.slice(200..235),
                receive_buffer.slice(300..400),
            )],
        );
        store.submit(tx).unwrap();
        store.flush().unwrap();
        // Unique again once the store holds no slice of it.
        receive_buffer.try_into_mut().is_err()
    }
    assert!(!pinned_after_submit(&mut MemStore::new()), "MemStore");
    let mut log_store =
        LogStore::open(MemDevice::new(DEVICE_BYTES), LogStoreConfig::small()).unwrap();
    assert!(!pinned_after_submit(&mut log_store), "LogStore");
}
