//! DIGEST: an object's size, version and (deep) content hash, read
//! through the store so every block's checksum is verified.

use proto::msg::Reply;
use store::{Store, StoreError};

/// Bytes a deep digest reads at a time.
const DIGEST_CHUNK: u64 = 4 << 20;

/// Size, version and (deep) the xxh3 of an object's whole content, read
/// through the store so every block's checksum is verified.
pub fn digest(s: &Store, pid: u64, oid: u64, deep: bool) -> Result<Reply, StoreError> {
    let st = s.stat(pid, oid)?;
    let mut hash = 0;
    if deep {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        let mut at = 0;
        while at < st.size {
            let n = DIGEST_CHUNK.min(st.size - at);
            let mut data = s.read(pid, oid, at, n)?;
            // A hole at the end reads short: hash it as the zeros it is.
            data.resize(n as usize, 0);
            h.update(&data);
            at += n;
        }
        hash = h.digest();
    }
    Ok(Reply::Digest {
        size: st.size,
        version: st.version,
        hash,
    })
}
