//! Chaos with real processes: four OSDs, a writer of versioned objects running the
//! whole time, OSDs killed with SIGKILL and restarted (MemStore: they come back empty
//! and must be backfilled), an OSD marked out and back in, an OSD frozen with SIGSTOP
//! until the monitor marks it down, then continued (a partition from everyone that heals: its
//! peers report it, the monitor marks it down, and it comes back to find itself down
//! and boots again, with whatever it held in flight); then every object must hold
//! exactly its last acknowledged version (or a later attempt that was not
//! acknowledged), replicas must match, and every PG must be active+clean.
//!
//! The default run (in `cargo test`) kills osd.1, osd.3, osd.0, osd.2, osd.1, marks
//! osd.2 out and in, and freezes osd.3. A longer soak is the same test with more rounds:
//! `CARMINE_CHAOS_ROUNDS=60 CARMINE_CHAOS_SEED=7 cargo test --release -p carmine-cli
//! --test e2e_chaos -- --nocapture`: each extra round picks an OSD with a seeded PRNG
//! and kills and restarts it, marks it out and back in, or freezes it.

mod common;

use bytes::Bytes;
use carmine_client::{Client, ClientConfig};
use common::{carmine, wait_clean, wait_until, DevCluster};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OBJECTS: usize = 24;

/// Per object: the last acknowledged version, and versions attempted after it.
type Ledger = Arc<Mutex<BTreeMap<String, (u64, Vec<u64>)>>>;

fn content(name: &str, version: u64) -> Bytes {
    Bytes::from(format!(
        "{name} version {version} {}",
        "z".repeat((version % 7) as usize * 300)
    ))
}

async fn writer(client: Client, ledger: Ledger, stop: Arc<AtomicBool>) {
    let mut version = 0u64;
    while !stop.load(Ordering::Relaxed) {
        version += 1;
        let name = format!("chaos-{}", version as usize % OBJECTS);
        ledger
            .lock()
            .unwrap()
            .entry(name.clone())
            .or_default()
            .1
            .push(version);
        let result = client
            .write_full("rbd", &name, content(&name, version))
            .await;
        if result.is_ok() {
            let mut ledger = ledger.lock().unwrap();
            let entry = ledger.get_mut(&name).unwrap();
            entry.0 = version;
            entry.1.retain(|&v| v > version);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL the OSD, restart it 1.5 s later (MemStore: it comes back empty).
    Kill(u32),
    /// Mark the OSD out, and back in 1.5 s later.
    OutIn(u32),
    /// SIGSTOP the OSD until the monitor marks it down (its peers' heartbeats, 3 s grace
    /// in `vstart`), then SIGCONT.
    Freeze(u32),
}

/// The most a frozen OSD may take to be marked down: the heartbeat grace and the
/// monitor's reaction, with room for a loaded machine (a stopped OSD's sessions also
/// time out after 10 s of keepalives, which marks it down by the session grace).
const FREEZE_DETECTION_MAX: Duration = Duration::from_secs(30);

/// The fixed rounds of the default run, then `CARMINE_CHAOS_ROUNDS` minus 7 more drawn
/// from `CARMINE_CHAOS_SEED` (a soak; see the module doc).
fn chaos_rounds() -> Vec<Fault> {
    let mut rounds = vec![
        Fault::Kill(1),
        Fault::Kill(3),
        Fault::Kill(0),
        Fault::Kill(2),
        Fault::Kill(1),
        Fault::OutIn(2),
        Fault::Freeze(3),
    ];
    let total: usize = std::env::var("CARMINE_CHAOS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(rounds.len());
    let mut state: u64 = std::env::var("CARMINE_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    while rounds.len() < total {
        // splitmix64: a fixed sequence per seed, so a failing soak can be rerun.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let osd = (z % 4) as u32;
        rounds.push(match (z >> 8) % 4 {
            0 => Fault::OutIn(osd),
            1 => Fault::Freeze(osd),
            _ => Fault::Kill(osd),
        });
    }
    rounds
}

#[test]
fn writes_survive_kills_restarts_out_in_and_freezes() {
    let cluster = DevCluster::start("chaos", &["--osds", "4", "--osd-down-grace-seconds", "1"]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "32"]);
    let dir = cluster.dir.to_str().unwrap().to_string();
    let ledger: Ledger = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut config = ClientConfig::new(cluster.mon_addrs());
    config.op_timeout = Duration::from_secs(20);
    let client = runtime.block_on(Client::connect(config)).unwrap();
    let task = runtime.spawn(writer(client.clone(), ledger.clone(), stop.clone()));

    for (round, fault) in chaos_rounds().into_iter().enumerate() {
        std::thread::sleep(Duration::from_millis(700));
        match fault {
            Fault::Kill(osd) => {
                let name = format!("osd.{osd}");
                let killed = carmine()
                    .args(["vstop", "--only", &name, "--kill", "--dir", &dir])
                    .output()
                    .unwrap();
                assert!(killed.status.success(), "round {round}");
                std::thread::sleep(Duration::from_millis(1500));
                cluster.ok(&["vstart", "--only", &name, "--dir", &dir]);
            }
            Fault::OutIn(osd) => {
                let id = osd.to_string();
                cluster.ok(&["osd", "out", &id]);
                std::thread::sleep(Duration::from_millis(1500));
                cluster.ok(&["osd", "in", &id]);
            }
            Fault::Freeze(osd) => {
                let name = format!("osd.{osd}");
                cluster.signal(&name, "STOP");
                let id = u64::from(osd);
                wait_until(
                    &format!("{name} marked down while frozen"),
                    FREEZE_DETECTION_MAX,
                    || !cluster.osd_up(id),
                );
                cluster.signal(&name, "CONT");
            }
        }
        eprintln!("chaos round {round}: {fault:?}");
        wait_clean(&cluster, Duration::from_secs(60));
    }

    stop.store(true, Ordering::Relaxed);
    runtime.block_on(task).unwrap();
    wait_clean(&cluster, Duration::from_secs(60));
    let ledger = ledger.lock().unwrap().clone();
    let acked: u64 = ledger.values().filter(|(v, _)| *v > 0).count() as u64;
    assert!(
        acked as usize >= OBJECTS / 2,
        "too few acknowledged writes: {ledger:?}"
    );
    runtime.block_on(async {
        for (name, (last, later)) in &ledger {
            let data = match client.read("rbd", name, 0, 0).await {
                Ok(data) => data,
                Err(e) if e.is_not_found() && *last == 0 => continue,
                Err(e) => panic!("{name}: {e}"),
            };
            let allowed: Vec<u64> = std::iter::once(*last)
                .chain(later.iter().copied())
                .collect();
            assert!(
                allowed.iter().any(|&v| v > 0 && data == content(name, v)),
                "{name}: holds {:?}..., last acknowledged version {last}, later attempts {later:?}",
                String::from_utf8_lossy(&data[..data.len().min(40)])
            );
            // Every replica holds the same bytes.
            let map = client.map();
            let pg = map
                .object_to_pg(client.pool_id("rbd").unwrap(), name)
                .unwrap();
            for osd in map.pg_mapping(pg).unwrap().acting {
                let ops = vec![carmine_proto::OpCode::Read {
                    offset: 0,
                    length: 0,
                }];
                let reply = client.operate_on_osd("rbd", name, ops, osd).await.unwrap();
                assert_eq!(
                    reply.outputs,
                    vec![carmine_proto::OpOutput::Data(data.clone())],
                    "{name} on {osd}"
                );
            }
        }
    });
}
