//! Why a block operation failed; each variant reads as one sentence for the CLI.

use carmine_client::ClientError;
use carmine_types::encoding::DecodeError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    #[error("invalid image spec {0}")]
    InvalidSpec(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("image {0} does not exist")]
    NotFound(String),
    #[error("image {0} already exists")]
    Exists(String),
    #[error("the range {offset}+{length} is past the end of the image ({size_bytes} bytes)")]
    OutOfRange {
        offset: u64,
        length: u64,
        size_bytes: u64,
    },
    #[error(
        "shrinking {spec} from {from_bytes} to {to_bytes} bytes discards data; pass --allow-shrink"
    )]
    ShrinkNotAllowed {
        spec: String,
        from_bytes: u64,
        to_bytes: u64,
    },
    #[error("the header of image {spec} is damaged: {source}")]
    CorruptHeader {
        spec: String,
        #[source]
        source: DecodeError,
    },
    #[error("snapshot {0} does not exist")]
    NoSuchSnap(String),
    #[error("snapshot {0} already exists")]
    SnapExists(String),
    #[error("snapshot {0} is protected; unprotect it first")]
    SnapProtected(String),
    #[error("{0} is a snapshot and read-only")]
    ReadOnly(String),
    #[error("image {0} kept changing under a concurrent update; retry")]
    Conflict(String),
    #[error("cluster: {0}")]
    Client(#[from] ClientError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl BlockError {
    /// The errno an NBD client should see for this error.
    pub fn errno(&self) -> u32 {
        use carmine_proto::OpError;
        match self {
            BlockError::OutOfRange { .. } | BlockError::Invalid(_) => crate::nbd::proto::EINVAL,
            BlockError::ReadOnly(_) => crate::nbd::proto::EPERM,
            BlockError::Client(ClientError::Op(OpError::NoSpace)) => crate::nbd::proto::ENOSPC,
            _ => crate::nbd::proto::EIO,
        }
    }
}
