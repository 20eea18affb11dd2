//! `carmine mon` and `carmine osd`: run a daemon (`--id ...`), or, with a verb, the
//! matching admin commands (`carmine osd tree`, `carmine mon stat`).

use crate::{admin, cli::with_client, conf};
use anyhow::{bail, Context, Result};
use carmine_mon::MonConfig;
use carmine_osd::heartbeat::HeartbeatConfig;
use carmine_rt::{run_monitor, run_osd, MonDaemonConfig, OsdDaemonConfig, StoreKind};
use carmine_types::OsdId;
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MonArgs {
    #[command(subcommand)]
    pub command: Option<MonCommand>,
    #[command(flatten)]
    pub daemon: MonDaemonArgs,
}

#[derive(Subcommand, Debug)]
pub enum MonCommand {
    /// Monitors and the map epoch, as `ceph mon stat`.
    Stat,
}

#[derive(Args, Debug)]
pub struct MonDaemonArgs {
    /// This monitor's rank.
    #[arg(long)]
    pub id: Option<u64>,
    /// Address to listen on.
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Directory for the monitor's state.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Cluster id (32 hex digits); default: the configuration file's.
    #[arg(long)]
    pub fsid: Option<String>,
    /// OSDs in the initial CRUSH map of a new cluster.
    #[arg(long, default_value_t = 3)]
    pub osds: u32,
    /// Seconds without a session before an OSD is marked down.
    #[arg(long, default_value_t = 3)]
    pub osd_down_grace_seconds: u64,
    /// Seconds an OSD stays down before it is marked out.
    #[arg(long, default_value_t = 600)]
    pub osd_down_out_seconds: u64,
    /// Seconds an OSD's failure report about a peer counts (the map's
    /// osd_heartbeat_grace overrides it).
    #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
    pub osd_heartbeat_grace_seconds: f64,
    /// Distinct OSDs that must report a peer before it is marked down (the map's
    /// mon_osd_min_down_reporters overrides it).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub mon_osd_min_down_reporters: u32,
    /// Another monitor of the group, as RANK=ADDR (repeat for each); default: the
    /// configuration file's mon_addrs in rank order, else this monitor alone.
    #[arg(long = "peer", value_parser = parse_peer)]
    pub peers: Vec<(u64, SocketAddr)>,
}

/// Seconds above 0 and at most a day, as the map's config keys take them.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    carmine_clustermap::settings::validate(carmine_clustermap::settings::OSD_HEARTBEAT_GRACE, text)
        .map_err(|_| format!("{text:?} is not a number of seconds above 0 and at most 86400"))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))
}

fn parse_peer(text: &str) -> Result<(u64, SocketAddr), String> {
    let (rank, addr) = text
        .split_once('=')
        .ok_or_else(|| format!("--peer {text:?} is not RANK=ADDR (e.g. 1=127.0.0.1:6790)"))?;
    let rank = rank
        .parse()
        .map_err(|_| format!("--peer {text:?}: the rank {rank:?} is not a number"))?;
    let addr = addr
        .parse()
        .map_err(|_| format!("--peer {text:?}: {addr:?} is not an IP:PORT address"))?;
    Ok((rank, addr))
}

