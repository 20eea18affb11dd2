//! Object verbs, as the `rados` tool: put, get, stat, ls, rm, xattrs and omap.

use crate::output::{bytes, timestamp};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use carmine_client::Client;
use carmine_proto::{OpCode, OpOutput};
use carmine_types::limits::WRITE_BYTES_MAX;
use carmine_types::OsdId;
use clap::Subcommand;
use serde_json::json;
use std::io::{Read, Write};

#[derive(Subcommand, Debug)]
pub enum ObjCommand {
    /// Store FILE (or - for stdin) as object NAME, replacing it.
    Put {
        pool: String,
        name: String,
        file: String,
    },
    /// Write object NAME to FILE (or - for stdout).
    Get {
        pool: String,
        name: String,
        file: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Bytes to read (default: to the end).
        #[arg(long)]
        length: Option<u64>,
        /// Read the copy held by this OSD, whatever its role (to compare replicas).
        #[arg(long)]
        from_osd: Option<u32>,
    },
    /// Size, modification time and version.
    Stat {
        pool: String,
        name: String,
    },
    /// The object's snapshot clones and the snapshots each serves (`rados
    /// listsnaps`).
    Listsnaps {
        pool: String,
        name: String,
    },
    /// List the objects of a pool.
    Ls {
        pool: String,
    },
    /// Remove objects.
    Rm {
        pool: String,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Append FILE to object NAME.
    Append {
        pool: String,
        name: String,
        file: String,
    },
    /// Set the size of object NAME.
    Truncate {
        pool: String,
        name: String,
        size: u64,
    },
    /// Create an empty object; fails if it exists with --exclusive.
    Create {
        pool: String,
        name: String,
        #[arg(long)]
        exclusive: bool,
    },
    Setxattr {
        pool: String,
        name: String,
        key: String,
        value: String,
    },
    Getxattr {
        pool: String,
        name: String,
        key: String,
    },
    Rmxattr {
        pool: String,
        name: String,
        key: String,
    },
    Listxattr {
        pool: String,
        name: String,
    },
    Setomapval {
        pool: String,
        name: String,
        key: String,
        value: String,
    },
    Getomapval {
        pool: String,
        name: String,
        key: String,
    },
    Rmomapkey {
        pool: String,
        name: String,
        key: String,
    },
    Listomapkeys {
        pool: String,
        name: String,
    },
    Listomapvals {
        pool: String,
        name: String,
    },
}

fn read_input(file: &str) -> Result<Vec<u8>> {
    if file == "-" {
        let mut data = Vec::new();
        std::io::stdin().read_to_end(&mut data)?;
        Ok(data)
    } else {
        std::fs::read(file).with_context(|| format!("cannot read {file}"))
    }
}

fn write_output(file: &str, data: &[u8]) -> Result<()> {
    if file == "-" {
        std::io::stdout().write_all(data)?;
        Ok(())
    } else {
        std::fs::write(file, data).with_context(|| format!("cannot write {file}"))
    }
}

pub async fn run(client: &Client, command: ObjCommand, json: bool) -> Result<()> {
    match command {
        ObjCommand::Put { pool, name, file } => put(client, &pool, &name, &file).await,
        ObjCommand::Get {
            pool,
            name,
            file,
            offset,
            length,
            from_osd,
        } => {
            let data = get(client, &pool, &name, offset, length, from_osd.map(OsdId)).await?;
            write_output(&file, &data)
        }
        ObjCommand::Stat { pool, name } => stat(client, &pool, &name, json).await,
        ObjCommand::Listsnaps { pool, name } => listsnaps(client, &pool, &name, json).await,
        ObjCommand::Ls { pool } => {
            let mut names = client.list(&pool).await?;
            names.sort();
            if json {
                println!("{}", json!(names));
            } else {
                let mut out = std::io::stdout().lock();
                for name in names {
                    writeln!(out, "{name}")?;
                }
            }
            Ok(())
        }
        ObjCommand::Rm { pool, names } => {
            for name in names {
                client
                    .remove(&pool, &name)
                    .await
                    .with_context(|| format!("cannot remove {name}"))?;
            }
            Ok(())
        }
        other => run_small(client, other, json).await,
    }
}

async fn run_small(client: &Client, command: ObjCommand, json: bool) -> Result<()> {
    let text = |s: String| Bytes::from(s.into_bytes());
    match command {
        ObjCommand::Append { pool, name, file } => {
            let data = Bytes::from(read_input(&file)?);
            client
                .operate(&pool, &name, vec![OpCode::Append { data }])
                .await?;
        }
        ObjCommand::Truncate { pool, name, size } => {
            let op = OpCode::Truncate { size_bytes: size };
            client.operate(&pool, &name, vec![op]).await?;
        }
        ObjCommand::Create {
            pool,
            name,
            exclusive,
        } => {
            client
                .operate(&pool, &name, vec![OpCode::Create { exclusive }])
                .await?;
        }
        ObjCommand::Setxattr {
            pool,
            name,
            key,
            value,
        } => {
            let op = OpCode::SetXattr {
                name: key,
                value: text(value),
            };
            client.operate(&pool, &name, vec![op]).await?;
        }
        ObjCommand::Getxattr { pool, name, key } => {
            let reply = client
                .operate(&pool, &name, vec![OpCode::GetXattr { name: key }])
                .await?;
            if let Some(OpOutput::Xattr(value)) = reply.outputs.first() {
                std::io::stdout().write_all(value)?;
                println!();
            }
        }
        ObjCommand::Rmxattr { pool, name, key } => {
            client
                .operate(&pool, &name, vec![OpCode::RmXattr { name: key }])
                .await?;
        }
        ObjCommand::Listxattr { pool, name } => {
            let xattrs = client.getxattrs(&pool, &name).await?;
            if json {
                let map: serde_json::Map<String, serde_json::Value> = xattrs
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(String::from_utf8_lossy(v))))
                    .collect();
                println!("{}", serde_json::Value::Object(map));
            } else {
                for key in xattrs.keys() {
                    println!("{key}");
                }
            }
        }
        other => return run_omap(client, other, json).await,
    }
    Ok(())
}

