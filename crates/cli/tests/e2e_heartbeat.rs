//! Heartbeat failure detection with real processes. An OSD stopped with SIGSTOP keeps
//! its TCP sessions open (the kernel still holds them), so the monitor's session-based
//! backstop cannot see it within the test's bounds (its grace here is a minute). Only
//! its peers' heartbeats can: they report it and the monitor marks it down within the
//! heartbeat grace plus a bound. Continued with SIGCONT, the OSD sees itself marked
//! down in the newer maps and boots again by itself. The config keys the daemons read
//! are checked on the way in.

mod common;

use common::{wait_until, DevCluster};
use std::time::{Duration, Instant};

const HEARTBEAT_GRACE_SECONDS: u64 = 2;
/// The session backstop must not explain a quick detection: a session-less OSD is
/// marked down only after this (and a stopped OSD's sessions last 10 s of keepalives).
const SESSION_GRACE_SECONDS: u64 = 60;
/// Slack for a ping round, the monitor's tick and the CLI polling on a loaded machine;
/// grace + slack stays below the messenger's 10 s keepalive timeout.
const DETECTION_SLACK: Duration = Duration::from_secs(5);

fn log(cluster: &DevCluster, name: &str) -> String {
    std::fs::read_to_string(cluster.path(&format!("log/{name}.log"))).unwrap_or_default()
}

#[test]
fn a_stopped_osd_is_reported_down_by_its_peers_and_boots_again_when_continued() {
    let grace = HEARTBEAT_GRACE_SECONDS.to_string();
    let session_grace = SESSION_GRACE_SECONDS.to_string();
    let cluster = DevCluster::start(
        "heartbeat",
        &[
            "--osds",
            "3",
            "--osd-heartbeat-grace-seconds",
            &grace,
            "--osd-down-grace-seconds",
            &session_grace,
        ],
    );
    // Known keys are checked; a good one reaches the OSDs with the map.
    let error = cluster.fails(&["config", "set", "osd_heartbeat_grace", "soon"]);
    assert!(error.contains("osd_heartbeat_grace"), "{error}");
    let error = cluster.fails(&["config", "set", "mon_osd_min_down_reporters", "0"]);
    assert!(error.contains("mon_osd_min_down_reporters"), "{error}");
    cluster.ok(&["config", "set", "osd_heartbeat_interval", "0.5"]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "8"]);
    // Let every OSD see the map with the pool and start judging its peers.
    std::thread::sleep(Duration::from_secs(1));

    cluster.signal("osd.2", "STOP");
    let stopped = Instant::now();
    let limit = Duration::from_secs(HEARTBEAT_GRACE_SECONDS) + DETECTION_SLACK;
    wait_until("osd.2 marked down while stopped", limit, || {
        !cluster.osd_up(2)
    });
    eprintln!("osd.2 marked down {:?} after SIGSTOP", stopped.elapsed());
    let mon_log = log(&cluster, "mon.0");
    assert!(
        mon_log.contains("marking osd.2 down: reported failed by osd."),
        "the peers' reports marked it down:\n{mon_log}"
    );
    assert!(
        cluster.osd_up(0) && cluster.osd_up(1),
        "the survivors stay up"
    );

    cluster.signal("osd.2", "CONT");
    let took = wait_until("osd.2 up again by itself", Duration::from_secs(20), || {
        cluster.osd_up(2)
    });
    eprintln!("osd.2 up again {took:?} after SIGCONT");
    let osd_log = log(&cluster, "osd.2");
    assert!(
        osd_log.contains("marks us down; booting again"),
        "osd.2 asserted itself:\n{osd_log}"
    );
    // Back for good: its peers withdraw nothing more and keep it up.
    std::thread::sleep(Duration::from_secs(HEARTBEAT_GRACE_SECONDS + 1));
    assert!(cluster.osd_up(2), "osd.2 stays up once continued");
}
