//! `carmine crush compile|decompile|test`: CRUSH maps offline, as `crushtool` does.
//!
//! The text form is Ceph's (`crushtool -c` reads it, `crushtool -d` prints it); the
//! binary form is Carmine's own (`CRSH` magic). Every verb accepts either form as
//! input. `test --show-mappings` prints exactly the lines `crushtool --test
//! --show-mappings` prints for the same arguments, so the two can be compared with
//! `diff`:
//!
//! ```text
//! carmine crush test -i map.txt --rule 0 --num-rep 3 --min-x 0 --max-x 9 --show-mappings
//! CRUSH rule 0 x 0 [3,1,7]
//! ```
//!
//! Argument semantics follow Pacific's `crushtool`/`CrushTester`: without `--rule`
//! every rule is tested in id order; without `--num-rep` each rule is tested for every
//! replica count from its `min_size` to its `max_size`; unless both `--min-x` and
//! `--max-x` are given (or `--x`), x runs over 0..=1023; `--pool-id -1` means no pool;
//! `--weight OSD W` overrides the reweight of one device, `W` from 0 to 1.

use anyhow::{bail, Context, Result};
use carmine_crush::{parse_text, test_mappings, weight_from_text, CrushMap};
use clap::Subcommand;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Magic of Carmine's binary CRUSH form ([`CrushMap::encode`]).
const CARMINE_MAGIC: &[u8; 4] = b"CRSH";
/// First bytes of Ceph's binary CRUSH encoding (`CRUSH_MAGIC` 0x00010000, little-endian).
const CEPH_MAGIC: &[u8; 4] = &[0x00, 0x00, 0x01, 0x00];
/// crushtool's x range when `--min-x`/`--max-x` are not both given.
const X_DEFAULT_MIN: u32 = 0;
const X_DEFAULT_MAX: u32 = 1023;
/// Mappings computed before they are written out, so memory stays bounded for any
/// x range.
const X_BATCH_COUNT_MAX: u32 = 65_536;
/// Largest map file read (text or binary).
const MAP_FILE_BYTES_MAX: u64 = 256 * 1024 * 1024;

#[derive(Subcommand, Debug)]
pub enum CrushCommand {
    /// Compile a text CRUSH map (Ceph syntax) to Carmine's binary form, as `crushtool -c`.
    Compile {
        /// The map, in text (or already compiled).
        input: PathBuf,
        /// Where to write the compiled map.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Print a CRUSH map in Ceph's text syntax, as `crushtool -d`.
    Decompile {
        /// The map, compiled (or text).
        input: PathBuf,
        /// Write the text here instead of stdout.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Map inputs through the rules and print the results, as `crushtool --test`.
    Test(TestArgs),
    /// Remove a device from every bucket that holds it, as `crushtool -i MAP
    /// --remove-item osd.N -o OUT` (what `osd purge` does to the cluster's map).
    RemoveItem {
        /// The map, in text or compiled.
        #[arg(short = 'i', long = "input")]
        input: PathBuf,
        /// The device, by name (`osd.N`).
        name: String,
        /// Where to write the compiled map.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// The map, in text or compiled.
    #[arg(short = 'i', long = "input")]
    input: PathBuf,
    /// Only this rule id (default, or negative: every rule in id order).
    #[arg(long, allow_negative_numbers = true)]
    rule: Option<i64>,
    /// Replica count (default, or negative: each rule's min_size..=max_size).
    #[arg(long = "num-rep", allow_negative_numbers = true)]
    num_rep: Option<i64>,
    /// First x (used only together with --max-x; default 0).
    #[arg(long = "min-x", allow_negative_numbers = true)]
    min_x: Option<i64>,
    /// Last x (used only together with --min-x; default 1023).
    #[arg(long = "max-x", allow_negative_numbers = true)]
    max_x: Option<i64>,
    /// Only this x (sets both --min-x and --max-x).
    #[arg(long = "x", allow_negative_numbers = true)]
    x: Option<i64>,
    /// Mix the pool id into the input as Ceph does for a pool's PGs (-1: none).
    #[arg(long = "pool-id", allow_negative_numbers = true)]
    pool_id: Option<i64>,
    /// Override one device's reweight: `--weight OSD W`, W from 0 to 1 (repeatable).
    #[arg(
        short = 'w',
        long = "weight",
        num_args = 2,
        value_names = ["OSD", "W"],
        allow_negative_numbers = true
    )]
    weight: Vec<String>,
    /// Print each mapping (required: the only output supported so far).
    #[arg(long = "show-mappings")]
    show_mappings: bool,
}

pub fn run(command: CrushCommand) -> Result<()> {
    match command {
        CrushCommand::Compile { input, output } => {
            let map = load_map(&input)?;
            std::fs::write(&output, map.encode())
                .with_context(|| format!("writing {}", output.display()))
        }
        CrushCommand::Decompile { input, output } => {
            let text = load_map(&input)?.to_text();
            match output {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display())),
                None => write_stdout(|out| out.write_all(text.as_bytes())),
            }
        }
        CrushCommand::Test(args) => test(args),
        CrushCommand::RemoveItem {
            input,
            name,
            output,
        } => {
            let mut map = load_map(&input)?;
            let Some(id) = map.item_id_by_name(&name) else {
                bail!("{}: no item named {name:?}", input.display());
            };
            if id < 0 {
                bail!("{name} is a bucket; only devices can be removed");
            }
            map.remove_device(id);
            std::fs::write(&output, map.encode())
                .with_context(|| format!("writing {}", output.display()))
        }
    }
}