async fn run_omap(client: &Client, command: ObjCommand, json: bool) -> Result<()> {
    let text = |s: String| Bytes::from(s.into_bytes());
    match command {
        ObjCommand::Setomapval {
            pool,
            name,
            key,
            value,
        } => {
            let op = OpCode::OmapSet {
                entries: vec![(text(key), text(value))],
            };
            client.operate(&pool, &name, vec![op]).await?;
        }
        ObjCommand::Getomapval { pool, name, key } => {
            let op = OpCode::OmapGetValsByKeys {
                keys: vec![text(key.clone())],
            };
            let reply = client.operate(&pool, &name, vec![op]).await?;
            match reply.outputs.first() {
                Some(OpOutput::Omap { entries, .. }) if !entries.is_empty() => {
                    std::io::stdout().write_all(&entries[0].1)?;
                    println!();
                }
                _ => bail!("omap key {key:?} does not exist on {name}"),
            }
        }
        ObjCommand::Rmomapkey { pool, name, key } => {
            let op = OpCode::OmapRm {
                keys: vec![text(key)],
            };
            client.operate(&pool, &name, vec![op]).await?;
        }
        ObjCommand::Listomapkeys { pool, name } | ObjCommand::Listomapvals { pool, name } => {
            let entries = client.omap_list(&pool, &name).await?;
            if json {
                let map: serde_json::Map<String, serde_json::Value> = entries
                    .iter()
                    .map(|(k, v)| {
                        (
                            String::from_utf8_lossy(k).into_owned(),
                            json!(String::from_utf8_lossy(v)),
                        )
                    })
                    .collect();
                println!("{}", serde_json::Value::Object(map));
            } else {
                for (key, value) in entries {
                    println!(
                        "{}\t{}",
                        String::from_utf8_lossy(&key),
                        String::from_utf8_lossy(&value)
                    );
                }
            }
        }
        other => unreachable!("run_omap got {other:?}"),
    }
    Ok(())
}

