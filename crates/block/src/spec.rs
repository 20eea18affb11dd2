//! Image specs (`POOL/IMAGE`, as `rbd`) and human sizes (`10G`, `512M`, `4096`).

use crate::BlockError;
use std::fmt;

/// Longest image name in bytes.
pub const IMAGE_NAME_BYTES_MAX: usize = 256;

/// Where an image lives: its pool and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageSpec {
    pub pool: String,
    pub image: String,
}

impl ImageSpec {
    /// Parses `POOL/IMAGE@SNAP` or `POOL/IMAGE`, as `rbd` does.
    pub fn parse_with_snap(text: &str) -> Result<(ImageSpec, Option<String>), BlockError> {
        let Some((image, snap)) = text.split_once('@') else {
            return Ok((ImageSpec::parse(text)?, None));
        };
        let spec = ImageSpec::parse(image)?;
        validate_snap_name(snap)
            .map_err(|why| BlockError::InvalidSpec(format!("'{text}': {why}")))?;
        Ok((spec, Some(snap.to_string())))
    }

    /// Parses `POOL/IMAGE` (a snapshot, `@SNAP`, is refused: the verb needs the image).
    pub fn parse(text: &str) -> Result<ImageSpec, BlockError> {
        let invalid = |why: &str| BlockError::InvalidSpec(format!("'{text}': {why}"));
        let (pool, image) = text
            .split_once('/')
            .ok_or_else(|| invalid("expected POOL/IMAGE"))?;
        if pool.is_empty() {
            return Err(invalid("the pool name is empty"));
        }
        if image.contains('@') {
            return Err(invalid(
                "this command takes an image, not a snapshot (@SNAP)",
            ));
        }
        validate_image_name(image).map_err(|why| invalid(&why))?;
        Ok(ImageSpec {
            pool: pool.to_string(),
            image: image.to_string(),
        })
    }
}

impl fmt::Display for ImageSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pool, self.image)
    }
}

/// Checks an image name: 1..=256 bytes, no `/`, `@` or control characters.
pub fn validate_image_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the image name is empty".into());
    }
    if name.len() > IMAGE_NAME_BYTES_MAX {
        return Err(format!(
            "the image name is {} bytes; the limit is {IMAGE_NAME_BYTES_MAX}",
            name.len()
        ));
    }
    if name.contains(['/', '@']) || name.chars().any(char::is_control) {
        return Err("image names may not contain '/', '@' or control characters".into());
    }
    Ok(())
}

/// Checks a snapshot name: the same rules as image names.
pub fn validate_snap_name(name: &str) -> Result<(), String> {
    validate_image_name(name).map_err(|why| why.replace("image name", "snapshot name"))
}

/// Parses a size: plain bytes (`4096`) or a number with a binary unit (`4K`, `512M`,
/// `10G`, `1T`, also `10GiB`, `10GB`; units are powers of 1024 as with `rbd`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size (examples: 4096, 512M, 10G)"))?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        "P" | "PB" | "PIB" => 50,
        _ => {
            return Err(format!(
                "'{text}' has an unknown unit '{unit}' (use K, M, G, T or P)"
            ))
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        let spec = ImageSpec::parse("rbd/disk-1").unwrap();
        assert_eq!(spec.pool, "rbd");
        assert_eq!(spec.image, "disk-1");
        assert_eq!(spec.to_string(), "rbd/disk-1");
        for bad in ["rbd", "/x", "rbd/", "rbd/a/b", "rbd/a@s", "rbd/a\nb"] {
            assert!(ImageSpec::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ImageSpec::parse(&format!("p/{}", "x".repeat(257))).is_err());
        let (spec, snap) = ImageSpec::parse_with_snap("rbd/disk@before").unwrap();
        assert_eq!(
            (spec.image.as_str(), snap.as_deref()),
            ("disk", Some("before"))
        );
        assert_eq!(ImageSpec::parse_with_snap("rbd/disk").unwrap().1, None);
        for bad in ["rbd/disk@", "rbd/disk@a@b", "rbd/disk@a/b", "rbd@x/disk"] {
            assert!(ImageSpec::parse_with_snap(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("1t"), Ok(1 << 40));
        for bad in ["", "G", "10X", "-1", "1.5G", "99999999999999P"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
