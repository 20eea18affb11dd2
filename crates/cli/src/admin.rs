//! Cluster administration verbs: status, health, pools, OSDs (as `ceph ...`).

use crate::output::{bytes, count};
use anyhow::{bail, Context, Result};
use carmine_client::Client;
use carmine_clustermap::settings::{
    MON_OSD_BACKFILLFULL_RATIO, MON_OSD_FULL_RATIO, MON_OSD_NEARFULL_RATIO,
};
use carmine_clustermap::{Fullness, OsdFlags, PoolSpec, WEIGHT_IN};
use carmine_proto::{ClusterStatus, Command, CommandOutput};
use carmine_types::{OsdId, PgId};
use clap::Subcommand;
use serde_json::json;

#[derive(Subcommand, Debug)]
pub enum PoolCommand {
    /// Create a replicated pool.
    Create {
        name: String,
        /// Replicas.
        #[arg(long, default_value_t = 3)]
        size: u8,
        /// Replicas that must be up for IO (default: size - size/2).
        #[arg(long)]
        min_size: Option<u8>,
        #[arg(long, default_value_t = 32)]
        pg_num: u32,
        /// CRUSH rule id.
        #[arg(long, default_value_t = 0)]
        rule: u32,
    },
    /// List pools.
    Ls,
    /// Delete a pool and all its data.
    Rm {
        name: String,
        #[arg(long = "yes-i-really-really-mean-it")]
        confirm: bool,
    },
    /// Change a pool setting (size, min_size, crush_rule), as `ceph osd pool set`.
    Set {
        name: String,
        key: String,
        value: String,
    },
    /// Show a pool's settings (one, or all), as `ceph osd pool get`.
    Get {
        name: String,
        /// size, min_size, pg_num, pgp_num, crush_rule or all.
        #[arg(default_value = "all")]
        key: String,
    },
}

/// `carmine config ...`, as `ceph config-key`: key/values kept in the cluster map.
#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Set KEY to VALUE.
    Set { key: String, value: String },
    /// Print KEY's value.
    Get { key: String },
    /// Remove KEY.
    Rm { key: String },
    /// Every key and value.
    Dump,
}

pub async fn config(client: &Client, command_: ConfigCommand, json: bool) -> Result<()> {
    match command_ {
        ConfigCommand::Set { key, value } => {
            let value = Some(value);
            done(client, Command::ConfigSet { key, value }, json).await
        }
        ConfigCommand::Rm { key } => {
            done(client, Command::ConfigSet { key, value: None }, json).await
        }
        ConfigCommand::Get { key } => {
            let map = client.map();
            let value = map
                .config
                .get(&key)
                .with_context(|| format!("config key {key:?} does not exist"))?;
            if json {
                println!("{}", json!({ "key": key, "value": value }));
            } else {
                println!("{value}");
            }
            Ok(())
        }
        ConfigCommand::Dump => {
            let map = client.map();
            if json {
                println!("{}", json!(map.config));
            } else {
                for (key, value) in &map.config {
                    println!("{key} = {value}");
                }
            }
            Ok(())
        }
    }
}

