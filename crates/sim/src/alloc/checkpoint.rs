//! Checkpoint files: the whole state of an aging run as JSON, written
//! atomically (temporary file, fsync, rename) so a crash while saving keeps
//! the previous checkpoint. The allocator itself is not saved: it is rebuilt
//! from the objects' extents (see [`super::AgingSim::resume`]).

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::metrics::{Sample, SampleClock};
use super::model::{Counters, Piece};
use super::workload::AllocParams;

/// One live object in a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ObjectRecord {
    pub id: u32,
    pub size: u64,
    pub target: u64,
    pub large: bool,
    pub temp: bool,
    pub map: Vec<Piece>,
}

/// A saved aging run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version ([`Checkpoint::VERSION`]).
    pub version: u32,
    /// The run's parameters.
    pub params: AllocParams,
    /// Operations done.
    pub ops: u64,
    pub(crate) epoch_seed: u64,
    pub(crate) counters: Counters,
    pub(crate) clock: SampleClock,
    pub(crate) samples: Vec<Sample>,
    pub(crate) slots: u32,
    pub(crate) free_ids: Vec<u32>,
    pub(crate) streams: Vec<u32>,
    pub(crate) deletable: Vec<u32>,
    pub(crate) dying: Vec<(u64, u32)>,
    pub(crate) objects: Vec<ObjectRecord>,
}

impl Checkpoint {
    /// The checkpoint format this build writes and reads.
    pub const VERSION: u32 = 1;

    /// Writes the checkpoint to `path` atomically.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let tmp = path.with_extension("tmp");
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = std::io::BufWriter::new(&mut f);
        serde_json::to_writer(&mut w, self)?;
        w.flush()?;
        drop(w);
        f.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(())
    }

    /// Reads a checkpoint; a damaged or foreign file is a clear error.
    pub fn load(path: &Path) -> anyhow::Result<Checkpoint> {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let cp: Checkpoint = serde_json::from_reader(std::io::BufReader::new(f))
            .with_context(|| format!("{} is not a readable aging checkpoint", path.display()))?;
        if cp.version != Self::VERSION {
            anyhow::bail!(
                "{} is checkpoint format {}, this build reads format {}",
                path.display(),
                cp.version,
                Self::VERSION
            );
        }
        Ok(cp)
    }
}