/// The monitor group: `--peer`s and this monitor, else the configuration's
/// `mon_addrs` (rank = position) when it lists this monitor, else this one alone.
fn monmap(
    rank: u64,
    addr: SocketAddr,
    peers: &[(u64, SocketAddr)],
    cli_conf: Option<&Path>,
) -> Result<BTreeMap<u64, SocketAddr>> {
    let mut monmap = BTreeMap::from([(rank, addr)]);
    if peers.is_empty() {
        if let Ok((_, conf)) = conf::load(cli_conf) {
            if conf.mon_addrs.get(rank as usize) == Some(&addr) {
                monmap = (0..).zip(conf.mon_addrs.iter().copied()).collect();
            }
        }
        return Ok(monmap);
    }
    for &(peer, peer_addr) in peers {
        if let Some(existing) = monmap.insert(peer, peer_addr) {
            if existing != peer_addr || peer == rank {
                bail!("--peer {peer}={peer_addr}: rank {peer} is already {existing}");
            }
        }
    }
    Ok(monmap)
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OsdArgs {
    #[command(subcommand)]
    pub command: Option<admin::OsdCommand>,
    #[command(flatten)]
    pub daemon: OsdDaemonArgs,
}

#[derive(Args, Debug)]
pub struct OsdDaemonArgs {
    /// The OSD's id.
    #[arg(long)]
    pub id: Option<u32>,
    /// Monitor address (repeat for several); default: the configuration file's.
    #[arg(long = "mon")]
    pub mons: Vec<SocketAddr>,
    /// Shards (pinned threads); default: the CPUs this process may use.
    #[arg(long)]
    pub shards: Option<u16>,
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// mem (in memory) or log (LogStore, persistent).
    #[arg(long, default_value = "mem")]
    pub store: String,
    /// Size of each shard's LogStore device file, in MiB (created on first start).
    #[arg(long, default_value_t = 1024)]
    pub store_size_mib: u64,
    /// Capacity of each shard's MemStore, in MiB, as Ceph's memstore_device_bytes:
    /// past it writes get NoSpace (and the monitor marks the OSD full first) instead
    /// of the process growing until the machine runs out of memory. 0: unbounded.
    #[arg(long, default_value_t = 0)]
    pub memstore_mib: u64,
    /// CRUSH host bucket; default host{id}.
    #[arg(long)]
    pub host: Option<String>,
    #[arg(long)]
    pub fsid: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    pub ip: IpAddr,
    /// Shard i listens on PORT+i; 0 picks free ports.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Do not pin shard threads to CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// Pin shard i to CPU (FIRST_CPU + i) mod the CPU count (vstart spreads its OSDs
    /// this way).
    #[arg(long, default_value_t = 0)]
    pub first_cpu: usize,
    /// Seconds between heartbeat pings to each peer OSD (the map's
    /// osd_heartbeat_interval overrides it).
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    pub osd_heartbeat_interval_seconds: f64,
    /// Seconds without a heartbeat reply before a peer is reported failed (the map's
    /// osd_heartbeat_grace overrides it).
    #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
    pub osd_heartbeat_grace_seconds: f64,
}

pub fn init_daemon_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CARMINE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

fn parse_fsid(explicit: Option<&str>, cli_conf: Option<&Path>) -> Result<u128> {
    match explicit {
        Some(text) => u128::from_str_radix(text, 16)
            .with_context(|| format!("--fsid {text:?} is not 32 hex digits")),
        None => conf::load(cli_conf)?.1.fsid(),
    }
}

pub fn mon(args: MonArgs, cli_conf: Option<&Path>, json: bool) -> Result<()> {
    if let Some(MonCommand::Stat) = args.command {
        return with_client(cli_conf, |c| async move { admin::mon_stat(&c, json).await });
    }
    let daemon = args.daemon;
    let (Some(rank), Some(addr), Some(data)) = (daemon.id, daemon.addr, daemon.data) else {
        bail!("to run a monitor give --id, --addr and --data (or use a verb: carmine mon stat)");
    };
    let fsid = parse_fsid(daemon.fsid.as_deref(), cli_conf)?;
    let monmap = monmap(rank, addr, &daemon.peers, cli_conf)?;
    init_daemon_logging();
    let config = MonDaemonConfig {
        rank,
        addr,
        data_dir: data,
        fsid,
        initial_osd_count: daemon.osds,
        mon: MonConfig {
            osd_down_grace: Duration::from_secs(daemon.osd_down_grace_seconds),
            osd_down_out_interval: Duration::from_secs(daemon.osd_down_out_seconds),
            osd_heartbeat_grace: Duration::from_secs_f64(daemon.osd_heartbeat_grace_seconds),
            min_down_reporters: daemon.mon_osd_min_down_reporters,
            mon_count: monmap.len() as u32,
            ..MonConfig::default()
        },
        monmap,
    };
    run_monitor(config).with_context(|| format!("mon.{rank} failed"))
}

pub fn osd(args: OsdArgs, cli_conf: Option<&Path>, json: bool) -> Result<()> {
    if let Some(command) = args.command {
        return with_client(
            cli_conf,
            |c| async move { admin::osd(&c, command, json).await },
        );
    }
    let daemon = args.daemon;
    let (Some(id), Some(data)) = (daemon.id, daemon.data) else {
        bail!("to run an OSD give --id and --data (or use a verb such as: carmine osd tree)");
    };
    let store = match daemon.store.as_str() {
        "mem" => StoreKind::Mem {
            capacity_bytes: (daemon.memstore_mib > 0)
                .then_some(daemon.memstore_mib.saturating_mul(1 << 20)),
        },
        "log" => StoreKind::Log {
            size_bytes: daemon.store_size_mib * 1024 * 1024,
        },
        other => bail!("unknown store {other:?}; expected mem or log"),
    };
    let mon_addrs = if daemon.mons.is_empty() {
        conf::load(cli_conf)?.1.mon_addrs
    } else {
        daemon.mons
    };
    let fsid = parse_fsid(daemon.fsid.as_deref(), cli_conf)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u16;
    init_daemon_logging();
    let config = OsdDaemonConfig {
        id: OsdId(id),
        fsid,
        mon_addrs,
        bind_ip: daemon.ip,
        base_port: daemon.port,
        shard_count: daemon.shards.unwrap_or(cpus).max(1),
        data_dir: data,
        store,
        host: daemon.host.unwrap_or_else(|| format!("host{id}")),
        pin_threads: !daemon.no_pin,
        first_cpu: daemon.first_cpu,
        idle_poll: carmine_msgr::idle_poll::process_budget(),
        heartbeat: HeartbeatConfig {
            interval: Duration::from_secs_f64(daemon.osd_heartbeat_interval_seconds),
            grace: Duration::from_secs_f64(daemon.osd_heartbeat_grace_seconds),
            ..HeartbeatConfig::default()
        },
    };
    run_osd(config).with_context(|| format!("osd.{id} failed"))
}