/// Reads a map in either form: Carmine's binary (by its magic) or Ceph's text.
fn load_map(path: &Path) -> Result<CrushMap> {
    let bytes = read_limited(path)?;
    let shown = path.display();
    if bytes.starts_with(CARMINE_MAGIC) {
        return CrushMap::decode(&bytes).with_context(|| format!("{shown}"));
    }
    if bytes.starts_with(CEPH_MAGIC) {
        bail!(
            "{shown}: this is Ceph's binary CRUSH encoding, which carmine does not read; \
             give it the text from `crushtool -d {shown}`"
        );
    }
    let text = std::str::from_utf8(&bytes).map_err(|error| {
        anyhow::anyhow!("{shown}: neither a compiled Carmine CRUSH map nor UTF-8 text ({error})")
    })?;
    parse_text(text).with_context(|| format!("{shown}"))
}

fn read_limited(path: &Path) -> Result<Vec<u8>> {
    let shown = path.display();
    let length = std::fs::metadata(path)
        .with_context(|| format!("reading {shown}"))?
        .len();
    if length > MAP_FILE_BYTES_MAX {
        bail!("{shown} is {length} bytes; a CRUSH map may be at most {MAP_FILE_BYTES_MAX}");
    }
    std::fs::read(path).with_context(|| format!("reading {shown}"))
}

/// `--weight` pairs as crushtool takes them: a device id, then `W` converted to 16.16
/// (`(int)(float(W) * 0x10000)`, clamped to 0..=0x10000). A later pair for the same
/// device wins.
fn parse_weight_pairs(values: &[String]) -> Result<Vec<(i32, u32)>> {
    assert!(
        values.len().is_multiple_of(2),
        "clap takes --weight values in pairs"
    );
    values
        .chunks(2)
        .map(|pair| {
            let device: i32 = pair[0]
                .parse()
                .map_err(|_| anyhow::anyhow!("--weight: device {:?} is not an integer", pair[0]))?;
            let weight = weight_from_text(&pair[1]).ok_or_else(|| {
                anyhow::anyhow!("--weight {device}: weight {:?} is not a number", pair[1])
            })?;
            Ok((device, weight))
        })
        .collect()
}

/// crushtool's x range: both ends given and non-negative, else 0..=1023.
fn x_range(args: &TestArgs) -> (u32, u32) {
    let (min_x, max_x) = match args.x {
        Some(x) => (Some(x), Some(x)),
        None => (args.min_x, args.max_x),
    };
    match (min_x, max_x) {
        (Some(min_x), Some(max_x)) if min_x >= 0 && max_x >= 0 => (
            u32::try_from(min_x).unwrap_or(u32::MAX),
            u32::try_from(max_x).unwrap_or(u32::MAX),
        ),
        _ => (X_DEFAULT_MIN, X_DEFAULT_MAX),
    }
}

