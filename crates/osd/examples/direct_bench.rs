//! The OSD core alone: 4 KiB write_full ops through a shard's PG code with no network,
//! against the store alone (the same 4 KiB writes as bare MemStore transactions) in the
//! same run. The ratio is what the PG layer (op execution, object info, PG log,
//! dedup index, stats) costs per write.
//!
//! `cargo run --release -p carmine-osd --example direct_bench -- [OPS] [OBJECTS] [PHASES] [PGS]`
//!
//! OPS (200,000) ops per phase over OBJECTS (1,024) objects named like a block image's
//! (a long shared prefix, as RBD data objects have). PHASES (`store,write,read`) picks
//! which phases run, so that `valgrind --tool=callgrind` can count one of them alone:
//! instructions per write = (Ir at 2N ops − Ir at N ops) / N with PHASES `write`.
//! The `memory` phase (not run by default) writes OBJECTS distinct 4 KiB objects into a
//! fresh shard and prints the resident memory each one added (Linux `VmRSS`).
//! PGS (64) is the pool's PG count; with few PGs the PG logs fill up (3,000 entries)
//! early, so the writes measured pay for trimming the log as a long-running OSD does.

/// The allocator the `carmine` binary runs on (`carmine_rt::malloc`), so that the counts
/// here are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bytes::Bytes;
use carmine_osd::DirectClient;
use carmine_proto::OpCode;
use carmine_store::{CollectionId, MemStore, ObjectStore, Transaction};
use carmine_types::{ObjectId, PgId};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let ops: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let objects: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let phases = args.next().unwrap_or_else(|| "store,write,read".into());
    let pg_count: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let data = Bytes::from(vec![0x5a; 4096]);
    let names: Vec<String> = (0..objects.max(1))
        .map(|i| format!("rbd_data.10226b8b4567.{i:016x}"))
        .collect();

    if phases.contains("store") {
        let rate = store_writes(ops, &names, &data);
        println!("store alone:     {rate:>10.0} 4 KiB writes/s");
    }
    let mut direct = DirectClient::new(MemStore::new(), pg_count.max(1));
    if phases.contains("write") {
        let started = Instant::now();
        for i in 0..ops {
            let op = OpCode::WriteFull { data: data.clone() };
            direct
                .operate(&names[i % names.len()], vec![op])
                .expect("write");
        }
        let rate = ops as f64 / started.elapsed().as_secs_f64();
        println!(
            "OSD core writes: {rate:>10.0} 4 KiB write_full/s ({:.2} us/op)",
            1e6 / rate
        );
    }
    if phases.contains("memory") {
        let mut fresh = DirectClient::new(MemStore::new(), pg_count.max(1));
        let rss_before = rss_bytes();
        for name in &names {
            let op = OpCode::WriteFull { data: data.clone() };
            fresh.operate(name, vec![op]).expect("write");
        }
        let added = rss_bytes().saturating_sub(rss_before);
        println!(
            "memory:          {:>10.0} bytes resident per 4 KiB object ({} objects)",
            added as f64 / names.len() as f64,
            names.len()
        );
    }
    if phases.contains("read") {
        let started = Instant::now();
        for i in 0..ops {
            let op = OpCode::Read {
                offset: 0,
                length: 0,
            };
            // Reads of objects the write phase did not run fail fast; still measured.
            let _ = direct.operate(&names[i % names.len()], vec![op]);
        }
        let rate = ops as f64 / started.elapsed().as_secs_f64();
        println!(
            "OSD core reads:  {rate:>10.0} 4 KiB reads/s ({:.2} us/op)",
            1e6 / rate
        );
    }
}

/// The same writes as bare MemStore transactions: the same-run baseline.
fn store_writes(ops: usize, names: &[String], data: &Bytes) -> f64 {
    let mut store = MemStore::new();
    let coll = CollectionId::Pg(PgId::new(1, 0));
    let mut tx = Transaction::new();
    tx.create_collection(coll);
    store.submit(tx).expect("create");
    let started = Instant::now();
    for i in 0..ops {
        let mut tx = Transaction::new();
        tx.write(
            coll,
            ObjectId::head(names[i % names.len()].clone()),
            0,
            data.clone(),
        );
        store.submit(tx).expect("write");
    }
    ops as f64 / started.elapsed().as_secs_f64()
}

/// The process's resident memory (`VmRSS`), or 0 where `/proc` does not say.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}