/// Writes a file as an object. Up to `WRITE_BYTES_MAX` it is one atomic write_full;
/// larger files go in chunks (like `rados put`), so a failure midway can leave a
/// partial object, which the error message says.
async fn put(client: &Client, pool: &str, name: &str, file: &str) -> Result<()> {
    let data = Bytes::from(read_input(file)?);
    if data.len() <= WRITE_BYTES_MAX {
        client.write_full(pool, name, data).await?;
        return Ok(());
    }
    let mut offset = 0usize;
    while offset < data.len() {
        let end = (offset + WRITE_BYTES_MAX).min(data.len());
        let chunk = data.slice(offset..end);
        let op = if offset == 0 {
            OpCode::WriteFull { data: chunk }
        } else {
            OpCode::Write {
                offset: offset as u64,
                data: chunk,
            }
        };
        client
            .operate(pool, name, vec![op])
            .await
            .with_context(|| {
                format!(
                    "writing {name} failed after {offset} of {} bytes; the object is partial",
                    data.len()
                )
            })?;
        offset = end;
    }
    Ok(())
}

async fn get(
    client: &Client,
    pool: &str,
    name: &str,
    offset: u64,
    length: Option<u64>,
    from_osd: Option<OsdId>,
) -> Result<Vec<u8>> {
    let operate = |ops: Vec<OpCode>| async move {
        match from_osd {
            Some(osd) => client.operate_on_osd(pool, name, ops, osd).await,
            None => client.operate(pool, name, ops).await,
        }
    };
    let reply = operate(vec![OpCode::Stat]).await?;
    let Some(OpOutput::Stat { size_bytes, .. }) = reply.outputs.first() else {
        bail!("the OSD sent no stat for {name}");
    };
    let size = *size_bytes;
    if offset > size || (offset == size && offset > 0) {
        bail!("offset {offset} is past the end of {name} (size {size} bytes)");
    }
    let end = match length {
        Some(length) => offset.saturating_add(length).min(size),
        None => size,
    };
    let mut data = Vec::with_capacity((end - offset) as usize);
    let mut position = offset;
    while position < end {
        let chunk = (end - position).min(WRITE_BYTES_MAX as u64);
        let reply = operate(vec![OpCode::Read {
            offset: position,
            length: chunk,
        }])
        .await?;
        let Some(OpOutput::Data(bytes)) = reply.outputs.first() else {
            bail!("the OSD sent no data for {name}");
        };
        if bytes.is_empty() {
            break; // The object shrank while we read it.
        }
        data.extend_from_slice(bytes);
        position += bytes.len() as u64;
    }
    Ok(data)
}

async fn listsnaps(client: &Client, pool: &str, name: &str, json: bool) -> Result<()> {
    let (snapset, head_exists) = client.list_snaps(pool, name).await?;
    if json {
        let clones: Vec<_> = snapset
            .clones
            .iter()
            .map(|c| json!({"id": c.id, "snapshots": c.snaps, "size": c.size_bytes}))
            .collect();
        println!(
            "{}",
            json!({"name": name, "seq": snapset.seq, "head_exists": head_exists, "clones": clones})
        );
        return Ok(());
    }
    println!("{pool}/{name}:");
    println!("{:<8} {:<24} {:>10}", "CLONEID", "SNAPS", "SIZE");
    for clone in &snapset.clones {
        let snaps: Vec<String> = clone.snaps.iter().map(u64::to_string).collect();
        println!(
            "{:<8} {:<24} {:>10}",
            clone.id,
            snaps.join(","),
            clone.size_bytes
        );
    }
    if head_exists {
        println!("{:<8} {:<24} {:>10}", "head", "-", "-");
    }
    Ok(())
}

async fn stat(client: &Client, pool: &str, name: &str, json: bool) -> Result<()> {
    let stat = client.stat(pool, name).await?;
    if json {
        println!(
            "{}",
            json!({"name": name, "size": stat.size_bytes, "mtime_ns": stat.mtime_ns, "mtime": timestamp(stat.mtime_ns), "version": stat.version})
        );
    } else {
        println!(
            "{pool}/{name} mtime {}, size {} ({}), version {}",
            timestamp(stat.mtime_ns),
            stat.size_bytes,
            bytes(stat.size_bytes),
            stat.version
        );
    }
    Ok(())
}
