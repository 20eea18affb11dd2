//! `carmine image snap …`, as `rbd snap`: create, ls, rm, rollback, protect,
//! unprotect. Each takes `POOL/IMAGE@SNAP` (`ls` takes `POOL/IMAGE`).

use crate::output::bytes;
use anyhow::{bail, Result};
use carmine_block::{snapshot, ImageSpec};
use carmine_client::Client;
use clap::Subcommand;
use serde_json::json;

#[derive(Subcommand, Debug)]
pub enum SnapCommand {
    /// Take snapshot SNAP of the image: POOL/IMAGE@SNAP.
    Create { spec: String },
    /// List the snapshots of POOL/IMAGE.
    Ls { spec: String },
    /// Remove a snapshot (refused while protected); its space is freed in the
    /// background.
    Rm { spec: String },
    /// Write the snapshot's content back to the image.
    Rollback { spec: String },
    /// Protect a snapshot from removal.
    Protect { spec: String },
    /// Allow a snapshot to be removed again.
    Unprotect { spec: String },
}

/// `POOL/IMAGE@SNAP`, with the snapshot required.
fn snap_spec(text: &str) -> Result<(ImageSpec, String)> {
    match ImageSpec::parse_with_snap(text)? {
        (spec, Some(snap)) => Ok((spec, snap)),
        (_, None) => bail!("'{text}' names no snapshot; expected POOL/IMAGE@SNAP"),
    }
}

pub async fn run(client: &Client, command: SnapCommand, json: bool) -> Result<()> {
    match command {
        SnapCommand::Create { spec } => {
            let (image, name) = snap_spec(&spec)?;
            let snap = snapshot::create(client, &image, &name).await?;
            if json {
                println!("{}", json!({"snapshot": spec, "id": snap.id}));
            } else {
                println!("created snapshot {spec} (id {})", snap.id);
            }
        }
        SnapCommand::Ls { spec } => {
            let image = ImageSpec::parse(&spec)?;
            let snaps = snapshot::list(client, &image).await?;
            if json {
                let rows: Vec<_> = snaps
                    .iter()
                    .map(|s| json!({"id": s.id, "name": s.name, "size": s.size_bytes, "protected": s.protected.to_string()}))
                    .collect();
                println!("{}", json!(rows));
            } else if !snaps.is_empty() {
                println!("{:>6} {:<32} {:>10} PROTECTED", "SNAPID", "NAME", "SIZE");
                for s in &snaps {
                    let protected = if s.protected { "yes" } else { "" };
                    let size = bytes(s.size_bytes);
                    println!("{:>6} {:<32} {:>10} {protected}", s.id, s.name, size);
                }
            }
        }
        SnapCommand::Rm { spec } => {
            let (image, name) = snap_spec(&spec)?;
            snapshot::remove(client, &image, &name).await?;
            if !json {
                println!("removed snapshot {spec}");
            }
        }
        SnapCommand::Rollback { spec } => {
            let (image, name) = snap_spec(&spec)?;
            let objects = snapshot::rollback(client, &image, &name).await?;
            if json {
                println!("{}", json!({"snapshot": spec, "objects": objects}));
            } else {
                println!("rolled {image} back to {spec} ({objects} objects)");
            }
        }
        SnapCommand::Protect { spec } => protect(client, &spec, json, true).await?,
        SnapCommand::Unprotect { spec } => protect(client, &spec, json, false).await?,
    }
    Ok(())
}

async fn protect(client: &Client, spec: &str, json: bool, protect: bool) -> Result<()> {
    let (image, name) = snap_spec(spec)?;
    snapshot::set_protected(client, &image, &name, protect).await?;
    if !json {
        let verb = if protect { "protected" } else { "unprotected" };
        println!("{verb} snapshot {spec}");
    }
    Ok(())
}
