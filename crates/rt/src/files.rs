//! Durable small files: write to a temporary name, fsync, rename, fsync the directory,
//! so a crash leaves either the old or the new content, never a torn mix.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

pub fn write_atomically(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    {
        let mut file = File::create(&tmp)?;
        file.write_all(content)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_content_whole() {
        let dir = std::env::temp_dir().join(format!("carmine-files-{}", std::process::id()));
        let path = dir.join("map");
        super::write_atomically(&path, b"one").unwrap();
        super::write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert!(!path.with_extension("tmp").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
