//! The command line: clap definitions and dispatch.

use crate::bench::BenchMode;
use crate::{admin, bench, conf, crush, daemons, image, objects, store, vstart};
use anyhow::Result;
use carmine_client::{Client, ClientConfig};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "carmine",
    version,
    about = "Carmine: a shared-nothing distributed object and block store"
)]
pub struct Cli {
    /// Cluster configuration file (default: $CARMINE_CONF, ./dev-cluster/carmine.toml, /etc/carmine/carmine.toml).
    #[arg(long, global = true)]
    pub conf: Option<PathBuf>,
    /// Output for people (plain) or scripts (json).
    #[arg(long, global = true, value_enum, default_value_t = Format::Plain)]
    pub format: Format,
    /// Microseconds a daemon shard or a client polls its sockets before it sleeps, as
    /// Seastar's reactor (0: never; default $CARMINE_IDLE_POLL_US, else 200). Waking a
    /// sleeping vCPU is slow on virtual machines; polling costs CPU only after activity.
    #[arg(long, global = true, value_name = "US")]
    pub idle_poll_us: Option<u64>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Plain,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build and start a local cluster on 127.0.0.1 (or restart one daemon with --only).
    Vstart(vstart::VstartArgs),
    /// Stop the daemons vstart started (or one with --only).
    Vstop(vstart::VstopArgs),
    /// Cluster status, as `ceph -s`.
    Status,
    /// Cluster health, as `ceph health [detail]`.
    Health {
        /// Show every check.
        #[arg(value_parser = ["detail"])]
        detail: Option<String>,
    },
    /// Run a monitor daemon, or query the monitors.
    Mon(daemons::MonArgs),
    /// Run an OSD daemon (`carmine osd --id N`), or OSD admin verbs (`carmine osd tree`).
    Osd(daemons::OsdArgs),
    /// Pools: create, ls, rm, set, get.
    #[command(subcommand)]
    Pool(admin::PoolCommand),
    /// Key/values kept in the cluster map: set, get, rm, dump, as `ceph config-key`.
    #[command(subcommand)]
    Config(admin::ConfigCommand),
    /// Placement groups: stat, dump, as `ceph pg`.
    #[command(subcommand)]
    Pg(admin::PgCommand),
    /// Objects, as the `rados` tool: put, get, stat, ls, rm, xattrs, omap.
    #[command(subcommand)]
    Obj(objects::ObjCommand),
    /// Benchmark a pool, as `rados bench` (`carmine bench POOL write|seq|rand`), or one
    /// layer alone (`carmine bench osd`, `carmine bench msgr`).
    Bench(BenchCli),
    /// Check or describe an OSD's LogStore (`--data DIR`) without starting it.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Run the deterministic whole-cluster simulator: `carmine sim --seed N
    /// [--faults all|handled|LIST] [--seeds A..B] [--trace] [--canary]`.
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// CRUSH maps offline, as `crushtool`: compile, decompile, test.
    #[command(subcommand)]
    Crush(crush::CrushCommand),
    /// Block images, as the `rbd` tool: create, ls, info, resize, rm, export, nbd, ...
    #[command(subcommand)]
    Image(image::ImageCommand),
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchCli {
    /// A benchmark of one layer alone instead of a pool.
    #[command(subcommand)]
    pub layer: Option<BenchLayer>,
    /// The pool to benchmark.
    #[arg(required = true)]
    pub pool: Option<String>,
    #[arg(value_enum, required = true)]
    pub mode: Option<BenchMode>,
    /// Object size in bytes.
    #[arg(short = 'b', long = "block-size", default_value_t = 4 * 1024 * 1024)]
    pub block_size: usize,
    /// Operations in flight.
    #[arg(short = 't', long = "concurrent-ios", default_value_t = 16)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Leave the written objects for a later `seq` or `rand` run.
    #[arg(long)]
    pub no_cleanup: bool,
    #[arg(long)]
    pub run_name: Option<String>,
    /// `write`: use at most this many objects, overwriting them in turn once all are
    /// written, so the data written (and the cluster's memory) stops growing.
    #[arg(long)]
    pub max_objects: Option<u64>,
}

/// Benchmarks of one layer, run in this process with no cluster.
#[derive(Subcommand, Debug)]
pub enum BenchLayer {
    /// The OSD core alone (`--path direct`) or through the messenger on loopback
    /// (`--path net`): MemStore, 4 KiB writes and reads, many in flight.
    Osd(crate::bench_osd::OsdBenchArgs),
    /// The messenger against raw TCP over loopback (no cluster needed).
    Msgr(crate::bench_msgr::MsgrBenchArgs),
}

impl Cli {
    /// Whether the command runs a long-lived server (a daemon or the NBD export).
    pub fn runs_a_server(&self) -> bool {
        match &self.command {
            Command::Mon(args) => args.command.is_none(),
            Command::Osd(args) => args.command.is_none(),
            Command::Image(command) => command.is_server(),
            _ => false,
        }
    }
}

/// `--idle-poll-us`, else `$CARMINE_IDLE_POLL_US`, else the default.
fn idle_poll_budget(flag: Option<u64>, env: Option<String>) -> Result<Duration> {
    let micros = match (flag, env) {
        (Some(micros), _) => micros,
        (None, Some(text)) => text.trim().parse().map_err(|_| {
            anyhow::anyhow!("CARMINE_IDLE_POLL_US={text:?} is not a number of microseconds")
        })?,
        (None, None) => return Ok(carmine_msgr::idle_poll::IDLE_POLL_DEFAULT),
    };
    if micros > IDLE_POLL_MAX_US {
        anyhow::bail!("idle polling of {micros} µs is more than the {IDLE_POLL_MAX_US} µs allowed");
    }
    Ok(Duration::from_micros(micros))
}

/// A sleep deferred longer than this is a busy loop, not a latency choice.
const IDLE_POLL_MAX_US: u64 = 100_000;

/// Runs `call` with a client connected to the configured cluster.
pub fn with_client<F, Fut, T>(cli_conf: Option<&std::path::Path>, call: F) -> Result<T>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let (_, conf) = conf::load(cli_conf)?;
    let mut config = ClientConfig::new(conf.mon_addrs.clone());
    if let Some(seconds) = conf.op_timeout_seconds {
        config.op_timeout = Duration::from_secs(seconds);
    }
    let runtime =
        carmine_msgr::idle_poll::current_thread_runtime(carmine_msgr::idle_poll::process_budget())?;
    runtime.block_on(async move {
        let client = Client::connect(config).await?;
        call(client).await
    })
}

