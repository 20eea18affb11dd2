//! End to end with real processes: a monitor and three OSDs on loopback, a size-3
//! pool, 1,000 objects of random sizes (0 B – 1 MiB, some with xattrs and omap) written
//! and read back byte-exact, replicas compared through reads from each named OSD,
//! listing, removal of half, listing again.

mod common;

use bytes::Bytes;
use carmine_client::{Client, ClientConfig};
use carmine_proto::{OpCode, OpOutput};
use common::DevCluster;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const OBJECT_COUNT: usize = 1000;
const OBJECT_BYTES_MAX: usize = 1024 * 1024;
const IN_FLIGHT: usize = 16;

#[derive(Clone)]
struct Expected {
    data: Bytes,
    xattrs: BTreeMap<String, Bytes>,
    omap: Vec<(Bytes, Bytes)>,
}

fn make_objects(seed: u64) -> BTreeMap<String, Expected> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..OBJECT_COUNT)
        .map(|i| {
            let size = match i % 10 {
                0 => 0,
                1 => OBJECT_BYTES_MAX,
                _ => rng.gen_range(0..=OBJECT_BYTES_MAX),
            };
            let mut data = vec![0u8; size];
            rng.fill(&mut data[..]);
            let mut xattrs = BTreeMap::new();
            let mut omap = Vec::new();
            if i % 3 == 0 {
                xattrs.insert("owner".to_string(), Bytes::from(format!("user-{i}")));
                xattrs.insert("kind".to_string(), Bytes::from_static(b"test"));
            }
            if i % 4 == 0 {
                for k in 0..(i % 7 + 1) {
                    omap.push((
                        Bytes::from(format!("key-{k:03}")),
                        Bytes::from(format!("v{i}.{k}")),
                    ));
                }
            }
            (
                format!("obj-{i:04}"),
                Expected {
                    data: Bytes::from(data),
                    xattrs,
                    omap,
                },
            )
        })
        .collect()
}

fn write_ops(expected: &Expected) -> Vec<OpCode> {
    let mut ops = vec![OpCode::WriteFull {
        data: expected.data.clone(),
    }];
    for (name, value) in &expected.xattrs {
        ops.push(OpCode::SetXattr {
            name: name.clone(),
            value: value.clone(),
        });
    }
    if !expected.omap.is_empty() {
        ops.push(OpCode::OmapSet {
            entries: expected.omap.clone(),
        });
    }
    ops
}

async fn check_object(client: &Client, name: &str, expected: &Expected) {
    let data = client.read("data", name, 0, 0).await.expect("read");
    assert_eq!(data.len(), expected.data.len(), "{name}: size");
    assert!(data == expected.data, "{name}: content differs");
    let xattrs = client.getxattrs("data", name).await.expect("xattrs");
    assert_eq!(xattrs, expected.xattrs, "{name}: xattrs");
    let omap = client.omap_list("data", name).await.expect("omap");
    assert_eq!(omap, expected.omap, "{name}: omap");
}

/// Reads object `name` from each OSD of its acting set and checks the copies agree.
async fn check_replicas(client: &Client, name: &str, expected: &Expected) {
    let map = client.map();
    let pool = client.pool_id("data").unwrap();
    let pg = map.object_to_pg(pool, name).unwrap();
    let acting = map.pg_mapping(pg).unwrap().acting;
    assert_eq!(acting.len(), 3, "{name} has 3 replicas");
    for osd in acting {
        let ops = vec![
            OpCode::Read {
                offset: 0,
                length: 0,
            },
            OpCode::GetXattrs,
        ];
        let reply = client
            .operate_on_osd("data", name, ops, osd)
            .await
            .expect("debug read");
        match &reply.outputs[..] {
            [OpOutput::Data(data), OpOutput::Xattrs(xattrs)] => {
                assert!(*data == expected.data, "{name}: copy on {osd} differs");
                assert_eq!(xattrs, &expected.xattrs, "{name}: xattrs on {osd} differ");
            }
            other => panic!("unexpected outputs {other:?}"),
        }
    }
}

async fn for_each_concurrently<F, Fut>(names: Vec<String>, work: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for name in names {
        while set.len() >= IN_FLIGHT {
            set.join_next().await.unwrap().expect("task");
        }
        set.spawn(work(name));
    }
    while let Some(result) = set.join_next().await {
        result.expect("task");
    }
}

#[test]
fn thousand_objects_round_trip_replicate_list_and_remove() {
    let cluster = DevCluster::start("objects", &[]);
    cluster.ok(&["pool", "create", "data", "--size", "3", "--pg-num", "32"]);
    let objects = Arc::new(make_objects(42));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = Client::connect(ClientConfig::new(cluster.mon_addrs()))
            .await
            .unwrap();
        client.wait_for_epoch(client.map().epoch).await.unwrap();
        let names: Vec<String> = objects.keys().cloned().collect();

        let (c, o) = (client.clone(), objects.clone());
        for_each_concurrently(names.clone(), move |name| {
            let (c, o) = (c.clone(), o.clone());
            async move {
                c.operate("data", &name, write_ops(&o[&name]))
                    .await
                    .expect("write");
            }
        })
        .await;

        let (c, o) = (client.clone(), objects.clone());
        for_each_concurrently(names.clone(), move |name| {
            let (c, o) = (c.clone(), o.clone());
            async move { check_object(&c, &name, &o[&name]).await }
        })
        .await;

        for name in names.iter().step_by(25) {
            check_replicas(&client, name, &objects[name]).await;
        }

        let listed: BTreeSet<String> = client.list("data").await.unwrap().into_iter().collect();
        assert_eq!(listed, names.iter().cloned().collect::<BTreeSet<_>>());

        let (removed, kept): (Vec<_>, Vec<_>) = names
            .iter()
            .cloned()
            .enumerate()
            .partition(|(i, _)| i % 2 == 0);
        let removed: Vec<String> = removed.into_iter().map(|(_, n)| n).collect();
        let kept: BTreeSet<String> = kept.into_iter().map(|(_, n)| n).collect();
        let c = client.clone();
        for_each_concurrently(removed.clone(), move |name| {
            let c = c.clone();
            async move { c.remove("data", &name).await.expect("remove") }
        })
        .await;
        let listed: BTreeSet<String> = client.list("data").await.unwrap().into_iter().collect();
        assert_eq!(listed, kept);
        for name in removed.iter().take(20) {
            let error = client.stat("data", name).await.unwrap_err();
            assert!(error.is_not_found(), "{name}: {error}");
        }
        for name in kept.iter().step_by(50) {
            check_object(&client, name, &objects[name]).await;
        }
    });
    let status = cluster.ok(&["--format", "json", "status"]);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["osdmap"]["num_up_osds"], 3);
}
