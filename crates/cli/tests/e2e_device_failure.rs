//! A real OSD process on a device that fails its writes stops, and nothing acknowledged
//! is lost: three OSDs on LogStore, osd.1 restarted by the test under a file-size limit
//! (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored) that ends below its device's first log
//! segment, so that opening the store (superblock and checkpoint slots) works and every
//! log write fails with `EFBIG`, as a disk returning EIO would. The OSD must exit with
//! status 3 and say why, the monitor must mark it down, the two survivors must serve
//! every acknowledged object (written before, during and after the failure), its device
//! must pass `carmine store fsck`, and once restarted on a working device it must
//! recover and hold the same bytes as its peers.

mod common;

use common::{wait_clean, wait_until, write_file, DevCluster};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `carmine_rt::shard_loop::EXIT_STORE_FAILED`.
const EXIT_STORE_FAILED: i32 = 3;

/// Where a LogStore device's segments start: the superblock's `segments_start` (see
/// `carmine_store::logstore::format`: `u32 magic | u8 version | u8 compat | u32
/// body_length | u64 segment_bytes | u32 segment_count | u64 checkpoint_slot_bytes |
/// u64 segments_start`).
fn segments_start(device: &Path) -> u64 {
    let superblock = std::fs::read(device).expect("read the device");
    assert_eq!(&superblock[..4], b"CMSB", "a formatted LogStore device");
    u64::from_le_bytes(superblock[30..38].try_into().unwrap())
}

/// The OSD the test runs itself, killed on drop if it is still running.
struct FailingOsd(Child);

impl FailingOsd {
    /// Starts the daemon with `argv` (as vstart ran it), every write it makes at or
    /// past `limit` bytes into any file failing with `EFBIG`.
    fn start(argv: &[String], limit: u64, log: &Path) -> FailingOsd {
        let log = std::fs::File::create(log).expect("create the log");
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        #[allow(unsafe_code)]
        // SAFETY: between fork and exec the closure calls only async-signal-safe
        // functions (signal, setrlimit) on values it owns.
        unsafe {
            command.pre_exec(move || {
                // A write past the limit then fails with EFBIG instead of killing the
                // process with SIGXFSZ; both settings survive exec.
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let rlimit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        FailingOsd(command.spawn().expect("start the OSD"))
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.0.try_wait().expect("wait for the OSD")
    }
}

impl Drop for FailingOsd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cmdline(pid: &str) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the OSD's command line");
    raw.split(|&b| b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8(arg.to_vec()).unwrap())
        .collect()
}

fn content(i: usize) -> Vec<u8> {
    format!("object {i} {}", "d".repeat(i * 131)).into_bytes()
}

fn put(cluster: &DevCluster, i: usize) {
    let file = cluster.path(&format!("in-{i}"));
    write_file(&file, &content(i));
    cluster.ok(&[
        "obj",
        "put",
        "rbd",
        &format!("obj-{i}"),
        file.to_str().unwrap(),
    ]);
}

#[test]
fn an_osd_whose_device_fails_stops_and_loses_nothing_acknowledged() {
    let cluster = DevCluster::start(
        "device-failure",
        &["--store", "log", "--osd-down-grace-seconds", "2"],
    );
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "16"]);
    let mut written = 0;
    while written < 20 {
        put(&cluster, written);
        written += 1;
    }

    // osd.1 again, by the test, on a device whose log writes all fail.
    let pid = std::fs::read_to_string(cluster.path("run/osd.1.pid")).expect("pid file");
    let argv = cmdline(pid.trim());
    let dir = cluster.dir.to_str().unwrap().to_string();
    cluster.ok(&["vstop", "--only", "osd.1", "--kill", "--dir", &dir]);
    wait_until("osd.1's process gone", Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{}", pid.trim())).exists()
    });
    let device = cluster.path("osd.1/logstore.shard0");
    let limit = segments_start(&device);
    let log = cluster.path("failing-osd.1.log");
    let mut osd = FailingOsd::start(&argv, limit, &log);

    // Writes go on while it boots, peers, fails its first log write and stops.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = osd.exited() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "osd.1 still running on a failing device: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let file = cluster.path(&format!("in-{written}"));
        write_file(&file, &content(written));
        let name = format!("obj-{written}");
        let output = cluster.run(&["obj", "put", "rbd", &name, file.to_str().unwrap()]);
        assert!(
            output.status.success(),
            "{name}: {}\nosd.1: {}",
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        written += 1;
    };
    let words = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(EXIT_STORE_FAILED), "{words}");
    assert!(words.contains("the store failed"), "{words}");
    assert!(words.contains("File too large"), "{words}");
    eprintln!("osd.1 stopped after {:?}", started.elapsed());

    wait_until("osd.1 marked down", Duration::from_secs(20), || {
        !cluster.osd_up(1)
    });
    for _ in 0..10 {
        put(&cluster, written);
        written += 1;
    }
    let out = cluster.path("out");
    for i in 0..written {
        cluster.ok(&[
            "obj",
            "get",
            "rbd",
            &format!("obj-{i}"),
            out.to_str().unwrap(),
        ]);
        assert_eq!(std::fs::read(&out).unwrap(), content(i), "obj-{i}");
    }

    // What the failed writes left on the device is a clean log.
    let data = cluster.path("osd.1");
    let fsck = cluster.ok(&["store", "fsck", "--data", data.to_str().unwrap()]);
    assert!(fsck.contains("errors: []"), "{fsck}");

    // Back on a working device: recovered, and every copy the same.
    cluster.ok(&["vstart", "--only", "osd.1", "--dir", &dir]);
    wait_clean(&cluster, Duration::from_secs(60));
    let (runtime, client) = common::connect_client(&cluster);
    runtime.block_on(async {
        let pool = client.pool_id("rbd").unwrap();
        for i in 0..written {
            let name = format!("obj-{i}");
            let map = client.map();
            let pg = map.object_to_pg(pool, &name).unwrap();
            let acting = map.pg_mapping(pg).unwrap().acting;
            assert_eq!(acting.len(), 3, "{name}");
            for osd in acting {
                let ops = vec![carmine_proto::OpCode::Read {
                    offset: 0,
                    length: 0,
                }];
                let reply = client.operate_on_osd("rbd", &name, ops, osd).await.unwrap();
                assert_eq!(
                    reply.outputs,
                    vec![carmine_proto::OpOutput::Data(content(i).into())],
                    "{name} on {osd}"
                );
            }
        }
    });
}
