//! Block images end to end with real processes: a dev cluster, `carmine image` verbs
//! (create, ls, info, du, resize, cp, rename, export/import through files and pipes,
//! rm), and `carmine image nbd` driven by real NBD clients when they are installed:
//! `qemu-img convert` in and out, `nbdcopy` both ways (several connections), and fio's
//! nbd engine with crc32c verification. Each missing tool is skipped with a note.

mod common;

use common::{carmine, DevCluster};
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const IMAGE_BYTES: usize = 64 << 20;
const PAYLOAD_BYTES: usize = 24 << 20;

/// `carmine image nbd` in the background, killed on drop.
struct NbdServer {
    child: Child,
    uri: String,
}

impl NbdServer {
    fn start(cluster: &DevCluster, spec: &str) -> NbdServer {
        let mut child = carmine()
            .arg("--conf")
            .arg(&cluster.conf)
            .args(["image", "nbd", spec, "--bind", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start carmine image nbd");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read announce line");
        let uri = line
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_string();
        assert!(
            uri.starts_with("nbd://127.0.0.1:"),
            "unexpected announce line {line:?}"
        );
        NbdServer { child, uri }
    }

    /// Stops the server with SIGTERM (it flushes and exits 0).
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let exit = self.child.wait().expect("wait for nbd server");
        assert!(exit.success(), "nbd server exited with {exit}");
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        println!("note: {tool} is not installed; skipping its part of the test");
    }
    found
}

fn run_tool(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Random data with holes, so that zero detection and trim are exercised.
fn payload() -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut data = vec![0u8; PAYLOAD_BYTES];
    rng.fill(&mut data[..]);
    data[(4 << 20)..(9 << 20)].fill(0);
    data[(13 << 20) + 100..(13 << 20) + 70_000].fill(0);
    data
}

fn expected_image(data: &[u8]) -> Vec<u8> {
    let mut image = data.to_vec();
    image.resize(IMAGE_BYTES, 0);
    image
}

fn assert_same(path: &Path, expected: &[u8], what: &str) {
    let got = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_eq!(got.len(), expected.len(), "{what}: length");
    if let Some(at) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!("{what}: first difference at byte {at}");
    }
}

