//! End to end through the `carmine` binary: the README's quick start verbs, clear
//! one-line errors for bad input, and a kill -9 rehearsal.

mod common;

use common::{carmine, write_file, DevCluster};

#[test]
fn quick_start_verbs_work_as_documented() {
    let cluster = DevCluster::start("quickstart", &[]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "64"]);
    let hello = cluster.path("hello.txt");
    let out = cluster.path("out.txt");
    write_file(&hello, b"hello, carmine\n");
    let (hello, out) = (hello.to_str().unwrap(), out.to_str().unwrap());
    cluster.ok(&["obj", "put", "rbd", "greeting", hello]);
    cluster.ok(&["obj", "get", "rbd", "greeting", out]);
    assert_eq!(std::fs::read(out).unwrap(), b"hello, carmine\n");
    let stat = cluster.ok(&["obj", "stat", "rbd", "greeting"]);
    assert!(
        stat.contains("size 15") && stat.contains("version"),
        "{stat}"
    );
    assert_eq!(cluster.ok(&["obj", "ls", "rbd"]), "greeting\n");

    cluster.ok(&["obj", "setxattr", "rbd", "greeting", "lang", "en"]);
    assert_eq!(
        cluster.ok(&["obj", "getxattr", "rbd", "greeting", "lang"]),
        "en\n"
    );
    cluster.ok(&["obj", "setomapval", "rbd", "greeting", "k1", "v1"]);
    assert_eq!(
        cluster.ok(&["obj", "listomapvals", "rbd", "greeting"]),
        "k1\tv1\n"
    );
    cluster.ok(&["obj", "rmomapkey", "rbd", "greeting", "k1"]);
    cluster.ok(&["obj", "rmxattr", "rbd", "greeting", "lang"]);
    assert_eq!(cluster.ok(&["obj", "listxattr", "rbd", "greeting"]), "");

    cluster.ok(&["obj", "rm", "rbd", "greeting"]);
    assert_eq!(cluster.ok(&["obj", "ls", "rbd"]), "");

    let status = cluster.ok(&["status"]);
    assert!(status.contains("3 osds: 3 up, 3 in"), "{status}");
    assert!(status.contains("1 pools, 64 pgs"), "{status}");
    let tree = cluster.ok(&["osd", "tree"]);
    for osd in ["osd.0", "osd.1", "osd.2"] {
        assert!(tree.contains(osd), "{tree}");
    }
    let stopped = carmine()
        .args(["vstop", "--dir"])
        .arg(&cluster.dir)
        .output()
        .unwrap();
    assert!(stopped.status.success());
    let text = String::from_utf8_lossy(&stopped.stdout);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("stopped")).count(),
        4,
        "{text}"
    );
    assert!(std::fs::read_dir(cluster.dir.join("run"))
        .unwrap()
        .next()
        .is_none());
}

#[test]
fn bad_input_gets_one_clear_line_and_a_nonzero_exit() {
    let cluster = DevCluster::start("badinput", &["--osds", "3"]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "8"]);
    let file = cluster.path("f");
    write_file(&file, b"12345");
    let file = file.to_str().unwrap();
    cluster.ok(&["obj", "put", "rbd", "small", file]);

    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["obj".into(), "stat".into(), "nopool".into(), "x".into()],
            "pool 'nopool' does not exist",
        ),
        (
            vec!["obj".into(), "stat".into(), "rbd".into(), "missing".into()],
            "no such object",
        ),
        (
            vec![
                "obj".into(),
                "put".into(),
                "rbd".into(),
                "n".repeat(3000),
                file.into(),
            ],
            "limit is 2048",
        ),
        (
            vec![
                "obj".into(),
                "get".into(),
                "rbd".into(),
                "small".into(),
                "/dev/null".into(),
                "--offset".into(),
                "9".into(),
            ],
            "past the end",
        ),
        (
            vec![
                "pool".into(),
                "create".into(),
                "big".into(),
                "--size".into(),
                "5".into(),
            ],
            "exceeds the 3 OSDs",
        ),
        (
            vec!["pool".into(), "create".into(), "rbd".into()],
            "already exists",
        ),
        (
            vec!["pool".into(), "rm".into(), "rbd".into()],
            "yes-i-really-really-mean-it",
        ),
        (
            vec![
                "obj".into(),
                "create".into(),
                "rbd".into(),
                "small".into(),
                "--exclusive".into(),
            ],
            "already exists",
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr = cluster.fails(&args);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // A second vstart on a running cluster is refused.
    let second = carmine()
        .args(["vstart", "--dir"])
        .arg(&cluster.dir)
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("already running"));
    // A daemon port in use is named.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let other = cluster.dir.parent().unwrap().join("other");
    let busy = carmine()
        .args(["vstart", "--mon-port", &port, "--dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(!busy.status.success());
    assert!(String::from_utf8_lossy(&busy.stderr).contains("in use"));
    // With no cluster configured, the CLI says how to get one.
    let empty = cluster.dir.parent().unwrap().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let lost = carmine()
        .args(["status"])
        .current_dir(&empty)
        .env_remove("CARMINE_CONF")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&lost.stderr).contains("carmine vstart"));
}

#[test]
fn a_killed_osd_is_marked_down_writes_continue_and_it_rejoins() {
    let cluster = DevCluster::start("kill", &["--osd-down-grace-seconds", "1"]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "16"]);
    let file = cluster.path("f");
    write_file(&file, b"before");
    let file = file.to_str().unwrap();
    let names: Vec<String> = (0..8).map(|i| format!("a{i}")).collect();
    for name in &names {
        cluster.ok(&["obj", "put", "rbd", name, file]);
    }
    let dir = cluster.dir.to_str().unwrap().to_string();
    let killed = carmine()
        .args(["vstop", "--only", "osd.1", "--kill", "--dir", &dir])
        .output()
        .unwrap();
    assert!(killed.status.success());
    // Degraded (2 of 3, min_size 2) but writable: the write waits out the grace
    // period at most, then completes on the two survivors.
    write_file(std::path::Path::new(file), b"after");
    cluster.ok(&["obj", "put", "rbd", "b", file]);
    let health = cluster.ok(&["health", "detail"]);
    assert!(health.contains("OSD_DOWN"), "{health}");
    cluster.ok(&["vstart", "--only", "osd.1", "--dir", &dir]);
    let tree = cluster.ok(&["osd", "tree"]);
    let osd1 = tree.lines().find(|l| l.contains("osd.1")).unwrap();
    assert!(osd1.contains(" up "), "{tree}");
    // Objects whose primary is the restarted osd.1 are readable again only once
    // recovery (issue #9) refills its empty MemStore; the others must be intact.
    let out = cluster.path("out");
    let mut checked = 0;
    for name in &names {
        let map = cluster.ok(&["--format", "json", "osd", "map", "rbd", name]);
        let map: serde_json::Value = serde_json::from_str(&map).unwrap();
        if map["up_primary"] == 1 {
            continue;
        }
        cluster.ok(&["obj", "get", "rbd", name, out.to_str().unwrap()]);
        assert_eq!(std::fs::read(&out).unwrap(), b"before");
        checked += 1;
    }
    assert!(checked > 0, "every object had osd.1 as primary");
}
