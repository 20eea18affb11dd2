//! End to end with real processes: three monitors replicating the map through Raft.
//! Killing the leader elects another; pools are still created and objects still
//! written and read; the killed monitor restarts from its store and rejoins the quorum.

mod common;

use carmine_client::{Client, ClientConfig};
use carmine_proto::{ClusterStatus, Command, CommandOutput};
use common::{write_file, DevCluster};
use std::time::Duration;

fn status(cluster: &DevCluster) -> ClusterStatus {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let conf = std::fs::read_to_string(&cluster.conf).unwrap();
        let mon_addrs: Vec<std::net::SocketAddr> = conf
            .split('"')
            .filter_map(|part| part.parse().ok())
            .collect();
        let client = Client::connect(ClientConfig::new(mon_addrs)).await.unwrap();
        match client.command(Command::Status).await.unwrap() {
            CommandOutput::Status(status) => status,
            other => panic!("status answered {other:?}"),
        }
    })
}

/// The status once the quorum has `members` monitors, waiting at most 10 s: the leader
/// counts a peer in quorum for two election timeouts after it last heard from it.
fn status_with_quorum_of(cluster: &DevCluster, members: usize, what: &str) -> ClusterStatus {
    let mut latest = status(cluster);
    common::wait_until(what, Duration::from_secs(10), || {
        latest = status(cluster);
        latest.mon_quorum.len() == members
    });
    latest
}

fn put_and_get(cluster: &DevCluster, pool: &str, name: &str, data: &[u8]) {
    let input = cluster.path(&format!("{name}.in"));
    let output = cluster.path(&format!("{name}.out"));
    write_file(&input, data);
    cluster.ok(&["obj", "put", pool, name, input.to_str().unwrap()]);
    cluster.ok(&["obj", "get", pool, name, output.to_str().unwrap()]);
    assert_eq!(std::fs::read(&output).unwrap(), data);
}

#[test]
fn the_cluster_survives_the_loss_of_the_monitor_leader() {
    let cluster = DevCluster::start("mons", &["--mons", "3", "--osds", "3"]);
    let dir = cluster.dir.to_str().unwrap().to_string();
    let before = status(&cluster);
    assert_eq!(before.mon_count, 3);
    assert_eq!(before.mon_quorum, vec![0, 1, 2]);
    let leader = before.mon_leader.expect("a leader after vstart");

    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "8"]);
    put_and_get(&cluster, "rbd", "first", b"written under the first leader");

    let name = format!("mon.{leader}");
    cluster.ok(&["vstop", "--only", &name, "--kill", "--dir", &dir]);
    cluster.ok(&["pool", "create", "after", "--size", "3", "--pg-num", "8"]);
    put_and_get(
        &cluster,
        "after",
        "second",
        b"written under the next leader",
    );
    put_and_get(&cluster, "rbd", "third", b"the old pool still works");
    // The new leader counts a peer in quorum for two election timeouts after it last
    // heard from it, so the killed monitor may still show for a moment.
    let during = status_with_quorum_of(&cluster, 2, "the killed monitor to leave the quorum");
    let new_leader = during.mon_leader.expect("a new leader");
    assert_ne!(new_leader, leader);
    assert_eq!(during.mon_quorum.len(), 2, "{:?}", during.mon_quorum);
    assert!(during.epoch > before.epoch);

    cluster.ok(&["vstart", "--only", &name, "--dir", &dir]);
    let after = status_with_quorum_of(&cluster, 3, "the restarted monitor to rejoin");
    assert_eq!(after.mon_quorum, vec![0, 1, 2]);
    let pools = cluster.ok(&["pool", "ls"]);
    assert!(pools.contains("rbd") && pools.contains("after"), "{pools}");
    let output = cluster.path("first.again");
    cluster.ok(&["obj", "get", "rbd", "first", output.to_str().unwrap()]);
    assert_eq!(
        std::fs::read(&output).unwrap(),
        b"written under the first leader"
    );
}