/// crushtool keeps the pool id in an `int`, and -1 there means "no pool".
fn pool_id(value: Option<i64>) -> Option<i64> {
    let value = value? as i32;
    (value != -1).then_some(i64::from(value))
}

fn test(args: TestArgs) -> Result<()> {
    if !args.show_mappings {
        bail!("crush test prints only mappings so far; add --show-mappings");
    }
    let weights = parse_weight_pairs(&args.weight)?;
    let map = load_map(&args.input)?;
    let (min_x, max_x) = x_range(&args);
    let pool_id = pool_id(args.pool_id);
    let rules: Vec<u32> = match args.rule {
        Some(rule) if rule >= 0 => u32::try_from(rule).into_iter().collect(),
        _ => (0..map.max_rules()).collect(),
    };
    write_stdout(|out| {
        for rule_id in rules {
            let Some(rule) = map.rule(rule_id) else {
                continue; // crushtool skips rule ids that do not exist
            };
            let (min_rep, max_rep) = match args.num_rep {
                Some(num_rep) if num_rep >= 0 => (num_rep, num_rep),
                _ => (i64::from(rule.min_size), i64::from(rule.max_size)),
            };
            for num_rep in min_rep..=max_rep {
                let num_rep = usize::try_from(num_rep).unwrap_or(0);
                let mut batch_min = min_x;
                while batch_min <= max_x {
                    let batch_max = batch_min.saturating_add(X_BATCH_COUNT_MAX - 1).min(max_x);
                    let lines = test_mappings(
                        &map,
                        Some(rule_id),
                        num_rep,
                        batch_min,
                        batch_max,
                        pool_id,
                        &weights,
                    );
                    for line in lines {
                        writeln!(out, "{line}")?;
                    }
                    match batch_max.checked_add(1) {
                        Some(next) => batch_min = next,
                        None => break,
                    }
                }
            }
        }
        Ok(())
    })
}

/// Runs `body` against a buffered stdout; a reader that went away (`| head`) is not
/// an error.
fn write_stdout(body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match body(&mut out).and_then(|()| out.flush()) {
        Err(error) if error.kind() == ErrorKind::BrokenPipe => Ok(()),
        result => result.context("writing to stdout"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> TestArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(subcommand)]
            command: CrushCommand,
        }
        let mut argv = vec!["carmine", "test", "-i", "map.txt", "--show-mappings"];
        argv.extend_from_slice(extra);
        match Wrapper::try_parse_from(argv).unwrap().command {
            CrushCommand::Test(args) => args,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn x_range_needs_both_ends_like_crushtool() {
        assert_eq!(x_range(&args(&[])), (0, 1023));
        assert_eq!(x_range(&args(&["--min-x", "5"])), (0, 1023));
        assert_eq!(x_range(&args(&["--max-x", "3"])), (0, 1023));
        assert_eq!(
            x_range(&args(&["--min-x", "-3", "--max-x", "1"])),
            (0, 1023)
        );
        assert_eq!(x_range(&args(&["--min-x", "5", "--max-x", "9"])), (5, 9));
        assert_eq!(x_range(&args(&["--x", "7"])), (7, 7));
    }

    #[test]
    fn weights_come_in_pairs_and_negative_devices_parse() {
        let parsed = args(&[
            "--weight", "3", "0.5", "--weight", "-1", "1", "-w", "4", "0",
        ]);
        assert_eq!(
            parse_weight_pairs(&parsed.weight).unwrap(),
            vec![(3, 0x8000), (-1, 0x10000), (4, 0)]
        );
        let bad = args(&["--weight", "3x", "0.5"]);
        assert!(parse_weight_pairs(&bad.weight).is_err());
    }

    #[test]
    fn pool_id_minus_one_means_none() {
        assert_eq!(pool_id(None), None);
        assert_eq!(pool_id(Some(-1)), None);
        assert_eq!(pool_id(Some(0)), Some(0));
        assert_eq!(pool_id(Some(4_294_967_301)), Some(5));
        assert_eq!(pool_id(Some(4_294_967_295)), None);
    }
}
