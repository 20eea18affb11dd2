//! A dev cluster started with the real `carmine` binary, stopped (SIGKILL) on drop so a
//! failing test leaves no daemons behind.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct DevCluster {
    pub dir: PathBuf,
    pub conf: PathBuf,
}

pub fn carmine() -> Command {
    Command::new(env!("CARGO_BIN_EXE_carmine"))
}

impl DevCluster {
    /// Runs `carmine vstart` with `extra` arguments in a fresh directory.
    pub fn start(name: &str, extra: &[&str]) -> DevCluster {
        let dir = std::env::temp_dir().join(format!("carmine-e2e-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cluster_dir = dir.join("dev-cluster");
        let output = carmine()
            .arg("vstart")
            .arg("--dir")
            .arg(&cluster_dir)
            .args(extra)
            .output()
            .expect("run carmine vstart");
        let cluster = DevCluster {
            conf: cluster_dir.join("carmine.toml"),
            dir: cluster_dir,
        };
        assert!(
            output.status.success(),
            "vstart failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        cluster
    }

    /// Runs a `carmine` subcommand against this cluster.
    pub fn run(&self, args: &[&str]) -> Output {
        carmine()
            .arg("--conf")
            .arg(&self.conf)
            .args(args)
            .output()
            .expect("run carmine")
    }

    /// Runs a subcommand that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "carmine {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs a subcommand that must fail; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            !output.status.success(),
            "carmine {args:?} should have failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(stderr.lines().count(), 1, "errors are one line: {stderr}");
        stderr
    }

    pub fn mon_addrs(&self) -> Vec<std::net::SocketAddr> {
        let text = std::fs::read_to_string(&self.conf).expect("read conf");
        let line = text
            .lines()
            .find(|l| l.starts_with("mon_addrs"))
            .expect("mon_addrs in conf");
        line.split('"')
            .filter_map(|part| part.parse().ok())
            .collect()
    }

    /// Whether the newest map shows OSD `id` up.
    pub fn osd_up(&self, id: u64) -> bool {
        let dump = self.ok(&["--format", "json", "osd", "dump"]);
        let dump: serde_json::Value = serde_json::from_str(&dump).expect("JSON output");
        dump["osds"]
            .as_array()
            .expect("osds")
            .iter()
            .find(|o| o["osd"] == id)
            .map(|o| o["up"] == true)
            .expect("the OSD is in the dump")
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to daemon `name` (`osd.2`) by its pid file.
    pub fn signal(&self, name: &str, signal: &str) {
        let pid = std::fs::read_to_string(self.path(&format!("run/{name}.pid"))).expect("pid file");
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.trim())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {name}");
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        let _ = carmine()
            .args(["vstop", "--kill", "--dir"])
            .arg(&self.dir)
            .output();
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}

pub fn write_file(path: &Path, data: &[u8]) {
    std::fs::write(path, data).expect("write test file");
}

/// Polls `done` every 100 ms until it holds, failing the test after `limit`; returns how
/// long it took.
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    started.elapsed()
}

/// Polls `carmine status` until every PG is active+clean and every OSD is up, failing
/// the test with the last status after `within`.
pub fn wait_clean(cluster: &DevCluster, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let status = cluster.ok(&["--format", "json", "status"]);
        let status: serde_json::Value = serde_json::from_str(&status).unwrap();
        let states = &status["pgmap"]["pgs_by_state"];
        let clean = states
            .as_array()
            .is_some_and(|s| s.len() == 1 && s[0]["state_name"] == "active+clean")
            && status["osdmap"]["num_up_osds"] == status["osdmap"]["num_osds"];
        if clean {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not clean in {within:?}: {status}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A current-thread runtime and a client of `cluster` connected on it.
pub fn connect_client(cluster: &DevCluster) -> (tokio::runtime::Runtime, carmine_client::Client) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let config = carmine_client::ClientConfig::new(cluster.mon_addrs());
    let client = runtime
        .block_on(carmine_client::Client::connect(config))
        .expect("connect");
    (runtime, client)
}
