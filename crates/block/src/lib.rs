//! Block images over RADOS objects (the librbd role) and an NBD server for them (the
//! rbd-nbd role).
//!
//! An image `POOL/NAME` is striped over objects of 2^order bytes named from its id
//! (`rbd_data.<id>.<objectno>`), described by a header object (`rbd_header.<id>`) and
//! found through the pool's directory (`rbd_directory`). Images are thin: absent objects
//! read as zeros, and discard removes or zeroes objects.
//!
//! ```no_run
//! # async fn example(client: carmine_client::Client) -> Result<(), carmine_block::BlockError> {
//! use carmine_block::{admin, Image, ImageSpec};
//! let spec = ImageSpec::parse("rbd/disk")?;
//! admin::create(&client, &spec, 1 << 30, 22).await?;
//! let image = Image::open(&client, &spec).await?;
//! image.write(4096, bytes::Bytes::from_static(b"hello")).await?;
//! assert_eq!(&image.read(4096, 5).await?[..], b"hello");
//! image.flush().await?;
//! # Ok(()) }
//! ```

pub mod admin;
mod ancestry;
pub mod clone;
mod concurrent;
pub mod diff;
mod error;
pub mod header;
mod image;
pub mod layout;
pub mod lease;
pub mod nbd;
pub mod snapshot;
pub mod spec;
mod tracker;
pub mod transfer;

pub use error::BlockError;
pub use image::Image;
pub use spec::{parse_size, ImageSpec};
pub use tracker::WriteGuard;
