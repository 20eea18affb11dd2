//! `carmine vstart` / `carmine vstop`: a local development cluster on 127.0.0.1, like
//! Ceph's `vstart.sh`. Each daemon runs as its own process of this binary, in its own
//! process group so it outlives `vstart`; its pid file is `DIR/run/NAME.pid` and its log
//! `DIR/log/NAME.log`. `vstop` stops exactly the processes those pid files name, after
//! checking that each still is the daemon vstart started.

use crate::conf::{self, Conf, DaemonSpec, DevCluster, CONF_FILE, DEFAULT_DEV_DIR};
use anyhow::{bail, Context, Result};
use carmine_client::{Client, ClientConfig};
use clap::Args;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long vstart waits for the cluster to become healthy.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long vstop waits for a daemon to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Args, Debug)]
pub struct VstartArgs {
    /// OSD daemons.
    #[arg(long, default_value_t = 3)]
    pub osds: u32,
    /// Monitor daemons.
    #[arg(long, default_value_t = 1)]
    pub mons: u32,
    /// Shards (pinned threads) per OSD.
    #[arg(long, default_value_t = 1)]
    pub shards: u16,
    /// Shards of each OSD in turn, overriding --shards (a mixed cluster): `1,2,3`.
    #[arg(long, value_delimiter = ',')]
    pub shards_per_osd: Vec<u16>,
    /// Object store: mem (in memory) or log (persistent).
    #[arg(long, default_value = "mem")]
    pub store: String,
    /// Capacity of each OSD shard's MemStore, in MiB (as Ceph's memstore_device_bytes);
    /// 0: unbounded.
    #[arg(long, default_value_t = 0)]
    pub memstore_mib: u64,
    /// Directory of the dev cluster.
    #[arg(long, default_value = DEFAULT_DEV_DIR)]
    pub dir: PathBuf,
    /// (Re)start only this daemon of the existing dev cluster, e.g. osd.1.
    #[arg(long)]
    pub only: Option<String>,
    /// Monitor port (0: pick a free one).
    #[arg(long, default_value_t = 0)]
    pub mon_port: u16,
    /// Seconds without a session before the monitor marks an OSD down.
    #[arg(long, default_value_t = 3)]
    pub osd_down_grace_seconds: u64,
    /// Seconds an OSD stays down before the monitor marks it out (unless noout).
    #[arg(long, default_value_t = 600)]
    pub osd_down_out_seconds: u64,
    /// Seconds without a heartbeat reply before an OSD reports a peer failed.
    #[arg(long, default_value_t = 3.0, value_parser = crate::daemons::parse_seconds)]
    pub osd_heartbeat_grace_seconds: f64,
    /// Seconds between heartbeat pings.
    #[arg(long, default_value_t = 1.0, value_parser = crate::daemons::parse_seconds)]
    pub osd_heartbeat_interval_seconds: f64,
    /// Distinct OSDs that must report a peer before the monitor marks it down.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub mon_osd_min_down_reporters: u32,
}

#[derive(Args, Debug)]
pub struct VstopArgs {
    /// Stop only this daemon, e.g. osd.1.
    #[arg(long)]
    pub only: Option<String>,
    /// SIGKILL instead of SIGTERM (rehearse a crash).
    #[arg(long)]
    pub kill: bool,
    /// Directory of the dev cluster (default: the configuration's).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(path))
    }
}

/// Lowest port vstart picks for a monitor.
const MON_PORT_MIN: u16 = 10_000;

/// A port for a monitor that is free now and stays likely free until the monitor binds
/// it: chosen at random below the kernel's ephemeral range, because a port from that
/// range (what binding port 0 returns) can be handed to any outgoing connection on the
/// machine in the meantime.
fn free_port() -> Result<u16> {
    let ephemeral_start = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_start > MON_PORT_MIN + 1_000 {
        for _ in 0..200 {
            let port = rand::Rng::gen_range(&mut rand::thread_rng(), MON_PORT_MIN..ephemeral_start);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener.local_addr()?.port())
}

fn pid_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("run").join(format!("{name}.pid"))
}

fn log_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("log").join(format!("{name}.log"))
}

