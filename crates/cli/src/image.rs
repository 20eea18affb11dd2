//! Block image verbs, as the `rbd` tool and `rbd-nbd`: create, ls, info, resize, rm,
//! rename, cp, du, export, import, bench, nbd, and `snap` (in `snap.rs`).

mod bench;
mod snap;

use crate::output::bytes;
use anyhow::{bail, Context, Result};
use carmine_block::layout::{object_count, object_size_bytes, ORDER_DEFAULT};
use carmine_block::lease::WriterLeaseTask;
use carmine_block::nbd::NbdServer;
use carmine_block::{admin, diff, header, transfer, Image, ImageSpec};
use carmine_client::Client;
use clap::{Subcommand, ValueEnum};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Subcommand, Debug)]
pub enum ImageCommand {
    /// Create a thin-provisioned image POOL/NAME.
    Create {
        spec: String,
        /// Size: bytes, or with a unit (512M, 10G, 1T).
        #[arg(long, value_parser = parse_size_arg)]
        size: u64,
        /// Objects of 2^ORDER bytes (12..=25; 22 = 4 MiB).
        #[arg(long, default_value_t = ORDER_DEFAULT)]
        order: u8,
    },
    /// List the images of a pool.
    Ls {
        pool: String,
        /// Show size, object size and id.
        #[arg(short = 'l', long)]
        long: bool,
    },
    /// Size, object size, id, object prefix and snapshots of an image (or of
    /// POOL/IMAGE@SNAP).
    Info { spec: String },
    /// Change the size; shrinking discards data and needs --allow-shrink.
    Resize {
        spec: String,
        #[arg(long, value_parser = parse_size_arg)]
        size: u64,
        #[arg(long)]
        allow_shrink: bool,
    },
    /// Remove an image and its data.
    Rm { spec: String },
    /// Rename an image within its pool (DST may be NAME or POOL/NAME).
    Rename { src: String, dst: String },
    /// Copy an image into a new one (DST may be NAME or POOL/NAME).
    Cp { src: String, dst: String },
    /// Provisioned size against space used.
    Du { spec: String },
    /// Write the image's (or POOL/IMAGE@SNAP's) raw bytes to FILE (- for stdout).
    Export { spec: String, file: String },
    /// Create an image from the raw bytes of FILE (- for stdin).
    Import {
        file: String,
        spec: String,
        #[arg(long, default_value_t = ORDER_DEFAULT)]
        order: u8,
    },
    /// Benchmark an image, as `rbd bench`.
    Bench {
        spec: String,
        #[arg(long, value_enum)]
        io_type: IoType,
        #[arg(long, value_parser = parse_size_arg, default_value = "4K")]
        io_size: u64,
        #[arg(long, default_value_t = 16)]
        io_threads: usize,
        #[arg(long, value_parser = parse_size_arg, default_value = "1G")]
        io_total: u64,
        #[arg(long, value_enum, default_value_t = IoPattern::Seq)]
        io_pattern: IoPattern,
    },
    /// Serve the image over NBD until interrupted.
    Nbd {
        spec: String,
        /// TCP address to listen on (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:10809", conflicts_with = "socket")]
        bind: String,
        /// Listen on a Unix socket instead.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Serve snapshot NAME (read-only).
        #[arg(long)]
        snap: Option<String>,
        #[arg(long)]
        read_only: bool,
    },
    /// Write the changes from --from-snap (or from nothing) to `POOL/IMAGE[@SNAP]` to
    /// FILE (- for stdout) in rbd's diff format v1.
    ExportDiff {
        spec: String,
        file: String,
        #[arg(long)]
        from_snap: Option<String>,
    },
    /// Apply a diff from FILE (- for stdin) to POOL/IMAGE; the image must have the
    /// diff's from-snapshot, and gets its end snapshot.
    ImportDiff { file: String, spec: String },
    /// Clone a protected snapshot POOL/PARENT@SNAP into a new image (DST may be NAME
    /// or POOL/NAME).
    Clone { src: String, dst: String },
    /// The clones of POOL/IMAGE@SNAP.
    Children { spec: String },
    /// Copy everything a clone still reads from its parent, and drop the parent.
    Flatten { spec: String },
    /// Snapshots: create, ls, rm, rollback, protect, unprotect (as `rbd snap`).
    Snap {
        #[command(subcommand)]
        command: snap::SnapCommand,
    },
}

