//! The EBOFS workload model and its parameters.
//!
//! Many write streams are in progress at once; each operation either
//! advances one stream (chosen at random) by one increment, or deletes one
//! object. A finished stream is replaced by a new one at once, so new streams
//! arrive steadily. Object sizes are bimodal: most objects are small, most
//! bytes are in large objects. A fraction of objects is temporary and dies
//! young (an exponential lifetime counted in operations after it is
//! complete); the others live until the utilization target forces deletions,
//! which then pick a random complete object.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Which of the store's allocators to age.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SimPolicy {
    /// EBOFS extents with size buckets ([`store::alloc::ExtentAllocator`]).
    Extent,
    /// OBFS regions with two block sizes ([`store::alloc::RegionAllocator`]).
    Region,
}

impl std::str::FromStr for SimPolicy {
    type Err = ParamError;
    fn from_str(s: &str) -> Result<Self, ParamError> {
        match s {
            "extent" => Ok(SimPolicy::Extent),
            "region" => Ok(SimPolicy::Region),
            other => Err(ParamError::UnknownPolicy(other.into())),
        }
    }
}

/// Which knob of [`AllocParams`] is out of its domain, with its value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// Not a policy name.
    #[error("unknown policy {0:?}: use extent or region")]
    UnknownPolicy(String),
    /// A fraction out of its range.
    #[error("{name} must be in [{lo}, {hi}], not {got}")]
    OutOfRange {
        /// The knob.
        name: &'static str,
        /// Smallest allowed.
        lo: f64,
        /// Largest allowed.
        hi: f64,
        /// Given.
        got: f64,
    },
    /// The size increment is not a positive multiple of 4 KiB.
    #[error("increment must be a positive multiple of 4 KiB, not {0}")]
    Increment(u64),
    /// Small-object sizes are empty or reversed.
    #[error("small sizes need 0 < small-min <= small-max, not {min} and {max}")]
    SmallSizes {
        /// small-min given.
        min: u64,
        /// small-max given.
        max: u64,
    },
    /// Large-object sizes are empty or reversed.
    #[error("large sizes need 0 < large-min <= large-max, not {min} and {max}")]
    LargeSizes {
        /// large-min given.
        min: u64,
        /// large-max given.
        max: u64,
    },
    /// No write streams.
    #[error("streams must be at least 1")]
    NoStreams,
    /// Stream spacing out of range.
    #[error("spacing must be in 1..=32, not {0}")]
    Spacing(u32),
    /// The large block is not a multiple of 4 KiB.
    #[error("large block must be a multiple of 4 KiB, not {0}")]
    LargeBlock(u64),
    /// The region size is not a multiple of the large block.
    #[error("region size {region} must be a multiple of the large block {large}")]
    RegionSize {
        /// Region size given.
        region: u64,
        /// Large block given.
        large: u64,
    },
    /// The device cannot hold the streams' objects.
    #[error(
        "disk of {disk} bytes is too small for {streams} streams of objects up to {largest} bytes (needs {need})"
    )]
    DiskTooSmall {
        /// Disk size given.
        disk: u64,
        /// Streams.
        streams: usize,
        /// Largest object.
        largest: u64,
        /// Bytes needed.
        need: u64,
    },
}

impl std::fmt::Display for SimPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SimPolicy::Extent => "extent",
            SimPolicy::Region => "region",
        })
    }
}

/// Every knob of one aging run. Sizes are bytes; defaults in [`Default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocParams {
    /// Operations to run (write increments plus deletions).
    pub ops: u64,
    /// Allocator under test.
    pub policy: SimPolicy,
    /// Extent policy: one size bucket per `spacing` powers of two.
    pub spacing: u32,
    /// Region policy: region size.
    pub region_size: u64,
    /// Region policy: large-block size.
    pub large_block: u64,
    /// Simulated device size.
    pub disk: u64,
    /// Fraction of the device kept in use (deletions start above it).
    pub utilization: f64,
    /// Write streams in progress at once.
    pub streams: usize,
    /// Bytes one write operation appends to its stream's object.
    pub increment: u64,
    /// Fraction of new objects drawn from the small-size range.
    pub small_fraction: f64,
    /// Small objects: sizes log-uniform in `[small_min, small_max]`.
    pub small_min: u64,
    /// Upper end of the small range.
    pub small_max: u64,
    /// Large objects: sizes log-uniform in `[large_min, large_max]`.
    pub large_min: u64,
    /// Upper end of the large range.
    pub large_max: u64,
    /// Fraction of new objects that are temporary (die young).
    pub temp_fraction: f64,
    /// Mean lifetime of a temporary object, in operations after it is complete.
    pub temp_life: u64,
    /// Seed of the workload's random numbers (runs with one seed repeat exactly).
    pub seed: u64,
}

