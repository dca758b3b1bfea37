//! What a member's raft log must remember beyond its records: the vote it
//! cast, the last purged entry and where the live records start in the
//! ring. Kept in `mds.raft`: two 4 KiB slots written alternately, each
//! magic `TMRS`, version u16, 2 reserved bytes, sequence u64, body length
//! u32, crc32c u32 (over sequence, length and body), then the postcard
//! body. The valid slot with the higher sequence wins, so a torn write of
//! one slot leaves the other. Each save is flushed before it returns.

use std::io;
use std::path::Path;

use openraft::{LogId, Vote};
use serde::{Deserialize, Serialize};
use store::device::{AlignedBuf, Device, FileDevice};

const MAGIC: [u8; 4] = *b"TMRS";
/// 2: a member's record (in membership entries and snapshots) holds its
/// client address as well as its peer address.
const VERSION: u16 = 2;
const SLOT: u64 = 4096;
const HEADER: usize = 24;

/// The remembered state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardState {
    /// The last vote saved.
    pub vote: Option<Vote<u64>>,
    /// The last entry purged (everything up to it is gone).
    pub purged: Option<LogId<u64>>,
    /// Ring offset of the first live record.
    pub tail: u64,
    /// The index the record at `tail` carries.
    pub first: u64,
    /// The member this log belongs to (0: not said). A member refuses to
    /// start on another's log: a copied directory would bring that
    /// member's vote along, and two members voting as one breaks Raft.
    pub member: u64,
}

/// The file and the slot written last.
pub struct HardStateFile {
    dev: FileDevice,
    seq: u64,
    /// The state as last saved (or loaded).
    pub state: HardState,
}

fn crc(seq: u64, body: &[u8]) -> u32 {
    let c = crc32c::crc32c(&seq.to_le_bytes());
    let c = crc32c::crc32c_append(c, &(body.len() as u32).to_le_bytes());
    crc32c::crc32c_append(c, body)
}

/// A slot whose magic and checksum hold: its version, sequence and body.
fn checked_slot(b: &[u8]) -> Option<(u16, u64, &[u8])> {
    if b[..4] != MAGIC {
        return None;
    }
    let seq = u64::from_le_bytes(b[8..16].try_into().ok()?);
    let len = u32::from_le_bytes(b[16..20].try_into().ok()?) as usize;
    let want = u32::from_le_bytes(b[20..24].try_into().ok()?);
    let body = b.get(HEADER..HEADER + len)?;
    (crc(seq, body) == want).then(|| (u16::from_le_bytes([b[4], b[5]]), seq, body))
}

fn parse(b: &[u8]) -> Option<(u64, HardState)> {
    let (version, seq, body) = checked_slot(b)?;
    if version != VERSION {
        return None;
    }
    postcard::from_bytes(body).ok().map(|s| (seq, s))
}

impl HardStateFile {
    /// Creates the file with an empty state for `member` (refusing to
    /// overwrite one).
    pub fn create(path: &Path, member: u64) -> io::Result<HardStateFile> {
        if path.exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists: refusing to format over it", path.display()),
            ));
        }
        let dev = FileDevice::create(path, 2 * SLOT)?;
        let mut f = HardStateFile {
            dev,
            seq: 0,
            state: HardState::default(),
        };
        let empty = HardState {
            member,
            ..HardState::default()
        };
        f.save(empty.clone())?;
        f.save(empty)?;
        Ok(f)
    }

    /// Opens the file and reads the newer good slot.
    pub fn open(path: &Path) -> io::Result<HardStateFile> {
        let dev = FileDevice::open_with(path, true)?;
        if dev.len() < 2 * SLOT {
            return Err(io::Error::other(format!(
                "{}: {} bytes, not a raft state file",
                path.display(),
                dev.len()
            )));
        }
        let mut best: Option<(u64, HardState)> = None;
        let mut other_version = None;
        for slot in 0..2 {
            let mut b = AlignedBuf::zeroed(SLOT as usize);
            dev.read_at(&mut b, slot * SLOT)?;
            if let Some((version, ..)) = checked_slot(&b).filter(|(v, ..)| *v != VERSION) {
                other_version = Some(version);
            }
            if let Some((seq, s)) = parse(&b)
                && best.as_ref().is_none_or(|(q, _)| seq > *q)
            {
                best = Some((seq, s));
            }
        }
        if let (None, Some(v)) = (&best, other_version) {
            return Err(io::Error::other(format!(
                "{}: raft state version {v}, made by another tessera release (this one \
                 reads version {VERSION}); a group is upgraded by formatting anew",
                path.display()
            )));
        }
        let (seq, state) = best.ok_or_else(|| {
            io::Error::other(format!(
                "{}: neither slot holds a valid raft state",
                path.display()
            ))
        })?;
        Ok(HardStateFile { dev, seq, state })
    }

    /// Writes `state` to the older slot and flushes it.
    pub fn save(&mut self, state: HardState) -> io::Result<()> {
        let body = postcard::to_allocvec(&state).map_err(io::Error::other)?;
        if HEADER + body.len() > SLOT as usize {
            return Err(io::Error::other("raft state larger than its slot"));
        }
        let seq = self.seq + 1;
        let mut b = AlignedBuf::zeroed(SLOT as usize);
        b[..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        b[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
        b[20..24].copy_from_slice(&crc(seq, &body).to_le_bytes());
        b[HEADER..HEADER + body.len()].copy_from_slice(&body);
        self.dev.write_at(&b, (seq % 2) * SLOT)?;
        self.dev.flush()?;
        self.seq = seq;
        self.state = state;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_of_another_version_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mds.raft");
        drop(HardStateFile::create(&p, 1).unwrap());
        // Both slots as an older release wrote them.
        let raw = FileDevice::open_with(&p, false).unwrap();
        for at in [0, SLOT] {
            let mut b = AlignedBuf::zeroed(SLOT as usize);
            raw.read_at(&mut b, at).unwrap();
            b[4..6].copy_from_slice(&1u16.to_le_bytes());
            raw.write_at(&b, at).unwrap();
        }
        raw.flush().unwrap();
        drop(raw);
        let e = HardStateFile::open(&p).err().unwrap().to_string();
        assert!(
            e.contains("raft state version 1") && e.contains("another tessera release"),
            "{e}"
        );
    }

    #[test]
    fn the_newer_good_slot_wins_and_a_torn_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mds.raft");
        let mut f = HardStateFile::create(&p, 1).unwrap();
        let mut s = HardState {
            tail: 4096,
            first: 7,
            member: 1,
            ..HardState::default()
        };
        f.save(s.clone()).unwrap();
        s.tail = 8192;
        f.save(s.clone()).unwrap();
        let seq = f.seq;
        drop(f);
        assert_eq!(HardStateFile::open(&p).unwrap().state.tail, 8192);
        // Tear the newer slot: the older one is read.
        let mut j = AlignedBuf::zeroed(SLOT as usize);
        j[..4].copy_from_slice(&MAGIC);
        let raw = FileDevice::open_with(&p, false).unwrap();
        raw.write_at(&j, (seq % 2) * SLOT).unwrap();
        raw.flush().unwrap();
        drop(raw);
        let back = HardStateFile::open(&p).unwrap();
        assert_eq!(back.state.tail, 4096);
        assert_eq!(back.state.member, 1);
        drop(back);
        assert!(HardStateFile::create(&p, 1).is_err());
    }
}