/// `carmine pg ...`, as `ceph pg`.
#[derive(Subcommand, Debug)]
pub enum PgCommand {
    /// PG counts by state, data and usage, as `ceph pg stat`.
    Stat,
    /// Every PG with its state, acting set, objects and bytes, as `ceph pg dump`.
    Dump,
    /// The objects of a PG that no reachable OSD holds, with the version each needs,
    /// as `ceph pg PGID list_unfound`. They come back when an OSD holding them does.
    #[command(name = "list_unfound", alias = "list-unfound")]
    ListUnfound {
        /// The PG, as `pg dump` names it (POOL.SEED, the seed in hex).
        pgid: String,
    },
    /// Gives up a PG's unfound objects, as `ceph pg PGID mark_unfound_lost delete`:
    /// their removal is logged, so the PG can recover and go clean without them. For
    /// objects whose every holder is gone for good (see `osd lost`).
    #[command(name = "mark_unfound_lost", alias = "mark-unfound-lost")]
    MarkUnfoundLost {
        /// The PG, as `pg dump` names it.
        pgid: String,
        /// `delete` (Ceph's `revert`, back to an older version, is not built).
        mode: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum OsdCommand {
    /// The CRUSH hierarchy with OSD status, as `ceph osd tree`.
    Tree,
    /// Every OSD's state and addresses, as `ceph osd dump`.
    Dump,
    /// Usage per OSD, as `ceph osd df`.
    Df,
    /// Mark an OSD out (its data moves elsewhere).
    Out { id: u32 },
    /// Mark an OSD in.
    In { id: u32 },
    /// Mark an OSD down (it asserts itself up again if it is running).
    Down { id: u32 },
    /// Declare a down OSD's data lost, as `ceph osd lost`: PGs waiting for it go on
    /// without it, and objects only it held become unfound. For an OSD that will not
    /// return (a dead disk); one that does comes back as an ordinary stray copy.
    Lost {
        id: u32,
        /// Confirms that what only this OSD holds may be lost for good.
        #[arg(long = "yes-i-really-mean-it")]
        yes_i_really_mean_it: bool,
    },
    /// Remove a down OSD from the map and the CRUSH hierarchy for good, as `ceph osd
    /// purge`: its id is free again. Refused unless `safe-to-destroy` says yes (mark
    /// it out and let its data move first), or with --force.
    Purge {
        id: u32,
        /// Confirms that the OSD goes for good.
        #[arg(long = "yes-i-really-mean-it")]
        yes_i_really_mean_it: bool,
        /// Purge even if PGs still map to it or are not all active+clean: what only
        /// it holds is then given up, as after `osd lost`.
        #[arg(long)]
        force: bool,
    },
    /// Whether removing an OSD keeps every PG's data on other copies, as `ceph osd
    /// safe-to-destroy`: no PG maps to it and every PG is active+clean. Exits
    /// non-zero, saying why, when not.
    SafeToDestroy { id: u32 },
    /// Where an object lives: its PG and the OSDs serving it, as `ceph osd map`.
    Map { pool: String, object: String },
    /// Set how willing an OSD is to be primary, 0.0..=1.0, as `ceph osd primary-affinity`.
    PrimaryAffinity { id: u32, weight: f64 },
    /// Set an override weight, 0.0 (out) ..= 1.0, as `ceph osd reweight`.
    Reweight { id: u32, weight: f64 },
    /// Set a cluster flag: noout, nodown, noup or noin, as `ceph osd set`.
    Set { flag: String },
    /// Clear a cluster flag, as `ceph osd unset`.
    Unset { flag: String },
    /// Set the usage ratio at which an OSD is marked full and writes that add data
    /// are refused (default 0.95), as `ceph osd set-full-ratio`.
    SetFullRatio { ratio: f64 },
    /// Set the usage ratio at which an OSD is marked backfillfull (default 0.90), as
    /// `ceph osd set-backfillfull-ratio`.
    SetBackfillfullRatio { ratio: f64 },
    /// Set the usage ratio at which an OSD is marked nearfull, a warning (default
    /// 0.85), as `ceph osd set-nearfull-ratio`.
    SetNearfullRatio { ratio: f64 },
}

async fn command(client: &Client, command: Command) -> Result<CommandOutput> {
    Ok(client.command(command).await?)
}

async fn done(client: &Client, command_: Command, json: bool) -> Result<()> {
    match command(client, command_).await? {
        CommandOutput::Done { epoch, message } => {
            if json {
                println!("{}", json!({"epoch": epoch.0, "message": message}));
            } else {
                println!("{message}");
            }
            // Wait until our map shows the change, so a script's next command sees it.
            client.wait_for_epoch(epoch).await?;
            Ok(())
        }
        CommandOutput::Status(_) | CommandOutput::PgStats { .. } => {
            bail!("the monitor answered with a report instead of a result")
        }
    }
}

pub async fn fetch_status(client: &Client) -> Result<ClusterStatus> {
    match command(client, Command::Status).await? {
        CommandOutput::Status(status) => Ok(status),
        _ => bail!("the monitor did not answer with a status"),
    }
}

fn status_json(status: &ClusterStatus) -> serde_json::Value {
    json!({
        "fsid": format!("{:032x}", status.fsid),
        "epoch": status.epoch.0,
        "health": {"status": status.health, "checks": status.health_checks},
        "monmap": {"num_mons": status.mon_count, "quorum": status.mon_quorum, "leader": status.mon_leader},
        "osdmap": {"num_osds": status.osd_count, "num_up_osds": status.osds_up, "num_in_osds": status.osds_in},
        "pgmap": {
            "num_pools": status.pools.len(),
            "num_pgs": status.pg_count,
            "pgs_by_state": status.pg_states.iter().map(|(s, n)| json!({"state_name": s, "count": n})).collect::<Vec<_>>(),
            "num_objects": status.object_count,
            "data_bytes": status.data_bytes,
            "bytes_used": status.raw_used_bytes,
            "read_bytes_sec": status.client_read_bytes_per_second,
            "write_bytes_sec": status.client_write_bytes_per_second,
            "op_per_sec": status.client_ops_per_second,
        },
        "pools": status.pools.iter().map(|p| json!({
            "name": p.name, "id": p.id, "size": p.size, "min_size": p.min_size,
            "pg_num": p.pg_num, "objects": p.object_count, "bytes": p.data_bytes,
        })).collect::<Vec<_>>(),
    })
}

pub async fn status(client: &Client, json: bool) -> Result<()> {
    let status = fetch_status(client).await?;
    if json {
        println!("{}", status_json(&status));
        return Ok(());
    }
    println!("  cluster:");
    println!("    id:     {:032x}", status.fsid);
    println!("    health: {}", status.health);
    for check in &status.health_checks {
        println!("            {check}");
    }
    println!();
    println!("  services:");
    println!(
        "    mon: {} daemons, map epoch {}",
        status.mon_count, status.epoch.0
    );
    println!(
        "    osd: {} osds: {} up, {} in",
        status.osd_count, status.osds_up, status.osds_in
    );
    println!();
    println!("  data:");
    println!(
        "    pools:   {} pools, {} pgs",
        status.pools.len(),
        status.pg_count
    );
    println!(
        "    objects: {} objects, {}",
        count(status.object_count),
        bytes(status.data_bytes)
    );
    println!(
        "    usage:   {} used over all replicas",
        bytes(status.raw_used_bytes)
    );
    let states: Vec<String> = status
        .pg_states
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    println!(
        "    pgs:     {}",
        if states.is_empty() {
            "none".into()
        } else {
            states.join(", ")
        }
    );
    println!();
    println!("  io:");
    println!(
        "    client:   {}/s rd, {}/s wr, {} op/s",
        bytes(status.client_read_bytes_per_second),
        bytes(status.client_write_bytes_per_second),
        status.client_ops_per_second
    );
    Ok(())
}

pub async fn health(client: &Client, detail: bool, json: bool) -> Result<()> {
    let status = fetch_status(client).await?;
    if json {
        println!(
            "{}",
            json!({"status": status.health, "checks": status.health_checks})
        );
    } else if detail || status.health_checks.is_empty() {
        println!("{}", status.health);
        for check in &status.health_checks {
            println!("    {check}");
        }
    } else {
        let names: Vec<&str> = status
            .health_checks
            .iter()
            .map(|c| c.split(':').next().unwrap_or(c))
            .collect();
        println!("{} {}", status.health, names.join("; "));
    }
    Ok(())
}

pub async fn mon_stat(client: &Client, json: bool) -> Result<()> {
    let status = fetch_status(client).await?;
    let conf_mons = status.mon_count;
    if json {
        println!(
            "{}",
            json!({"epoch": status.epoch.0, "num_mons": conf_mons})
        );
    } else {
        println!("e{}: {conf_mons} mons", status.epoch.0);
    }
    Ok(())
}

pub async fn pool(client: &Client, command_: PoolCommand, json: bool) -> Result<()> {
    match command_ {
        PoolCommand::Create {
            name,
            size,
            min_size,
            pg_num,
            rule,
        } => {
            let spec = PoolSpec {
                name,
                size,
                min_size,
                pg_num,
                crush_rule: rule,
            };
            done(client, Command::PoolCreate(spec), json).await
        }
        PoolCommand::Rm { name, confirm } => {
            done(client, Command::PoolDelete { name, confirm }, json).await
        }
        PoolCommand::Set { name, key, value } => {
            done(client, Command::PoolSet { name, key, value }, json).await
        }
        PoolCommand::Get { name, key } => pool_get(client, &name, &key, json),
        PoolCommand::Ls => {
            let map = client.map();
            if json {
                let pools: Vec<_> = map
                    .pools
                    .values()
                    .map(|p| json!({"id": p.id.0, "name": p.name, "size": p.size, "min_size": p.min_size, "pg_num": p.pg_num, "crush_rule": p.crush_rule}))
                    .collect();
                println!("{}", serde_json::Value::Array(pools));
            } else {
                for pool in map.pools.values() {
                    println!("{}", pool.name);
                }
            }
            Ok(())
        }
    }
}

pub async fn osd(client: &Client, command_: OsdCommand, json: bool) -> Result<()> {
    match command_ {
        OsdCommand::Tree => {
            osd_tree(client, json);
            Ok(())
        }
        OsdCommand::Dump => {
            osd_dump(client, json);
            Ok(())
        }
        OsdCommand::Df => osd_df(client, json).await,
        OsdCommand::Out { id } => done(client, Command::OsdOut(OsdId(id)), json).await,
        OsdCommand::In { id } => done(client, Command::OsdIn(OsdId(id)), json).await,
        OsdCommand::Down { id } => done(client, Command::OsdDown(OsdId(id)), json).await,
        OsdCommand::Lost {
            id,
            yes_i_really_mean_it,
        } => {
            let lost = Command::OsdLost {
                osd: OsdId(id),
                confirm: yes_i_really_mean_it,
            };
            done(client, lost, json).await
        }
        OsdCommand::Purge {
            id,
            yes_i_really_mean_it,
            force,
        } => {
            let purge = Command::OsdPurge {
                osd: OsdId(id),
                confirm: yes_i_really_mean_it,
                force,
            };
            done(client, purge, json).await
        }
        OsdCommand::SafeToDestroy { id } => {
            done(client, Command::OsdSafeToDestroy(OsdId(id)), json).await
        }
        OsdCommand::Map { pool, object } => osd_map(client, &pool, &object, json),
        OsdCommand::PrimaryAffinity { id, weight } => {
            if !(0.0..=1.0).contains(&weight) {
                bail!("primary affinity must be between 0 and 1, got {weight}");
            }
            let affinity = (weight * 65536.0) as u32;
            done(
                client,
                Command::OsdPrimaryAffinity(OsdId(id), affinity),
                json,
            )
            .await
        }
        OsdCommand::Reweight { id, weight } => {
            if !(0.0..=1.0).contains(&weight) {
                bail!("reweight must be between 0 and 1, got {weight}");
            }
            let weight = (weight * f64::from(WEIGHT_IN)).round() as u32;
            done(client, Command::OsdReweight(OsdId(id), weight), json).await
        }
        OsdCommand::Set { flag } => set_flag(client, &flag, true, json).await,
        OsdCommand::Unset { flag } => set_flag(client, &flag, false, json).await,
        OsdCommand::SetFullRatio { ratio } => {
            set_ratio(client, MON_OSD_FULL_RATIO, ratio, json).await
        }
        OsdCommand::SetBackfillfullRatio { ratio } => {
            set_ratio(client, MON_OSD_BACKFILLFULL_RATIO, ratio, json).await
        }
        OsdCommand::SetNearfullRatio { ratio } => {
            set_ratio(client, MON_OSD_NEARFULL_RATIO, ratio, json).await
        }
    }
}

/// The ratios live in the map's config (as Ceph keeps them in the OSD map); the
/// monitor checks the value, and reports ratios out of order as a health warning.
async fn set_ratio(client: &Client, key: &str, ratio: f64, json: bool) -> Result<()> {
    let value = ratio.to_string();
    if let Err(error) = carmine_clustermap::settings::validate(key, &value) {
        bail!("{error}");
    }
    let command = Command::ConfigSet {
        key: key.to_string(),
        value: Some(value),
    };
    done(client, command, json).await
}

async fn set_flag(client: &Client, name: &str, set: bool, json: bool) -> Result<()> {
    let Some(flag) = OsdFlags::by_name(name) else {
        let known: Vec<&str> = OsdFlags::NAMED.iter().map(|(n, _)| *n).collect();
        bail!(
            "unknown flag {name:?}; expected one of {}",
            known.join(", ")
        );
    };
    done(client, Command::OsdFlag { flag, set }, json).await
}

/// `carmine pool get NAME KEY|all`.
fn pool_get(client: &Client, name: &str, key: &str, json: bool) -> Result<()> {
    let map = client.map();
    let pool = map
        .pool_by_name(name)
        .with_context(|| format!("pool '{name}' does not exist"))?;
    let values: Vec<(&str, u64)> = vec![
        ("size", u64::from(pool.size)),
        ("min_size", u64::from(pool.min_size)),
        ("pg_num", u64::from(pool.pg_num)),
        ("pgp_num", u64::from(pool.pgp_num)),
        ("crush_rule", u64::from(pool.crush_rule)),
    ];
    let chosen: Vec<(&str, u64)> = if key == "all" {
        values
    } else {
        let found = values.into_iter().find(|(k, _)| *k == key);
        vec![found.with_context(|| {
            format!("unknown pool setting {key:?}; expected size, min_size, pg_num, pgp_num, crush_rule or all")
        })?]
    };
    if json {
        let mut object = serde_json::Map::new();
        object.insert("pool".into(), json!(pool.name));
        object.insert("pool_id".into(), json!(pool.id.0));
        for (k, v) in &chosen {
            object.insert((*k).into(), json!(v));
        }
        println!("{}", serde_json::Value::Object(object));
    } else {
        for (k, v) in chosen {
            println!("{k}: {v}");
        }
    }
    Ok(())
}

pub async fn pg(client: &Client, command_: PgCommand, json: bool) -> Result<()> {
    match command_ {
        PgCommand::Stat => {
            let status = fetch_status(client).await?;
            if json {
                let states: Vec<_> = status
                    .pg_states
                    .iter()
                    .map(|(name, count)| json!({"name": name, "num": count}))
                    .collect();
                println!(
                    "{}",
                    json!({"pg_summary": {"num_pgs": status.pg_count, "num_pg_by_state": states, "num_bytes": status.data_bytes, "raw_bytes_used": status.raw_used_bytes, "num_objects": status.object_count}})
                );
            } else {
                let states: Vec<String> = status
                    .pg_states
                    .iter()
                    .map(|(name, count)| format!("{count} {name}"))
                    .collect();
                println!(
                    "{} pgs: {}; {} data, {} used, {} objects",
                    status.pg_count,
                    states.join(", "),
                    bytes(status.data_bytes),
                    bytes(status.raw_used_bytes),
                    status.object_count
                );
            }
            Ok(())
        }
        PgCommand::Dump => {
            let (epoch, pgs) = match command(client, Command::PgDump).await? {
                CommandOutput::PgStats { epoch, pgs } => (epoch, pgs),
                _ => bail!("the monitor did not answer with PG stats"),
            };
            if json {
                let stats: Vec<_> = pgs
                    .iter()
                    .map(|pg| {
                        json!({
                            "pgid": pg.pgid.to_string(),
                            "state": pg.state.name(),
                            "num_objects": pg.object_count,
                            "num_bytes": pg.data_bytes,
                            "last_update": pg.last_update.to_string(),
                            "acting": pg.acting.iter().map(|o| o.0).collect::<Vec<_>>(),
                            "acting_primary": pg.acting.first().map(|o| o.0),
                            "num_objects_unfound": pg.unfound,
                            "reason": pg.reason,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    json!({"pg_map": {"epoch": epoch.0, "pg_stats": stats}})
                );
            } else {
                println!(
                    "{:<10} {:>8} {:>8} {:>12} {:<28} {:<14} ACTING",
                    "PG_STAT", "OBJECTS", "UNFOUND", "BYTES", "STATE", "LOG_HEAD"
                );
                for pg in &pgs {
                    let acting: Vec<String> = pg.acting.iter().map(|o| o.0.to_string()).collect();
                    println!(
                        "{:<10} {:>8} {:>8} {:>12} {:<28} {:<14} [{}]",
                        pg.pgid.to_string(),
                        pg.object_count,
                        pg.unfound,
                        pg.data_bytes,
                        pg.state.name(),
                        pg.last_update.to_string(),
                        acting.join(",")
                    );
                    // Why an inactive PG does not serve, under its row.
                    if !pg.reason.is_empty() {
                        println!("{:<10} {}", "", pg.reason);
                    }
                }
            }
            Ok(())
        }
        PgCommand::ListUnfound { pgid } => list_unfound(client, &pgid, json).await,
        PgCommand::MarkUnfoundLost { pgid, mode } => {
            mark_unfound_lost(client, &pgid, &mode, json).await
        }
    }
}

/// A PG id the map holds.
fn existing_pg(client: &Client, pgid: &str) -> Result<PgId> {
    let pgid: PgId = pgid.parse().map_err(anyhow::Error::msg)?;
    let pool = client.map().pools.get(&pgid.pool).map(|pool| pool.pg_num);
    match pool {
        None => bail!("pg {pgid}: no pool {} (see `carmine pool ls`)", pgid.pool.0),
        Some(pg_num) if pgid.seed >= pg_num => {
            bail!("pg {pgid}: pool {} has {pg_num} pgs", pgid.pool.0)
        }
        Some(_) => Ok(pgid),
    }
}

/// `pg mark_unfound_lost PGID delete`.
async fn mark_unfound_lost(client: &Client, pgid: &str, mode: &str, json: bool) -> Result<()> {
    match mode {
        "delete" => {}
        "revert" => bail!(
            "mark_unfound_lost revert is not built: Carmine keeps no older versions of an \
             object outside snapshots; `delete` gives the objects up"
        ),
        other => bail!("mark_unfound_lost takes `delete`, not {other:?}"),
    }
    let pgid = existing_pg(client, pgid)?;
    let lost = client
        .mark_unfound_lost(pgid)
        .await
        .with_context(|| format!("marking the unfound objects of pg {pgid} lost"))?;
    if json {
        let listed: Vec<_> = (lost.iter())
            .map(|(name, need)| json!({"oid": name, "need": need.to_string()}))
            .collect();
        println!("{}", json!({"pgid": pgid.to_string(), "deleted": listed}));
    } else if lost.is_empty() {
        println!("pg {pgid} has no unfound objects");
    } else {
        println!(
            "pg {pgid} has {} objects unfound and apparently lost; deleted them",
            lost.len()
        );
        for (name, need) in &lost {
            println!("  {name} (needed {need})");
        }
    }
    Ok(())
}

/// `pg list_unfound PGID`: every page of the primary's answer.
async fn list_unfound(client: &Client, pgid: &str, json: bool) -> Result<()> {
    let pgid = existing_pg(client, pgid)?;
    let mut objects = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = client
            .list_unfound(pgid, cursor, 1024)
            .await
            .with_context(|| format!("listing the unfound objects of pg {pgid}"))?;
        objects.extend(page);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if json {
        let listed: Vec<_> = (objects.iter())
            .map(|(name, need)| json!({"oid": {"oid": name}, "need": need.to_string()}))
            .collect();
        let answer = json!({"num_unfound": objects.len(), "objects": listed, "more": false});
        println!("{answer}");
    } else if objects.is_empty() {
        println!("pg {pgid} has no unfound objects");
    } else {
        println!("{:<14} OBJECT", "NEED");
        for (name, need) in &objects {
            println!("{:<14} {name}", need.to_string());
        }
    }
    Ok(())
}

fn osd_tree(client: &Client, json: bool) {
    let map = client.map();
    let rows = map.crush.tree_rows();
    if json {
        let nodes: Vec<_> = rows
            .iter()
            .map(|row| {
                let osd = (row.id >= 0).then(|| map.osd(OsdId(row.id as u32))).flatten();
                json!({
                    "id": row.id, "name": row.name, "type": row.type_name, "crush_weight": row.weight,
                    "depth": row.depth,
                    "status": osd.map(|o| if o.up { "up" } else { "down" }),
                    "reweight": osd.map(|o| f64::from(o.weight) / f64::from(WEIGHT_IN)),
                })
            })
            .collect();
        println!("{}", json!({"nodes": nodes}));
        return;
    }
    println!(
        "{:>4}  {:>8}  {:<30}  {:>6}  {:>8}",
        "ID", "WEIGHT", "TYPE NAME", "STATUS", "REWEIGHT"
    );
    for row in rows {
        let label = format!("{}{} {}", "    ".repeat(row.depth), row.type_name, row.name);
        if row.id >= 0 {
            let osd = map.osd(OsdId(row.id as u32));
            let status = match osd {
                Some(o) if o.up => "up",
                Some(_) => "down",
                None => "dne",
            };
            let reweight = osd.map_or(0.0, |o| f64::from(o.weight) / f64::from(WEIGHT_IN));
            println!(
                "{:>4}  {:>8.5}  {label:<30}  {status:>6}  {reweight:>8.5}",
                row.id, row.weight
            );
        } else {
            println!("{:>4}  {:>8.5}  {label:<30}", row.id, row.weight);
        }
    }
}

fn osd_dump(client: &Client, json: bool) {
    let map = client.map();
    if json {
        let osds: Vec<_> = map
            .osds
            .values()
            .map(|o| json!({"osd": o.id.0, "up": o.up, "in": o.is_in(), "weight": f64::from(o.weight) / f64::from(WEIGHT_IN), "up_from": o.up_from.0, "up_thru": o.up_thru.0, "down_at": o.down_at.0, "lost_at": o.lost_at.0, "host": o.host, "primary_affinity": f64::from(o.primary_affinity) / 65536.0, "state": o.fullness.name(), "addrs": o.shard_addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>()}))
            .collect();
        let pools: Vec<_> = map
            .pools
            .values()
            .map(|p| json!({"pool": p.id.0, "pool_name": p.name, "size": p.size, "min_size": p.min_size, "crush_rule": p.crush_rule, "pg_num": p.pg_num, "pg_placement_num": p.pgp_num}))
            .collect();
        println!(
            "{}",
            json!({"epoch": map.epoch.0, "fsid": format!("{:032x}", map.fsid), "flags": map.flags.names().join(","), "pools": pools, "osds": osds})
        );
        return;
    }
    println!("epoch {}", map.epoch.0);
    println!("fsid {:032x}", map.fsid);
    println!("flags {}", map.flags.names().join(","));
    let ratios = map.full_ratios();
    println!("full_ratio {}", ratios.full);
    println!("backfillfull_ratio {}", ratios.backfillfull);
    println!("nearfull_ratio {}", ratios.nearfull);
    for pool in map.pools.values() {
        println!(
            "pool {} '{}' replicated size {} min_size {} crush_rule {} pg_num {} pgp_num {}",
            pool.id.0,
            pool.name,
            pool.size,
            pool.min_size,
            pool.crush_rule,
            pool.pg_num,
            pool.pgp_num
        );
    }
    for osd in map.osds.values() {
        let addrs: Vec<String> = osd.shard_addrs.iter().map(|a| a.to_string()).collect();
        println!(
            "{} {} {}{} weight {:.5} up_from {} up_thru {} down_at {} lost_at {} host {} shards [{}]",
            osd.id,
            if osd.up { "up" } else { "down" },
            if osd.is_in() { "in" } else { "out" },
            match osd.fullness {
                Fullness::None => String::new(),
                state => format!(" {}", state.name()),
            },
            f64::from(osd.weight) / f64::from(WEIGHT_IN),
            osd.up_from.0,
            osd.up_thru.0,
            osd.down_at.0,
            osd.lost_at.0,
            osd.host,
            addrs.join(",")
        );
    }
}

async fn osd_df(client: &Client, json: bool) -> Result<()> {
    let status = fetch_status(client).await?;
    if json {
        let nodes: Vec<_> = status
            .osds
            .iter()
            .map(|o| json!({"id": o.osd.0, "up": o.up, "reweight": f64::from(o.weight) / f64::from(WEIGHT_IN), "objects": o.object_count, "data_bytes": o.data_bytes, "pgs": o.pg_count, "shards": o.shard_count, "ops": o.ops_total, "wrong_shard_ops": o.wrong_shard_total}))
            .collect();
        println!("{}", json!({"nodes": nodes}));
        return Ok(());
    }
    println!(
        "{:>4}  {:>8}  {:>10}  {:>10}  {:>5}  {:>6}",
        "ID", "REWEIGHT", "OBJECTS", "DATA", "PGS", "STATUS"
    );
    for osd in &status.osds {
        println!(
            "{:>4}  {:>8.5}  {:>10}  {:>10}  {:>5}  {:>6}",
            osd.osd.0,
            f64::from(osd.weight) / f64::from(WEIGHT_IN),
            osd.object_count,
            bytes(osd.data_bytes),
            osd.pg_count,
            if osd.up { "up" } else { "down" }
        );
    }
    Ok(())
}

fn osd_map(client: &Client, pool: &str, object: &str, json: bool) -> Result<()> {
    let map = client.map();
    let pool_id = client.pool_id(pool)?;
    let pg = map.object_to_pg(pool_id, object).context("pool vanished")?;
    let mapping = map.pg_mapping(pg).context("pool vanished")?;
    let ids = |osds: &[OsdId]| osds.iter().map(|o| o.0).collect::<Vec<_>>();
    let primary = mapping.primary.map_or(-1, |p| i64::from(p.0));
    if json {
        println!(
            "{}",
            json!({"epoch": map.epoch.0, "pool": pool, "pool_id": pool_id.0, "objname": object, "pgid": pg.to_string(), "up": ids(&mapping.up), "up_primary": primary, "acting": ids(&mapping.acting), "acting_primary": primary})
        );
    } else {
        println!(
            "osdmap e{} pool '{pool}' ({}) object '{object}' -> pg {pg} -> up ({:?}, p{primary}) acting ({:?}, p{primary})",
            map.epoch.0, pool_id.0, ids(&mapping.up), ids(&mapping.acting)
        );
    }
    Ok(())
}
