//! The OSD core alone: 4 KiB write_full ops through a shard's PG code with no network,
//! against the store alone (the same 4 KiB writes as bare MemStore transactions) in the
//! same run. The ratio is what the PG layer (op execution, object info, PG log,
//! dedup index, stats) costs per write.
//!
//! `cargo run --release -p carmine-osd --example direct_bench -- [OPS]`

use bytes::Bytes;
use carmine_osd::DirectClient;
use carmine_proto::OpCode;
use carmine_store::{CollectionId, MemStore, ObjectStore, Transaction};
use carmine_types::{ObjectId, PgId};
use std::time::Instant;

fn main() {
    let ops: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let data = Bytes::from(vec![0x5a; 4096]);
    let names: Vec<String> = (0..1024).map(|i| format!("object-{i}")).collect();

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
    let store_rate = ops as f64 / started.elapsed().as_secs_f64();

    let mut direct = DirectClient::new(MemStore::new(), 64);
    let started = Instant::now();
    for i in 0..ops {
        let op = OpCode::WriteFull { data: data.clone() };
        direct
            .operate(&names[i % names.len()], vec![op])
            .expect("write");
    }
    let osd_rate = ops as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    for i in 0..ops {
        let op = OpCode::Read {
            offset: 0,
            length: 0,
        };
        direct
            .operate(&names[i % names.len()], vec![op])
            .expect("read");
    }
    let read_rate = ops as f64 / started.elapsed().as_secs_f64();
    println!("store alone:     {store_rate:>10.0} 4 KiB writes/s");
    println!("OSD core writes: {osd_rate:>10.0} 4 KiB write_full/s ({:.2}x the store alone, {:.2} us/op)", osd_rate / store_rate, 1e6 / osd_rate);
    println!(
        "OSD core reads:  {read_rate:>10.0} 4 KiB reads/s ({:.2} us/op)",
        1e6 / read_rate
    );
}
