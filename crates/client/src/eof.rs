//! Reads that reach the end of a file as this client knows it. A
//! read-only open within the cache window takes the length from the
//! cache and asks nobody, so another client may have rewritten the file
//! since: the objects then hold bytes past that end, or end before it.
//! Cut to the old length, the new bytes read as a torn mix of two
//! versions (`echo short > f` here, `seq 100 > f` on another mount, then
//! `cat f` here printed six bytes of the new file). So such a read asks
//! the objects for the whole range the kernel asked for; when their bytes
//! stop somewhere other than the known end, it asks the namespace for the
//! length (at most once per cache window per file and extent seen), takes it, and says
//! whether the file grew — the mount then drops the kernel's cached
//! attributes, whose length cuts reads too. (A shrink needs nothing more:
//! the kernel takes a short answer as the new end, unless its attributes
//! were dropped during the read.) A sparse file's tail (a hole up to the
//! end) costs that one question per window. The read itself is
//! `reads::read_at_end`; this module decides what the length is.

use std::time::Duration;

use proto::mds::Creds;

use crate::error::Result;
use crate::gone::Present;
use crate::meta::Meta;
use crate::namespace::Namespace;

/// After a read of `ino` (its state at generation `gen_`) found the
/// objects' bytes stopping at `seen` (a file offset, or 0 inside the
/// range): the namespace's length, cached for the client — the length
/// given then if asked within the cache window for the same generation
/// with the bytes stopping at the same place (remembered in `checked`,
/// so concurrent reads agree), `None` if the namespace cannot answer;
/// ESTALE if the file was removed.
pub async fn length_now(
    (ns, meta, checked): (&dyn Namespace, &Meta, &Present),
    creds: &Creds,
    (ino, gen_): (u64, u64),
    seen: u64,
) -> Result<Option<u64>> {
    let window = meta.attr_timeout.max(Duration::from_millis(100));
    if let Some(known) = checked.recent(ino, seen, window, gen_) {
        return Ok(Some(known));
    }

    let asked = meta.commits.ask();
    match ns.getattr(creds, ino).await {
        Ok(mut a) => {
            checked.found(ino, seen, window, (Some(a.size), gen_));
            meta.cache_attr(&mut a, asked.since());
            Ok(Some(a.size))
        }
        Err(e) if crate::gone::removed(&e) => Err(crate::gone::stale(meta, ino, &e)),
        Err(e) => {
            tracing::debug!(ino, error = %e, "a read at the end of a file could not ask for its length");
            Ok(None)
        }
    }
}