pub fn dispatch(cli: Cli) -> Result<()> {
    let conf = cli.conf.as_deref();
    let json = cli.format == Format::Json;
    let budget = idle_poll_budget(cli.idle_poll_us, std::env::var("CARMINE_IDLE_POLL_US").ok())?;
    carmine_msgr::idle_poll::set_process_budget(budget);
    match cli.command {
        Command::Vstart(args) => vstart::vstart(args),
        Command::Vstop(args) => vstart::vstop(args, conf),
        Command::Status => with_client(conf, |c| async move { admin::status(&c, json).await }),
        Command::Health { detail } => with_client(conf, |c| async move {
            admin::health(&c, detail.is_some(), json).await
        }),
        Command::Mon(args) => daemons::mon(args, conf, json),
        Command::Osd(args) => daemons::osd(args, conf, json),
        Command::Pool(command) => {
            with_client(
                conf,
                |c| async move { admin::pool(&c, command, json).await },
            )
        }
        Command::Config(command) => {
            with_client(
                conf,
                |c| async move { admin::config(&c, command, json).await },
            )
        }
        Command::Pg(command) => {
            with_client(conf, |c| async move { admin::pg(&c, command, json).await })
        }
        Command::Obj(command) => {
            with_client(
                conf,
                |c| async move { objects::run(&c, command, json).await },
            )
        }
        Command::Store(command) => store::run(command, json),
        Command::Sim { mut args } => {
            if json {
                args.extend(["--format".to_string(), "json".to_string()]);
            }
            // The daemons' own log lines, when asked for (`CARMINE_LOG=info`).
            if std::env::var_os("CARMINE_LOG").is_some() {
                crate::daemons::init_daemon_logging();
            }
            let code = carmine_sim::main_cli(&args);
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Command::Bench(BenchCli {
            layer: Some(layer), ..
        }) => match layer {
            BenchLayer::Osd(args) => crate::bench_osd::run(args, json),
            BenchLayer::Msgr(args) => crate::bench_msgr::run(args, json),
        },
        Command::Bench(args) => with_client(conf, |c| async move {
            let (Some(pool), Some(mode)) = (args.pool, args.mode) else {
                anyhow::bail!("usage: carmine bench POOL write|seq|rand");
            };
            let args = bench::BenchArgs {
                pool,
                mode,
                block_size_bytes: args.block_size,
                concurrency: args.concurrency,
                seconds: args.seconds,
                cleanup: !args.no_cleanup,
                run_name: args.run_name,
                max_objects: args.max_objects,
                json,
            };
            bench::run(&c, args).await.map(|_| ())
        }),
        Command::Crush(command) => crush::run(command),
        Command::Image(command) => {
            with_client(conf, |c| async move { image::run(&c, command, json).await })
        }
    }
}

#[cfg(test)]
mod idle_poll_tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_the_environment_then_the_default() {
        let micros = |d: Duration| d.as_micros();
        assert_eq!(
            micros(idle_poll_budget(Some(0), Some("50".into())).unwrap()),
            0
        );
        assert_eq!(
            micros(idle_poll_budget(None, Some(" 50 ".into())).unwrap()),
            50
        );
        assert_eq!(
            idle_poll_budget(None, None).unwrap(),
            carmine_msgr::idle_poll::IDLE_POLL_DEFAULT
        );
    }

    #[test]
    fn a_bad_budget_is_a_clear_error() {
        let error = idle_poll_budget(None, Some("fast".into())).unwrap_err();
        assert!(
            error.to_string().contains("CARMINE_IDLE_POLL_US=\"fast\""),
            "{error}"
        );
        let error = idle_poll_budget(Some(IDLE_POLL_MAX_US + 1), None).unwrap_err();
        assert!(error.to_string().contains("more than"), "{error}");
        assert!(idle_poll_budget(Some(IDLE_POLL_MAX_US), None).is_ok());
    }
}
