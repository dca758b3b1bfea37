//! The output directory of `tessera sim alloc`: per run a result
//! (`<label>.json`) and a checkpoint (`<label>.checkpoint.json`); for all
//! runs together the figures (EBOFS figures 4–6 and free-space shape).

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::aging::{AgingSim, RunResult};
use super::checkpoint::Checkpoint;
use super::metrics::HISTOGRAM_BUCKETS;
use super::workload::AllocParams;
use crate::plot::{Chart, Scale, Series, lines_svg};

/// Where run `label`'s result goes.
pub fn result_path(dir: &Path, label: &str) -> PathBuf {
    dir.join(format!("{label}.json"))
}

/// Where run `label`'s checkpoint goes.
pub fn checkpoint_path(dir: &Path, label: &str) -> PathBuf {
    dir.join(format!("{label}.checkpoint.json"))
}

/// How a run begins.
pub enum Start {
    /// From an empty device.
    Fresh(AgingSim),
    /// From its checkpoint.
    Resumed(AgingSim),
    /// Nothing to do: the directory holds its finished result.
    Done(RunResult),
}

/// Same workload except for the number of operations (a run can be extended).
fn same_workload(a: &AllocParams, b: &AllocParams) -> bool {
    AllocParams {
        ops: 0,
        ..a.clone()
    } == AllocParams {
        ops: 0,
        ..b.clone()
    }
}

/// Starts run `params` in `dir`. Without `resume`, an existing checkpoint or
/// result is an error (nothing is overwritten); with it, a finished result
/// of the same parameters is reused, and a checkpoint of the same workload
/// is continued up to `params.ops` (which may extend a finished run).
pub fn start(dir: &Path, params: &AllocParams, resume: bool) -> anyhow::Result<Start> {
    let label = params.label();
    let cp_path = checkpoint_path(dir, &label);
    let res_path = result_path(dir, &label);
    if !resume {
        if cp_path.exists() || res_path.exists() {
            anyhow::bail!(
                "{} already holds run {label}: pass --resume to continue it, or choose another --out",
                dir.display()
            );
        }
        return AgingSim::new(params.clone())
            .map(Start::Fresh)
            .map_err(anyhow::Error::msg);
    }
    if res_path.exists() {
        let r: RunResult = serde_json::from_slice(&std::fs::read(&res_path)?)
            .with_context(|| format!("{} is not a run result", res_path.display()))?;
        if r.params == *params {
            return Ok(Start::Done(r));
        }
    }
    if cp_path.exists() {
        let cp = Checkpoint::load(&cp_path)?;
        if !same_workload(&cp.params, params) {
            anyhow::bail!(
                "{} was made with other parameters than this command's; use the same flags, or another --out",
                cp_path.display()
            );
        }
        if cp.ops > params.ops {
            anyhow::bail!(
                "{} is already at {} operations, past --ops {}",
                cp_path.display(),
                cp.ops,
                params.ops
            );
        }
        let mut cp = cp;
        cp.params.ops = params.ops;
        return AgingSim::resume(cp)
            .map(Start::Resumed)
            .map_err(anyhow::Error::msg);
    }
    AgingSim::new(params.clone())
        .map(Start::Fresh)
        .map_err(anyhow::Error::msg)
}

/// Writes a finished run's result (and its final checkpoint, so it can be extended).
pub fn finish(dir: &Path, sim: &AgingSim, ops_per_sec: f64) -> anyhow::Result<RunResult> {
    let label = sim.params().label();
    sim.checkpoint().save(&checkpoint_path(dir, &label))?;
    let r = sim.result(ops_per_sec);
    let path = result_path(dir, &label);
    std::fs::write(&path, serde_json::to_vec_pretty(&r)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(r)
}

/// A chart over operations done (log scale), like EBOFS's figures.
fn over_time<'a>(title: &'a str, y: &'a str, y_scale: Scale) -> Chart<'a> {
    Chart {
        title,
        x: "operations (writes + deletes)",
        y,
        x_scale: Scale::Log,
        y_scale,
    }
}

/// Draws the figures of `runs` into `dir`; returns the files written.
pub fn write_figures(dir: &Path, runs: &[RunResult]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let per_run = |f: &dyn Fn(&super::Sample) -> f64| -> Vec<Series> {
        runs.iter()
            .map(|r| {
                let pts = r.samples.iter().map(|s| (s.ops as f64, f(s))).collect();
                (r.label.clone(), pts)
            })
            .collect()
    };
    let figures: [(&str, Chart, Vec<Series>); 4] = [
        (
            "extents_per_object.svg",
            over_time(
                "Extents per object over time",
                "extents per object",
                Scale::Linear,
            ),
            per_run(&|s| s.extents_per_object),
        ),
        (
            "multi_extent_size.svg",
            over_time(
                "Mean extent size of multi-extent objects",
                "extent size (KiB)",
                Scale::Linear,
            ),
            per_run(&|s| s.multi_extent_kib),
        ),
        (
            "free_extents.svg",
            over_time(
                "Free space: number of free extents",
                "free extents",
                Scale::Log,
            ),
            per_run(&|s| s.free_extents as f64),
        ),
        (
            "free_fragmentation.svg",
            over_time(
                "Free-space fragmentation (1 - largest free run / free space)",
                "fragmentation",
                Scale::Linear,
            ),
            per_run(&|s| s.free_fragmentation),
        ),
    ];
    for (name, chart, series) in figures {
        let path = dir.join(name);
        lines_svg(&path, &chart, &series)?;
        out.push(path);
    }
    for r in runs {
        let series: Vec<Series> = (0..HISTOGRAM_BUCKETS)
            .filter(|&b| r.samples.iter().any(|s| s.histogram[b] > 0))
            .map(|b| {
                let pts = r
                    .samples
                    .iter()
                    .map(|s| (s.ops as f64, s.histogram[b] as f64))
                    .collect();
                (format!("{} KiB", 4u64 << b), pts)
            })
            .collect();
        let path = dir.join(format!("extent_histogram-{}.svg", r.label));
        let title = format!("Extents by size over time ({})", r.label);
        lines_svg(
            &path,
            &over_time(&title, "number of extents", Scale::Log),
            &series,
        )?;
        out.push(path);
    }
    Ok(out)
}