impl Default for AllocParams {
    fn default() -> Self {
        AllocParams {
            ops: 10_000_000,
            policy: SimPolicy::Extent,
            spacing: 1,
            region_size: 8 << 20,
            large_block: 512 << 10,
            disk: 100 << 30,
            utilization: 0.8,
            streams: 16,
            increment: 64 << 10,
            small_fraction: 0.9,
            small_min: 4 << 10,
            small_max: 512 << 10,
            large_min: 1 << 20,
            large_max: 64 << 20,
            temp_fraction: 0.6,
            temp_life: 100_000,
            seed: 1,
        }
    }
}

impl AllocParams {
    /// Checks every knob; the message names the offending one.
    pub fn validate(&self) -> Result<(), ParamError> {
        let frac = |name: &'static str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(ParamError::OutOfRange {
                    name,
                    lo,
                    hi,
                    got: v,
                })
            }
        };
        frac("utilization", self.utilization, 0.05, 0.98)?;
        frac("small fraction", self.small_fraction, 0.0, 1.0)?;
        frac("temporary fraction", self.temp_fraction, 0.0, 1.0)?;
        let block = 4096;
        if self.increment < block || !self.increment.is_multiple_of(block) {
            return Err(ParamError::Increment(self.increment));
        }
        if self.small_min == 0 || self.small_min > self.small_max {
            return Err(ParamError::SmallSizes {
                min: self.small_min,
                max: self.small_max,
            });
        }
        if self.large_min == 0 || self.large_min > self.large_max {
            return Err(ParamError::LargeSizes {
                min: self.large_min,
                max: self.large_max,
            });
        }
        if self.streams == 0 {
            return Err(ParamError::NoStreams);
        }
        if self.spacing == 0 || self.spacing > 32 {
            return Err(ParamError::Spacing(self.spacing));
        }
        if self.large_block < block || !self.large_block.is_multiple_of(block) {
            return Err(ParamError::LargeBlock(self.large_block));
        }
        if self.region_size < self.large_block || !self.region_size.is_multiple_of(self.large_block)
        {
            return Err(ParamError::RegionSize {
                region: self.region_size,
                large: self.large_block,
            });
        }
        let need = self.large_max.max(self.small_max) * self.streams as u64 * 4;
        if self.disk < need || self.disk / block > u64::from(u32::MAX) * 16 {
            return Err(ParamError::DiskTooSmall {
                disk: self.disk,
                streams: self.streams,
                largest: self.large_max.max(self.small_max),
                need,
            });
        }
        Ok(())
    }

    /// A short name for this run, used for file names and plot legends.
    pub fn label(&self) -> String {
        let u = (self.utilization * 100.0).round();
        match self.policy {
            SimPolicy::Extent => format!("extent-s{}-u{u}", self.spacing),
            SimPolicy::Region => format!("region-u{u}"),
        }
    }

    /// Draws the final size of a new object, in bytes (a 4 KiB multiple).
    pub(crate) fn object_size(&self, rng: &mut impl Rng) -> u64 {
        let (lo, hi) = if rng.random::<f64>() < self.small_fraction {
            (self.small_min, self.small_max)
        } else {
            (self.large_min, self.large_max)
        };
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        let v = (a + (b - a) * rng.random::<f64>()).exp() as u64;
        v.clamp(lo, hi).next_multiple_of(4096)
    }

    /// Draws a temporary object's lifetime, in operations.
    pub(crate) fn lifetime(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.random::<f64>();
        (-(1.0 - u).ln() * self.temp_life as f64) as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn defaults_put_most_objects_small_and_most_bytes_in_large_objects() {
        let p = AllocParams::default();
        p.validate().expect("defaults are valid");
        let mut rng = SmallRng::seed_from_u64(7);
        let sizes: Vec<u64> = (0..100_000).map(|_| p.object_size(&mut rng)).collect();
        let small: Vec<&u64> = sizes.iter().filter(|s| **s <= p.small_max).collect();
        let small_bytes: u64 = small.iter().copied().sum();
        let all: u64 = sizes.iter().sum();
        assert!(small.len() as f64 > 0.85 * sizes.len() as f64);
        assert!((small_bytes as f64) < 0.1 * all as f64);
        assert!(sizes.iter().all(|s| s % 4096 == 0 && *s >= 4096));
    }

    #[test]
    fn bad_knobs_are_named() {
        let p = AllocParams {
            utilization: 1.5,
            ..AllocParams::default()
        };
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("utilization")
        );
        let p = AllocParams {
            increment: 1000,
            ..AllocParams::default()
        };
        assert!(p.validate().unwrap_err().to_string().contains("increment"));
        let p = AllocParams {
            disk: 1 << 20,
            ..AllocParams::default()
        };
        assert!(p.validate().unwrap_err().to_string().contains("too small"));
    }
}