impl ImageCommand {
    /// Whether the command serves clients until stopped (the NBD export).
    pub fn is_server(&self) -> bool {
        matches!(self, ImageCommand::Nbd { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoType {
    Write,
    Read,
    Readwrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoPattern {
    Seq,
    Rand,
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    carmine_block::parse_size(text)
}

fn spec(text: &str) -> Result<ImageSpec> {
    Ok(ImageSpec::parse(text)?)
}

/// DST as given, or NAME in the pool of `source`.
fn destination(source: &ImageSpec, text: &str) -> Result<ImageSpec> {
    if text.contains('/') {
        spec(text)
    } else {
        spec(&format!("{}/{text}", source.pool))
    }
}

pub async fn run(client: &Client, command: ImageCommand, json: bool) -> Result<()> {
    match command {
        ImageCommand::Create {
            spec: text,
            size,
            order,
        } => {
            let spec = spec(&text)?;
            let header = admin::create(client, &spec, size, order).await?;
            if json {
                println!(
                    "{}",
                    json!({"image": spec.to_string(), "id": header.id, "size_bytes": size, "order": order})
                );
            } else {
                println!("created image {spec} ({}, id {})", bytes(size), header.id);
            }
        }
        ImageCommand::Ls { pool, long } => ls(client, &pool, long, json).await?,
        ImageCommand::Info { spec: text } => {
            let (spec, snap) = ImageSpec::parse_with_snap(&text)?;
            info(client, &spec, snap.as_deref(), json).await?
        }
        ImageCommand::Resize {
            spec: text,
            size,
            allow_shrink,
        } => {
            let spec = spec(&text)?;
            admin::resize(client, &spec, size, allow_shrink).await?;
            if !json {
                println!("resized {spec} to {}", bytes(size));
            }
        }
        ImageCommand::Rm { spec: text } => {
            let spec = spec(&text)?;
            admin::remove(client, &spec).await?;
            if !json {
                println!("removed image {spec}");
            }
        }
        ImageCommand::Rename { src, dst } => {
            let source = spec(&src)?;
            let target = destination(&source, &dst)?;
            admin::rename(client, &source, &target).await?;
            if !json {
                println!("renamed {source} to {target}");
            }
        }
        ImageCommand::Cp { src, dst } => {
            let source = spec(&src)?;
            let target = destination(&source, &dst)?;
            let copied = admin::copy(client, &source, &target).await?;
            if json {
                println!(
                    "{}",
                    json!({"source": source.to_string(), "destination": target.to_string(), "bytes_written": copied})
                );
            } else {
                println!("copied {source} to {target} ({} of data)", bytes(copied));
            }
        }
        ImageCommand::Du { spec: text } => du(client, &spec(&text)?, json).await?,
        ImageCommand::Export { spec: text, file } => export(client, &text, &file, json).await?,
        ImageCommand::Import {
            file,
            spec: text,
            order,
        } => import(client, &file, &spec(&text)?, order, json).await?,
        ImageCommand::Bench {
            spec: text,
            io_type,
            io_size,
            io_threads,
            io_total,
            io_pattern,
        } => {
            let image = Arc::new(Image::open(client, &spec(&text)?).await?);
            let args = bench::BenchArgs {
                io_type,
                io_size,
                io_threads,
                io_total,
                io_pattern,
                json,
            };
            bench::run(image, args).await?;
        }
        ImageCommand::Nbd {
            spec: text,
            bind,
            socket,
            snap,
            read_only,
        } => {
            let (spec, at) = ImageSpec::parse_with_snap(&text)?;
            if at.is_some() && snap.is_some() {
                bail!("give the snapshot either as POOL/IMAGE@SNAP or with --snap, not both");
            }
            let snap = at.or(snap);
            let image = Arc::new(Image::open_at(client, &spec, snap.as_deref()).await?);
            // A snapshot is always served read-only, as rbd-nbd does.
            let read_only = read_only || snap.is_some();
            nbd(image, &bind, socket, read_only, json).await?
        }
        ImageCommand::Snap { command } => snap::run(client, command, json).await?,
        ImageCommand::ExportDiff {
            spec: text,
            file,
            from_snap,
        } => {
            let (spec, to) = ImageSpec::parse_with_snap(&text)?;
            let (from, to) = (from_snap.as_deref(), to.as_deref());
            let records = if file == "-" {
                let mut out = tokio::io::stdout();
                diff::export_diff(client, &spec, from, to, &mut out).await?
            } else {
                let mut out = tokio::fs::File::create(&file)
                    .await
                    .with_context(|| format!("creating {file}"))?;
                let records = diff::export_diff(client, &spec, from, to, &mut out).await?;
                out.sync_all().await?;
                records
            };
            let line = if json {
                json!({"image": text, "file": file, "records": records}).to_string()
            } else {
                format!("exported the diff of {text} to {file} ({records} records)")
            };
            if file == "-" {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        }
        ImageCommand::ImportDiff { file, spec: text } => {
            let spec = spec(&text)?;
            let records = if file == "-" {
                diff::import_diff(client, &spec, &mut tokio::io::stdin()).await?
            } else {
                let file_handle = tokio::fs::File::open(&file)
                    .await
                    .with_context(|| format!("opening {file}"))?;
                let mut reader = tokio::io::BufReader::new(file_handle);
                diff::import_diff(client, &spec, &mut reader).await?
            };
            if json {
                println!(
                    "{}",
                    json!({"image": text, "file": file, "records": records})
                );
            } else {
                println!("applied {records} records from {file} to {spec}");
            }
        }
        ImageCommand::Clone { src, dst } => {
            let (parent, snap) = ImageSpec::parse_with_snap(&src)?;
            let Some(snap) = snap else {
                bail!("'{src}' names no snapshot; clone takes POOL/PARENT@SNAP");
            };
            let child = destination(&parent, &dst)?;
            carmine_block::clone::clone(client, &parent, &snap, &child).await?;
            if json {
                println!("{}", json!({"parent": src, "image": child.to_string()}));
            } else {
                println!("cloned {src} to {child}");
            }
        }
        ImageCommand::Children { spec: text } => {
            let (parent, snap) = ImageSpec::parse_with_snap(&text)?;
            let Some(snap) = snap else {
                bail!("'{text}' names no snapshot; children takes POOL/IMAGE@SNAP");
            };
            let children = carmine_block::clone::children(client, &parent, &snap).await?;
            if json {
                println!("{}", json!(children));
            } else {
                children.iter().for_each(|child| println!("{child}"));
            }
        }
        ImageCommand::Flatten { spec: text } => {
            let spec = spec(&text)?;
            let copied = carmine_block::clone::flatten(client, &spec).await?;
            if json {
                println!("{}", json!({"image": text, "objects_copied": copied}));
            } else {
                println!("flattened {spec} ({copied} objects copied from the parent)");
            }
        }
    }
    Ok(())
}

async fn ls(client: &Client, pool: &str, long: bool, json: bool) -> Result<()> {
    let images = admin::list(client, pool).await?;
    if !long {
        if json {
            let names: Vec<_> = images.iter().map(|(name, _)| name).collect();
            println!("{}", json!(names));
        } else {
            images.iter().for_each(|(name, _)| println!("{name}"));
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    for (name, id) in &images {
        let spec = ImageSpec {
            pool: pool.to_string(),
            image: name.clone(),
        };
        match admin::load_header(client, &spec, id).await {
            Ok((header, _)) => rows.push((name.clone(), Some(header))),
            Err(carmine_block::BlockError::NotFound(_)) => rows.push((name.clone(), None)),
            Err(error) => return Err(error.into()),
        }
    }
    if json {
        let rows: Vec<_> = rows
            .iter()
            .map(|(name, h)| json!({"image": name, "size_bytes": h.as_ref().map(|h| h.size_bytes), "order": h.as_ref().map(|h| h.order), "id": h.as_ref().map(|h| h.id.clone())}))
            .collect();
        println!("{}", json!(rows));
        return Ok(());
    }
    println!("{:<32} {:>10} {:>6} {:<14}", "NAME", "SIZE", "ORDER", "ID");
    for (name, header) in rows {
        match header {
            Some(h) => println!(
                "{name:<32} {:>10} {:>6} {:<14}",
                bytes(h.size_bytes),
                h.order,
                h.id
            ),
            None => println!(
                "{name:<32} {:>10} {:>6} {:<14}",
                "?", "?", "(header missing; rm to clean up)"
            ),
        }
    }
    Ok(())
}

async fn info(client: &Client, spec: &ImageSpec, snap: Option<&str>, json: bool) -> Result<()> {
    let id = admin::lookup_id(client, spec).await?;
    let (mut h, _) = admin::load_header(client, spec, &id).await?;
    let mut protected = None;
    if let Some(name) = snap {
        let found = h
            .snap(name)
            .ok_or_else(|| carmine_block::BlockError::NoSuchSnap(format!("{spec}@{name}")))?;
        protected = Some(found.protected);
        h.size_bytes = found.size_bytes;
    }
    let objects = object_count(h.size_bytes, h.order);
    let prefix = header::data_prefix(&h.id);
    if json {
        println!(
            "{}",
            json!({"image": h.name, "pool": spec.pool, "id": h.id, "size_bytes": h.size_bytes, "object_count": objects,
                   "order": h.order, "object_size_bytes": object_size_bytes(h.order), "block_name_prefix": prefix, "features": h.features,
                   "snapshot_count": h.snaps.len(), "snapshot": snap, "protected": protected,
                   "parent": h.parent.as_ref().map(|p| json!({"pool": p.pool, "image_id": p.image_id, "snap_id": p.snap_id, "overlap_bytes": p.overlap_bytes}))})
        );
        return Ok(());
    }
    println!("image '{}' in pool '{}':", h.name, spec.pool);
    println!(
        "\tsize {} ({} bytes) in {objects} objects",
        bytes(h.size_bytes),
        h.size_bytes
    );
    println!(
        "\torder {} ({} objects)",
        h.order,
        bytes(object_size_bytes(h.order))
    );
    println!("\tid: {}", h.id);
    println!("\tblock_name_prefix: {prefix}");
    println!("\tfeatures: {:#x}", h.features);
    println!("\tsnapshot_count: {}", h.snaps.len());
    if let Some(p) = &h.parent {
        println!(
            "\tparent: {}/(id {})@(snap id {})",
            p.pool, p.image_id, p.snap_id
        );
        println!("\toverlap: {}", bytes(p.overlap_bytes));
    }
    if let Some(protected) = protected {
        println!("\tprotected: {}", if protected { "True" } else { "False" });
    }
    Ok(())
}

async fn du(client: &Client, spec: &ImageSpec, json: bool) -> Result<()> {
    let usage = admin::du(client, spec).await?;
    if json {
        println!(
            "{}",
            json!({"image": spec.to_string(), "provisioned_bytes": usage.provisioned_bytes, "used_bytes": usage.used_bytes, "object_count": usage.object_count})
        );
    } else {
        println!(
            "{:<32} {:>12} {:>12} {:>8}",
            "NAME", "PROVISIONED", "USED", "OBJECTS"
        );
        println!(
            "{:<32} {:>12} {:>12} {:>8}",
            spec.to_string(),
            bytes(usage.provisioned_bytes),
            bytes(usage.used_bytes),
            usage.object_count
        );
    }
    Ok(())
}

async fn export(client: &Client, text: &str, file: &str, json: bool) -> Result<()> {
    let (spec, snap) = ImageSpec::parse_with_snap(text)?;
    let image = Image::open_at(client, &spec, snap.as_deref()).await?;
    let written = transfer::export_to_path(&image, file)
        .await
        .with_context(|| format!("exporting {text} to {file}"))?;
    report_transfer("exported", &spec, file, written, json);
    Ok(())
}

async fn import(
    client: &Client,
    file: &str,
    spec: &ImageSpec,
    order: u8,
    json: bool,
) -> Result<()> {
    let size = transfer::import_from_path(client, file, spec, order)
        .await
        .with_context(|| format!("importing {file} into {spec}"))?;
    report_transfer("imported", spec, file, size, json);
    Ok(())
}

/// Says what a transfer did, on stderr when stdout carries the data.
fn report_transfer(verb: &str, spec: &ImageSpec, file: &str, size_bytes: u64, json: bool) {
    let line = if json {
        json!({"image": spec.to_string(), "file": file, "bytes": size_bytes}).to_string()
    } else {
        format!(
            "{verb} {spec} ({}) {} {file}",
            bytes(size_bytes),
            if verb == "exported" { "to" } else { "from" }
        )
    };
    if file == "-" {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

async fn nbd(
    image: Arc<Image>,
    bind: &str,
    socket: Option<PathBuf>,
    read_only: bool,
    json: bool,
) -> Result<()> {
    let spec = &image.spec().clone();
    // A writing server holds a writer lease, so that `snap create` waits until it
    // writes under the new snapshot's context (carmine_block::lease).
    let lease = if read_only {
        None
    } else {
        Some(WriterLeaseTask::take(image.clone()).await?)
    };
    let server = NbdServer::new(image.clone(), read_only);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let serving = async {
        if let Some(path) = &socket {
            if path.exists() {
                bail!(
                    "{} already exists; remove it or choose another --socket",
                    path.display()
                );
            }
            announce(
                spec,
                &format!("nbd+unix:///?socket={}", path.display()),
                image.size(),
                json,
            );
            server
                .serve_unix(path)
                .await
                .with_context(|| format!("serving on {}", path.display()))
        } else {
            let listener = tokio::net::TcpListener::bind(bind)
                .await
                .with_context(|| format!("cannot listen on {bind}"))?;
            announce(
                spec,
                &format!("nbd://{}", listener.local_addr()?),
                image.size(),
                json,
            );
            server
                .serve_tcp(listener)
                .await
                .context("accepting NBD connections")
        }
    };
    let result = tokio::select! {
        result = serving => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminate.recv() => Ok(()),
    };
    match lease {
        Some(lease) => lease.release().await?,
        None => image.flush().await?,
    }
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
    }
    result
}

fn announce(spec: &ImageSpec, uri: &str, size_bytes: u64, json: bool) {
    use std::io::Write;
    if json {
        println!(
            "{}",
            json!({"image": spec.to_string(), "uri": uri, "size_bytes": size_bytes})
        );
    } else {
        println!("serving {spec} ({}) on {uri}", bytes(size_bytes));
    }
    let _ = std::io::stdout().flush();
}
