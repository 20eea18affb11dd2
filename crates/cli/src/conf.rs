//! The cluster configuration file (`carmine.toml`) and how the CLI finds it: `--conf
//! FILE`, else `$CARMINE_CONF`, else `./dev-cluster/carmine.toml` (what `vstart`
//! writes), else `/etc/carmine/carmine.toml`.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub const DEFAULT_DEV_DIR: &str = "dev-cluster";
pub const CONF_FILE: &str = "carmine.toml";
const SYSTEM_CONF: &str = "/etc/carmine/carmine.toml";

/// How to start one daemon of a dev cluster again (`vstart --only NAME`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DaemonSpec {
    pub name: String,
    pub args: Vec<String>,
}

/// What `vstart` records about the cluster it started.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DevCluster {
    /// Absolute path of the dev cluster's directory.
    pub dir: PathBuf,
    pub osds: u32,
    pub mons: u32,
    pub shards: u16,
    pub store: String,
    pub daemons: Vec<DaemonSpec>,
}

/// The contents of `carmine.toml`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Conf {
    /// The cluster id, 32 hex digits.
    pub fsid: String,
    pub mon_addrs: Vec<SocketAddr>,
    #[serde(default)]
    pub op_timeout_seconds: Option<u64>,
    #[serde(default)]
    pub dev: Option<DevCluster>,
}

impl Conf {
    pub fn fsid(&self) -> Result<u128> {
        u128::from_str_radix(&self.fsid, 16)
            .with_context(|| format!("fsid {:?} is not 32 hex digits", self.fsid))
    }

    pub fn load(path: &Path) -> Result<Conf> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let conf: Conf = toml::from_str(&text)
            .with_context(|| format!("{} is not a valid carmine.toml", path.display()))?;
        if conf.mon_addrs.is_empty() {
            bail!("{} lists no monitor addresses (mon_addrs)", path.display());
        }
        conf.fsid()?;
        Ok(conf)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = toml::to_string_pretty(self).context("cannot encode the configuration")?;
        carmine_rt::files::write_atomically(path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Finds the configuration file the CLI should use.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("CARMINE_CONF") {
        return Ok(PathBuf::from(path));
    }
    let dev = Path::new(DEFAULT_DEV_DIR).join(CONF_FILE);
    if dev.exists() {
        return Ok(dev);
    }
    let system = PathBuf::from(SYSTEM_CONF);
    if system.exists() {
        return Ok(system);
    }
    bail!(
        "no cluster configuration found: pass --conf FILE, set CARMINE_CONF, \
         or start a dev cluster with `carmine vstart`"
    )
}

pub fn load(explicit: Option<&Path>) -> Result<(PathBuf, Conf)> {
    let path = locate(explicit)?;
    let conf = Conf::load(&path)?;
    Ok((path, conf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_toml() {
        let conf = Conf {
            fsid: format!("{:032x}", 0xabcdu128),
            mon_addrs: vec!["127.0.0.1:6789".parse().unwrap()],
            op_timeout_seconds: Some(5),
            dev: Some(DevCluster {
                dir: "/tmp/x".into(),
                osds: 3,
                mons: 1,
                shards: 1,
                store: "mem".into(),
                daemons: vec![DaemonSpec {
                    name: "osd.0".into(),
                    args: vec!["osd".into(), "--id".into(), "0".into()],
                }],
            }),
        };
        let text = toml::to_string_pretty(&conf).unwrap();
        assert_eq!(toml::from_str::<Conf>(&text).unwrap(), conf);
        assert_eq!(conf.fsid().unwrap(), 0xabcd);
    }
}
