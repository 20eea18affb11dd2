//! End to end with sharded OSDs: three OSD processes with 2 shards each, and a mixed
//! cluster whose OSDs run 1, 2 and 3 shards. Objects are written through a size-3
//! pool, read back byte-exact from the primary and from every replica (replication
//! crosses OSDs with different shard counts), and listed; then the OSDs' own counters,
//! as the monitor reports them in `osd df`, show the steady workload reached every
//! OSD and that no op arrived at a shard that does not own its PG.

mod common;

use bytes::Bytes;
use carmine_proto::{OpCode, OpOutput};
use common::DevCluster;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const OBJECT_COUNT: usize = 300;
/// How long the OSDs' counters may take to reach the monitor.
const STATS_TIMEOUT: Duration = Duration::from_secs(20);

fn content(i: usize) -> Bytes {
    let length = 1 + (i * 7919) % 20_000;
    Bytes::from((0..length).map(|j| (i * 31 + j) as u8).collect::<Vec<u8>>())
}

fn round_trip(cluster: &DevCluster) {
    cluster.ok(&["pool", "create", "data", "--size", "3", "--pg-num", "32"]);
    let (runtime, client) = common::connect_client(cluster);
    runtime.block_on(async {
        let names: Vec<String> = (0..OBJECT_COUNT).map(|i| format!("sharded-{i}")).collect();
        let mut writes = tokio::task::JoinSet::new();
        for (i, name) in names.iter().enumerate() {
            let (client, name) = (client.clone(), name.clone());
            writes.spawn(async move { client.write_full("data", &name, content(i)).await });
            if writes.len() >= 16 {
                writes.join_next().await.unwrap().unwrap().expect("write");
            }
        }
        while let Some(result) = writes.join_next().await {
            result.unwrap().expect("write");
        }
        let map = client.map();
        let pool = client.pool_id("data").unwrap();
        for (i, name) in names.iter().enumerate() {
            let data = client.read("data", name, 0, 0).await.expect("read");
            assert!(data == content(i), "{name} reads back byte-exact");
            let pg = map.object_to_pg(pool, name).unwrap();
            for osd in map.pg_mapping(pg).unwrap().acting {
                let read = vec![OpCode::Read {
                    offset: 0,
                    length: 0,
                }];
                let reply = client
                    .operate_on_osd("data", name, read, osd)
                    .await
                    .expect("replica read");
                match &reply.outputs[..] {
                    [OpOutput::Data(data)] => {
                        assert!(*data == content(i), "{name}: copy on {osd} differs")
                    }
                    other => panic!("unexpected outputs {other:?}"),
                }
            }
        }
        let listed: BTreeSet<String> = client.list("data").await.unwrap().into_iter().collect();
        assert_eq!(listed, names.iter().cloned().collect());
    });
}

/// Waits until every OSD has reported ops to the monitor; returns `osd df`'s nodes.
fn osd_counters(cluster: &DevCluster) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + STATS_TIMEOUT;
    loop {
        let df: serde_json::Value =
            serde_json::from_str(&cluster.ok(&["--format", "json", "osd", "df"])).unwrap();
        let nodes = df["nodes"].as_array().unwrap().clone();
        if nodes.iter().all(|n| n["ops"].as_u64().unwrap_or(0) > 0) {
            return nodes;
        }
        assert!(
            Instant::now() < deadline,
            "not every OSD reported ops: {nodes:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn check_counters(cluster: &DevCluster, shards: &[u64]) {
    let nodes = osd_counters(cluster);
    assert_eq!(nodes.len(), shards.len());
    for (node, expected) in nodes.iter().zip(shards) {
        assert_eq!(node["shards"].as_u64(), Some(*expected), "{node}");
        assert_eq!(
            node["wrong_shard_ops"].as_u64(),
            Some(0),
            "a steady workload never reaches the wrong shard: {node}"
        );
    }
}

#[test]
fn two_shards_per_osd() {
    let cluster = DevCluster::start("shards2", &["--shards", "2"]);
    round_trip(&cluster);
    check_counters(&cluster, &[2, 2, 2]);
}

#[test]
fn osds_with_different_shard_counts_in_one_cluster() {
    let cluster = DevCluster::start("shards-mixed", &["--shards-per-osd", "1,2,3"]);
    round_trip(&cluster);
    check_counters(&cluster, &[1, 2, 3]);
}
