//! Synthetic traces in the path format ([`super::pathfmt`]) for scale tests.
//!
//! Model: a random tree of `dirs` directories (each new directory's parent
//! drawn uniformly from those shallower than `max_depth`) holding `files`
//! files (each in a uniformly drawn directory). Clients run sessions one
//! after another: a client picks a random directory and walks its subtree
//! depth-first or breadth-first (even odds) through at most `walk`
//! directories; in each it lists the directory and stats every file (each
//! stat resolves the full path), and with probability `temp_fraction` makes
//! a temporary file there, stats it and removes it. Sessions continue until
//! `lines` lines are written. Same seed, same trace.

use std::collections::VecDeque;
use std::io::Write;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Knobs of the generator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenParams {
    /// Clients.
    pub clients: u32,
    /// Directories (including the root).
    pub dirs: usize,
    /// Files.
    pub files: usize,
    /// Deepest directory level.
    pub max_depth: u32,
    /// Directories one session visits at most.
    pub walk: usize,
    /// Chance per visited directory of a temporary file.
    pub temp_fraction: f64,
    /// Lines to write (about).
    pub lines: u64,
    /// Seed.
    pub seed: u64,
}

impl Default for GenParams {
    fn default() -> Self {
        GenParams {
            clients: 8,
            dirs: 2_000,
            files: 40_000,
            max_depth: 8,
            walk: 50,
            temp_fraction: 0.2,
            lines: 200_000,
            seed: 1,
        }
    }
}

/// Writes a trace; returns the lines written.
pub fn generate(p: &GenParams, out: &mut impl Write) -> std::io::Result<u64> {
    let mut rng = SmallRng::seed_from_u64(p.seed);
    let dirs = p.dirs.max(1);
    let mut path = vec![String::new()];
    let mut depth = vec![0u32];
    let mut subdirs: Vec<Vec<usize>> = vec![Vec::new()];
    let mut shallow = vec![0usize];
    for i in 1..dirs {
        let parent = shallow[rng.random_range(0..shallow.len())];
        path.push(format!("{}/d{i}", path[parent]));
        depth.push(depth[parent] + 1);
        subdirs.push(Vec::new());
        subdirs[parent].push(i);
        if depth[i] < p.max_depth {
            shallow.push(i);
        }
    }
    let mut files: Vec<Vec<usize>> = vec![Vec::new(); dirs];
    for f in 0..p.files {
        files[rng.random_range(0..dirs)].push(f);
    }
    writeln!(out, "# tessera trace v1 — synthetic: {p:?}")?;
    let lines = std::cell::Cell::new(0u64);
    let mut tmp = 0u64;
    let emit = |out: &mut dyn Write, client: u32, op: &str, path: &str| -> std::io::Result<()> {
        let n = lines.get() + 1;
        lines.set(n);
        let shown = if path.is_empty() { "/" } else { path };
        writeln!(out, "{}.{:03} c{client} {op} {shown}", n / 1000, n % 1000)
    };
    while lines.get() < p.lines {
        let client = rng.random_range(0..p.clients.max(1));
        let start = rng.random_range(0..dirs);
        let depth_first = rng.random::<bool>();
        let mut todo = VecDeque::from([start]);
        let mut visited = 0;
        while visited < p.walk {
            let next = if depth_first {
                todo.pop_back()
            } else {
                todo.pop_front()
            };
            let Some(d) = next else { break };
            visited += 1;
            emit(out, client, "readdir", &path[d])?;
            for f in &files[d] {
                emit(out, client, "stat", &format!("{}/f{f}", path[d]))?;
            }
            if rng.random::<f64>() < p.temp_fraction {
                tmp += 1;
                let t = format!("{}/tmp{tmp}", path[d]);
                emit(out, client, "create", &t)?;
                emit(out, client, "stat", &t)?;
                emit(out, client, "unlink", &t)?;
            }
            if depth_first {
                todo.extend(subdirs[d].iter().rev());
            } else {
                todo.extend(subdirs[d].iter());
            }
        }
    }
    Ok(lines.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_trace_parses_cleanly_and_repeats_with_its_seed() {
        let p = GenParams {
            lines: 5_000,
            dirs: 50,
            files: 500,
            ..GenParams::default()
        };
        let mut a = Vec::new();
        let n = generate(&p, &mut a).expect("writes");
        assert!(n >= 5_000);
        let mut b = Vec::new();
        generate(&p, &mut b).expect("writes");
        assert_eq!(a, b);
        let t = super::super::pathfmt::parse(std::str::from_utf8(&a).expect("utf-8"));
        assert_eq!(t.stats.malformed, 0, "{:?}", t.stats.examples);
        assert_eq!(t.clients.len(), 8);
    }
}
