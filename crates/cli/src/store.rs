//! `carmine store fsck|stat --data DIR`: check and describe an OSD's LogStore devices
//! (one `logstore.shardN` file per shard) without starting the OSD.

use anyhow::{bail, Context, Result};
use carmine_store::logstore::{fsck, stat};
use carmine_store::FileDevice;
use clap::Subcommand;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Check every record's checksum and the index rebuilt from them.
    Fsck {
        #[arg(long)]
        data: PathBuf,
    },
    /// Segments, live bytes, records and checkpoints of each shard's store.
    Stat {
        #[arg(long)]
        data: PathBuf,
    },
}

fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("logstore.shard"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "{} holds no LogStore (no logstore.shardN files); was the OSD run with --store log?",
            dir.display()
        );
    }
    Ok(files)
}

pub fn run(command: StoreCommand, json: bool) -> Result<()> {
    let (dir, check) = match &command {
        StoreCommand::Fsck { data } => (data, true),
        StoreCommand::Stat { data } => (data, false),
    };
    let mut problems = 0;
    for path in shard_files(dir)? {
        let device =
            FileDevice::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
        let name = path.display();
        if check {
            let report = fsck(&device).with_context(|| format!("{name} is unreadable"))?;
            let clean = report.is_clean();
            if json {
                println!(
                    "{}",
                    serde_json::json!({"device": name.to_string(), "report": format!("{report:?}")})
                );
            } else {
                println!("{name}: {report:#?}");
            }
            if !clean {
                problems += 1;
            }
        } else {
            let stat = stat(&device).with_context(|| format!("{name} is unreadable"))?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"device": name.to_string(), "stat": format!("{stat:?}")})
                );
            } else {
                println!("{name}: {stat:#?}");
            }
        }
    }
    if problems > 0 {
        bail!("{problems} store(s) have problems; see above");
    }
    Ok(())
}