#[test]
fn images_and_nbd_with_real_clients() {
    let cluster = DevCluster::start("block", &[]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "32"]);
    cluster.ok(&["image", "create", "rbd/disk", "--size", "64M"]);
    admin_verbs(&cluster);
    let data = payload();
    let input = cluster.path("input.raw");
    common::write_file(&input, &data);
    let expected = expected_image(&data);

    let server = NbdServer::start(&cluster, "rbd/disk");
    if have("qemu-img") {
        let output = cluster.path("qemu-out.raw");
        run_tool(
            "qemu-img",
            &[
                "convert",
                "-n",
                "-f",
                "raw",
                "-O",
                "raw",
                path(&input),
                &server.uri,
            ],
        );
        run_tool(
            "qemu-img",
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "raw",
                &server.uri,
                path(&output),
            ],
        );
        assert_same(&output, &expected, "qemu-img round trip");
    }
    if have("nbdcopy") {
        let reversed: Vec<u8> = data.iter().rev().copied().collect();
        let reversed_input = cluster.path("reversed.raw");
        common::write_file(&reversed_input, &reversed);
        let output = cluster.path("nbdcopy-out.raw");
        run_tool("nbdcopy", &[path(&reversed_input), &server.uri]);
        run_tool("nbdcopy", &[&server.uri, path(&output)]);
        assert_same(&output, &expected_image(&reversed), "nbdcopy round trip");
    }
    if have("fio") {
        let uri = format!("--uri={}", server.uri);
        let common = [
            "--name=verify",
            "--ioengine=nbd",
            &uri,
            "--bs=4k",
            "--size=16M",
            "--iodepth=16",
        ];
        // No verify-state file: fio would leave it in the working directory.
        let verify = [
            "--verify=crc32c",
            "--verify_fatal=1",
            "--do_verify=1",
            "--verify_state_save=0",
        ];
        let mut args: Vec<&str> = common.to_vec();
        args.extend(["--rw=randwrite", "--number_ios=2048"]);
        args.extend(verify);
        run_tool("fio", &args);
    }
    server.stop();
    export_import(&cluster);
    cluster.ok(&["image", "rm", "rbd/disk"]);
    assert!(!cluster.ok(&["image", "ls", "rbd"]).contains("disk\n"));
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn admin_verbs(cluster: &DevCluster) {
    assert_eq!(cluster.ok(&["image", "ls", "rbd"]), "disk\n");
    let info = cluster.ok(&["--format", "json", "image", "info", "rbd/disk"]);
    let info: serde_json::Value = serde_json::from_str(&info).expect("info json");
    assert_eq!(info["size_bytes"], 64 << 20);
    assert_eq!(info["object_size_bytes"], 4 << 20);
    assert!(cluster
        .fails(&["image", "create", "rbd/disk", "--size", "1M"])
        .contains("already exists"));
    assert!(cluster
        .fails(&["image", "info", "rbd/nothing"])
        .contains("does not exist"));
    let bad_size = cluster.run(&["image", "create", "rbd/x", "--size", "12Q"]);
    assert!(
        !bad_size.status.success()
            && String::from_utf8_lossy(&bad_size.stderr).contains("unknown unit")
    );
    cluster.ok(&[
        "image",
        "create",
        "rbd/scratch",
        "--size",
        "8M",
        "--order",
        "20",
    ]);
    cluster.ok(&["image", "resize", "rbd/scratch", "--size", "16M"]);
    assert!(cluster
        .fails(&["image", "resize", "rbd/scratch", "--size", "4M"])
        .contains("--allow-shrink"));
    cluster.ok(&[
        "image",
        "resize",
        "rbd/scratch",
        "--size",
        "3M",
        "--allow-shrink",
    ]);
    cluster.ok(&["image", "rename", "rbd/scratch", "scratch2"]);
    let listing = cluster.ok(&["image", "ls", "-l", "rbd"]);
    assert!(
        listing.contains("scratch2") && listing.contains("3.0 MiB"),
        "{listing}"
    );
    cluster.ok(&["image", "rm", "rbd/scratch2"]);
    assert_eq!(cluster.ok(&["image", "ls", "rbd"]), "disk\n");
}

fn export_import(cluster: &DevCluster) {
    let exported = cluster.path("export.raw");
    cluster.ok(&["image", "export", "rbd/disk", path(&exported)]);
    let image = std::fs::read(&exported).expect("read export");
    assert_eq!(image.len(), IMAGE_BYTES);
    let du: serde_json::Value =
        serde_json::from_str(&cluster.ok(&["--format", "json", "image", "du", "rbd/disk"]))
            .unwrap();
    assert_eq!(du["provisioned_bytes"], IMAGE_BYTES);
    assert!(
        du["used_bytes"].as_u64().unwrap() < IMAGE_BYTES as u64,
        "thin: {du}"
    );

    cluster.ok(&["image", "import", path(&exported), "rbd/imported"]);
    cluster.ok(&["image", "cp", "rbd/imported", "rbd/copied"]);
    let mut import = carmine()
        .arg("--conf")
        .arg(&cluster.conf)
        .args(["image", "import", "-", "rbd/piped", "--order", "20"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("start import from stdin");
    import.stdin.take().unwrap().write_all(&image).unwrap();
    assert!(import.wait().unwrap().success());
    for name in ["rbd/imported", "rbd/copied", "rbd/piped"] {
        let out = carmine()
            .arg("--conf")
            .arg(&cluster.conf)
            .args(["image", "export", name, "-"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout == image,
            "{name} differs from the exported image"
        );
        cluster.ok(&["image", "rm", name]);
    }
}