/// The pid in `name`'s pid file if that process is alive and still is the daemon
/// (its command line names this cluster's directory).
fn running_pid(dir: &Path, name: &str) -> Option<i32> {
    let text = fs::read_to_string(pid_file(dir, name)).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat.rsplit(')').next()?.split_whitespace().next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if cmdline.is_empty() {
        // A daemon just spawned can be caught mid-exec: `spawn` returns once the
        // exec has begun, and the kernel sets the new program's arguments after
        // that, so `cmdline` reads empty for a moment. Kernel threads, the only
        // other processes with an empty `cmdline`, have no executable.
        return fs::read_link(format!("/proc/{pid}/exe")).ok().map(|_| pid);
    }
    let cmdline = String::from_utf8_lossy(&cmdline);
    let data_dir = dir.join(name);
    cmdline
        .contains(&*data_dir.to_string_lossy())
        .then_some(pid)
}

#[allow(unsafe_code)]
fn signal(pid: i32, signal: i32) -> Result<()> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let result = unsafe { libc::kill(pid, signal) };
    if result != 0 {
        bail!(
            "cannot signal pid {pid}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

fn spawn_daemon(dir: &Path, spec: &DaemonSpec) -> Result<i32> {
    let exe = std::env::current_exe().context("cannot find the carmine binary")?;
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file(dir, &spec.name))
        .with_context(|| format!("cannot open the log of {}", spec.name))?;
    let child = Command::new(exe)
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {}", spec.name))?;
    let pid = child.id() as i32;
    carmine_rt::files::write_atomically(&pid_file(dir, &spec.name), format!("{pid}\n").as_bytes())?;
    Ok(pid)
}

fn log_tail(dir: &Path, name: &str) -> String {
    let text = fs::read_to_string(log_file(dir, name)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

fn daemon_specs(args: &VstartArgs, dir: &Path, fsid: &str, mons: &[SocketAddr]) -> Vec<DaemonSpec> {
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let mut specs = Vec::new();
    for (rank, addr) in mons.iter().enumerate() {
        let name = format!("mon.{rank}");
        let mut daemon_args: Vec<String> = vec![
            "mon".into(),
            "--id".into(),
            rank.to_string(),
            "--addr".into(),
            addr.to_string(),
            "--data".into(),
            path(&name),
            "--fsid".into(),
            fsid.into(),
            "--osds".into(),
            args.osds.to_string(),
            "--osd-down-grace-seconds".into(),
            args.osd_down_grace_seconds.to_string(),
            "--osd-down-out-seconds".into(),
            args.osd_down_out_seconds.to_string(),
            "--osd-heartbeat-grace-seconds".into(),
            args.osd_heartbeat_grace_seconds.to_string(),
            "--mon-osd-min-down-reporters".into(),
            args.mon_osd_min_down_reporters.to_string(),
        ];
        for (peer, peer_addr) in mons.iter().enumerate().filter(|(p, _)| *p != rank) {
            daemon_args.push("--peer".into());
            daemon_args.push(format!("{peer}={peer_addr}"));
        }
        specs.push(DaemonSpec {
            name,
            args: daemon_args,
        });
    }
    for id in 0..args.osds {
        let name = format!("osd.{id}");
        let mut daemon_args: Vec<String> = vec![
            "osd".into(),
            "--id".into(),
            id.to_string(),
            "--data".into(),
            path(&name),
        ];
        for mon in mons {
            daemon_args.push("--mon".into());
            daemon_args.push(mon.to_string());
        }
        daemon_args.extend([
            "--fsid".into(),
            fsid.into(),
            "--shards".into(),
            osd_shards(args, id).to_string(),
            "--store".into(),
            args.store.clone(),
            "--store-size-mib".into(),
            "512".into(),
            "--memstore-mib".into(),
            args.memstore_mib.to_string(),
            "--host".into(),
            format!("host{id}"),
            "--osd-heartbeat-interval-seconds".into(),
            args.osd_heartbeat_interval_seconds.to_string(),
            "--osd-heartbeat-grace-seconds".into(),
            args.osd_heartbeat_grace_seconds.to_string(),
            // `carmine --idle-poll-us N vstart` (or its environment) reaches the OSDs.
            "--idle-poll-us".into(),
            carmine_msgr::idle_poll::process_budget()
                .as_micros()
                .to_string(),
        ]);
        // Each shard gets a CPU of its own while there are enough of them; past
        // that, pinning would stack shards on one CPU while another idles, so the
        // kernel places the threads instead.
        let first_cpu: u32 = (0..id)
            .map(|earlier| u32::from(osd_shards(args, earlier)))
            .sum();
        let total: u32 = (0..args.osds)
            .map(|osd| u32::from(osd_shards(args, osd)))
            .sum();
        if total as usize <= available_cpus() {
            daemon_args.extend(["--first-cpu".into(), first_cpu.to_string()]);
        } else {
            daemon_args.push("--no-pin".into());
        }
        specs.push(DaemonSpec {
            args: daemon_args,
            name,
        });
    }
    specs
}

fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The shard count of OSD `id`.
fn osd_shards(args: &VstartArgs, id: u32) -> u16 {
    args.shards_per_osd
        .get(id as usize)
        .copied()
        .unwrap_or(args.shards)
}

fn validate(args: &VstartArgs) -> Result<()> {
    if !matches!(args.mons, 1 | 3 | 5 | 7) {
        bail!(
            "--mons {}: run 1, 3, 5 or 7 monitors (an odd count, so a majority survives the loss of the others)",
            args.mons
        );
    }
    if args.osds == 0 || args.osds > 64 {
        bail!("--osds {} is outside 1..=64", args.osds);
    }
    if args.shards == 0 || args.shards > 64 {
        bail!("--shards {} is outside 1..=64", args.shards);
    }
    if !args.shards_per_osd.is_empty() && args.shards_per_osd.len() != args.osds as usize {
        bail!(
            "--shards-per-osd names {} shard counts for {} OSDs",
            args.shards_per_osd.len(),
            args.osds
        );
    }
    if let Some(bad) = args.shards_per_osd.iter().find(|s| !(1..=64).contains(*s)) {
        bail!("--shards-per-osd: {bad} is outside 1..=64");
    }
    match args.store.as_str() {
        "mem" => Ok(()),
        "log" => Ok(()),
        other => bail!("unknown --store {other:?}; expected mem or log"),
    }
}

pub fn vstart(args: VstartArgs) -> Result<()> {
    if let Some(name) = args.only.clone() {
        return restart_one(&absolute(&args.dir)?, &name);
    }
    let conf = start(&args)?;
    let dir = absolute(&args.dir)?;
    print_started(&dir, &conf, &args);
    Ok(())
}

/// Starts a fresh dev cluster in `args.dir` and waits until it is healthy, printing
/// nothing; returns its configuration (also saved as `DIR/carmine.toml`).
pub fn start(args: &VstartArgs) -> Result<Conf> {
    let dir = absolute(&args.dir)?;
    validate(args)?;
    if let Ok(existing) = Conf::load(&dir.join(CONF_FILE)) {
        for spec in existing.dev.iter().flat_map(|d| d.daemons.iter()) {
            if let Some(pid) = running_pid(&dir, &spec.name) {
                bail!(
                    "a dev cluster is already running in {} ({} has pid {pid}); stop it with `carmine vstop` first",
                    dir.display(),
                    spec.name
                );
            }
        }
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    for sub in ["run", "log"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    let fsid = format!("{:032x}", rand::random::<u128>());
    let mut mon_addrs: Vec<SocketAddr> = Vec::new();
    for rank in 0..args.mons {
        let port = if args.mon_port == 0 {
            free_port()?
        } else {
            args.mon_port
                .checked_add(rank as u16)
                .context("--mon-port + monitor count overflows")?
        };
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        if args.mon_port != 0 && TcpListener::bind(addr).is_err() {
            bail!("port {port} is in use; pick another --mon-port or 0 for free ones");
        }
        mon_addrs.push(addr);
    }
    let daemons = daemon_specs(args, &dir, &fsid, &mon_addrs);
    let conf = Conf {
        fsid,
        mon_addrs: mon_addrs.clone(),
        op_timeout_seconds: None,
        dev: Some(DevCluster {
            dir: dir.clone(),
            osds: args.osds,
            mons: args.mons,
            shards: args.shards,
            store: args.store.clone(),
            daemons: daemons.clone(),
        }),
    };
    conf.save(&dir.join(CONF_FILE))?;
    for spec in &daemons {
        spawn_daemon(&dir, spec)?;
    }
    wait_healthy(&dir, &conf, &daemons, args.osds)?;
    wait_quorum(&conf, None)?;
    Ok(conf)
}

fn print_started(dir: &Path, conf: &Conf, args: &VstartArgs) {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "carmine".into());
    let conf_path = dir.join(CONF_FILE);
    let mons: Vec<String> = conf.mon_addrs.iter().map(|a| a.to_string()).collect();
    let shards = if args.shards_per_osd.is_empty() {
        args.shards.to_string()
    } else {
        let counts: Vec<String> = args.shards_per_osd.iter().map(u16::to_string).collect();
        counts.join(",")
    };
    println!(
        "dev cluster up: {} mon, {} osds x {shards} shards ({} store), monitors {}",
        args.mons,
        args.osds,
        args.store,
        mons.join(", ")
    );
    println!("configuration: {}", conf_path.display());
    println!(
        "logs: {}/log, pid files: {}/run",
        dir.display(),
        dir.display()
    );
    println!();
    println!("use it with:  {exe} status");
    println!("              {exe} pool create rbd --size 3 --pg-num 64");
    if !conf_path.starts_with(
        std::env::current_dir()
            .unwrap_or_default()
            .join(DEFAULT_DEV_DIR),
    ) {
        println!(
            "(from another directory: export CARMINE_CONF={})",
            conf_path.display()
        );
    }
    println!("stop it with: {exe} vstop");
}

fn wait_healthy(dir: &Path, conf: &Conf, daemons: &[DaemonSpec], osds: u32) -> Result<()> {
    let deadline = Instant::now() + HEALTHY_TIMEOUT;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut config = ClientConfig::new(conf.mon_addrs.clone());
        config.connect_timeout = Duration::from_secs(2);
        let mut client: Option<Client> = None;
        loop {
            for spec in daemons {
                if running_pid(dir, &spec.name).is_none() {
                    bail!(
                        "{} exited during startup; last lines of {}:\n{}",
                        spec.name,
                        log_file(dir, &spec.name).display(),
                        log_tail(dir, &spec.name)
                    );
                }
            }
            if client.is_none() {
                client = Client::connect(config.clone()).await.ok();
            }
            if let Some(client) = &client {
                if client.map().up_count() as u32 >= osds {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("the cluster did not become healthy within {HEALTHY_TIMEOUT:?}; see the logs in {}/log", dir.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

fn restart_one(dir: &Path, name: &str) -> Result<()> {
    let conf = Conf::load(&dir.join(CONF_FILE))
        .with_context(|| format!("no dev cluster in {} to restart {name} in", dir.display()))?;
    let dev = conf
        .dev
        .clone()
        .context("the configuration describes no dev cluster")?;
    let spec = dev
        .daemons
        .iter()
        .find(|s| s.name == name)
        .with_context(|| {
            let names: Vec<&str> = dev.daemons.iter().map(|s| s.name.as_str()).collect();
            format!(
                "no daemon {name} in this dev cluster (it has {})",
                names.join(", ")
            )
        })?;
    if let Some(pid) = running_pid(dir, name) {
        bail!("{name} is already running (pid {pid})");
    }
    let pid = spawn_daemon(dir, spec)?;
    wait_healthy(dir, &conf, std::slice::from_ref(spec), 0)?;
    if let Some(rank) = name
        .strip_prefix("mon.")
        .and_then(|rank| rank.parse::<u64>().ok())
    {
        wait_quorum(&conf, Some(rank))?;
    }
    if let Some(id) = name
        .strip_prefix("osd.")
        .and_then(|id| id.parse::<u32>().ok())
    {
        wait_osd_up(&conf, id)?;
    }
    println!("started {name} (pid {pid})");
    Ok(())
}

/// Waits until the monitors have a leader and every monitor (or at least `rank`) is in
/// its quorum.
fn wait_quorum(conf: &Conf, rank: Option<u64>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = Client::connect(ClientConfig::new(conf.mon_addrs.clone())).await?;
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        loop {
            let status = match client.command(carmine_proto::Command::Status).await {
                Ok(carmine_proto::CommandOutput::Status(status)) => Some(status),
                _ => None,
            };
            let formed = status.as_ref().is_some_and(|status| {
                status.mon_leader.is_some()
                    && match rank {
                        Some(rank) => status.mon_quorum.contains(&rank),
                        None => status.mon_quorum.len() == conf.mon_addrs.len(),
                    }
            });
            if formed {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the monitors did not form a quorum within {HEALTHY_TIMEOUT:?} (last: {:?})",
                    status.map(|s| (s.mon_leader, s.mon_quorum))
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

fn wait_osd_up(conf: &Conf, id: u32) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = Client::connect(ClientConfig::new(conf.mon_addrs.clone())).await?;
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        loop {
            let map = client.map();
            let up_recently = map.osd(carmine_types::OsdId(id)).is_some_and(|o| o.up);
            if up_recently {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("osd.{id} did not come up within {HEALTHY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

pub fn vstop(args: VstopArgs, cli_conf: Option<&Path>) -> Result<()> {
    let dir = match args.dir {
        Some(dir) => absolute(&dir)?,
        None => {
            let (path, conf) = conf::load(cli_conf)?;
            match conf.dev {
                Some(dev) => dev.dir,
                None => bail!("{} describes no dev cluster; pass --dir", path.display()),
            }
        }
    };
    let conf = Conf::load(&dir.join(CONF_FILE))?;
    let dev = conf
        .dev
        .context("the configuration describes no dev cluster")?;
    let names: Vec<String> = match &args.only {
        Some(name) if dev.daemons.iter().any(|s| &s.name == name) => vec![name.clone()],
        Some(name) => bail!("no daemon {name} in the dev cluster in {}", dir.display()),
        // OSDs first, so the monitor sees them leave.
        None => dev.daemons.iter().rev().map(|s| s.name.clone()).collect(),
    };
    if let Some(name) = &args.only {
        if running_pid(&dir, name).is_none() {
            bail!("{name} is not running");
        }
    }
    let stopped = stop_daemons(&dir, &names, args.kill)?;
    for (name, pid) in &stopped {
        println!(
            "stopped {name} (pid {pid}{})",
            if args.kill { ", SIGKILL" } else { "" }
        );
    }
    if stopped.is_empty() {
        println!("no daemons were running in {}", dir.display());
    }
    Ok(())
}

/// Stops every daemon of the dev cluster in `dir` (OSDs first), printing nothing;
/// returns the names and pids it stopped.
pub fn stop_all(dir: &Path) -> Result<Vec<(String, i32)>> {
    let conf = Conf::load(&dir.join(CONF_FILE))?;
    let dev = conf
        .dev
        .context("the configuration describes no dev cluster")?;
    let names: Vec<String> = dev.daemons.iter().rev().map(|s| s.name.clone()).collect();
    stop_daemons(dir, &names, false)
}

fn stop_daemons(dir: &Path, names: &[String], kill: bool) -> Result<Vec<(String, i32)>> {
    let mut stopped = Vec::new();
    for name in names {
        let Some(pid) = running_pid(dir, name) else {
            continue;
        };
        stop(dir, name, pid, kill)?;
        stopped.push((name.clone(), pid));
    }
    Ok(stopped)
}

fn stop(dir: &Path, name: &str, pid: i32, kill: bool) -> Result<()> {
    signal(pid, if kill { libc::SIGKILL } else { libc::SIGTERM })?;
    let deadline = Instant::now() + STOP_TIMEOUT;
    while running_pid(dir, name).is_some() {
        if Instant::now() > deadline {
            signal(pid, libc::SIGKILL)?;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = fs::remove_file(pid_file(dir, name));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory with a `run/` folder, unique per test.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("carmine-vstart-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("run")).unwrap();
        dir
    }

    fn write_pid(dir: &Path, pid: u32) {
        fs::write(pid_file(dir, "osd.0"), format!("{pid}\n")).unwrap();
    }

    #[test]
    fn a_live_process_that_is_not_the_daemon_is_not_running() {
        let dir = scratch("self");
        write_pid(&dir, std::process::id());
        assert_eq!(running_pid(&dir, "osd.0"), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_kernel_thread_with_an_empty_command_line_is_not_running() {
        // kthreadd is pid 2 on a host, but not inside every container.
        let is_kthread = fs::read("/proc/2/cmdline").is_ok_and(|c| c.is_empty())
            && fs::read_link("/proc/2/exe").is_err();
        if !is_kthread {
            return;
        }
        let dir = scratch("kthread");
        write_pid(&dir, 2);
        assert_eq!(running_pid(&dir, "osd.0"), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_daemon_is_running_and_a_missing_pid_file_is_not() {
        let dir = scratch("daemon");
        assert_eq!(running_pid(&dir, "osd.0"), None);
        let data = dir.join("osd.0");
        // A process that stays up with the data directory on its command line (`sleep
        // 30 DIR` would not: sleep rejects the extra argument and exits at once, so the
        // check raced its exit): a shell blocked reading its stdin, with no child of its
        // own to leave behind.
        let mut child = Command::new("sh")
            .args(["-c", "read line"])
            .arg(&data)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        write_pid(&dir, child.id());
        // Mid-exec or not, the freshly spawned process counts as running.
        assert_eq!(running_pid(&dir, "osd.0"), Some(child.id() as i32));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(running_pid(&dir, "osd.0"), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
