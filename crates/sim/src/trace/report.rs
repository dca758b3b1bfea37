//! The study: every policy replayed with prefetch against the no-prefetch
//! baseline; JSON and the seed's figures 4 (per policy, mandatory and
//! non-mandatory requests as a share of no-prefetch) and 5 (per client).

use std::path::{Path, PathBuf};

use anyhow::Context;
use mds::ids::PolicyKind;
use serde::{Deserialize, Serialize};

use super::event::{ParseStats, Trace};
use super::namespace::{Namespace, Shape};
use super::replay::{ReplayConfig, Requests, replay};
use crate::plot::{Chart, Scale, Series, lines_svg, stacked_bars_svg};

/// One client's figures under one policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientResult {
    /// Client name (host).
    pub client: String,
    /// Requests without prefetch.
    pub baseline: Requests,
    /// Requests with prefetch.
    pub with_prefetch: Requests,
    /// `with_prefetch.total()` as a percentage of `baseline.total()`.
    pub percent: f64,
}

/// One policy's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyResult {
    /// Policy name.
    pub policy: String,
    /// All clients' requests with prefetch.
    pub requests: Requests,
    /// Mandatory requests as a percentage of the no-prefetch total.
    pub mandatory_percent: f64,
    /// Non-mandatory requests as a percentage of the no-prefetch total.
    pub non_mandatory_percent: f64,
    /// Per client.
    pub clients: Vec<ClientResult>,
}

/// The whole study, as written to `trace.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Study {
    /// Cache and prefetch settings.
    pub config: ReplayConfig,
    /// How parsing went.
    pub parse: ParseStats,
    /// The reconstructed namespace.
    pub namespace: Shape,
    /// Events replayed.
    pub events: u64,
    /// All clients' requests without prefetch (the same for every policy).
    pub baseline: Requests,
    /// Per policy.
    pub policies: Vec<PolicyResult>,
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn sum(v: &[Requests]) -> Requests {
    v.iter().copied().sum()
}

/// Runs the study over `policies`.
pub fn study(
    t: &Trace,
    cfg: &ReplayConfig,
    policies: &[PolicyKind],
) -> Result<Study, super::namespace::StudyError> {
    let ns = Namespace::build(t);
    let no_prefetch = ReplayConfig {
        prefetch: 0,
        ..*cfg
    };
    // Without prefetch the ids do not matter: one replay serves every policy.
    let first = policies.first().copied().unwrap_or(PolicyKind::CreateOrder);
    let base = replay(t, &ns, &ns.assign_ids(t, first)?, &no_prefetch);
    let baseline = sum(&base);
    let mut out = Vec::new();
    for &p in policies {
        let per = replay(t, &ns, &ns.assign_ids(t, p)?, cfg);
        let all = sum(&per);
        out.push(PolicyResult {
            policy: p.name().to_string(),
            requests: all,
            mandatory_percent: pct(all.mandatory, baseline.total()),
            non_mandatory_percent: pct(all.non_mandatory, baseline.total()),
            clients: per
                .iter()
                .zip(&base)
                .enumerate()
                .map(|(i, (w, b))| ClientResult {
                    client: t.clients[i].clone(),
                    baseline: *b,
                    with_prefetch: *w,
                    percent: pct(w.total(), b.total()),
                })
                .collect(),
        });
    }
    Ok(Study {
        config: *cfg,
        parse: t.stats.clone(),
        namespace: ns.shape,
        events: t.events.len() as u64,
        baseline,
        policies: out,
    })
}

impl Study {
    /// Writes `trace.json`, `figure4.svg` and `figure5.svg` into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = dir.join("trace.json");
        std::fs::write(&json, serde_json::to_vec_pretty(self)?)?;
        let f4 = dir.join("figure4.svg");
        let names: Vec<String> = self.policies.iter().map(|p| p.policy.clone()).collect();
        stacked_bars_svg(
            &f4,
            &format!(
                "MDS requests with prefetch {} vs none",
                self.config.prefetch
            ),
            "object-id policy",
            "% of no-prefetch requests",
            &names,
            &[
                (
                    "mandatory".into(),
                    self.policies.iter().map(|p| p.mandatory_percent).collect(),
                ),
                (
                    "non-mandatory".into(),
                    self.policies
                        .iter()
                        .map(|p| p.non_mandatory_percent)
                        .collect(),
                ),
            ],
        )?;
        // Figure 5: clients ranked by their no-prefetch requests.
        let mut order: Vec<usize> =
            (0..self.policies.first().map_or(0, |p| p.clients.len())).collect();
        if let Some(p) = self.policies.first() {
            order.sort_by_key(|&i| std::cmp::Reverse(p.clients[i].baseline.total()));
        }
        let series: Vec<Series> = self
            .policies
            .iter()
            .map(|p| {
                let pts = order
                    .iter()
                    .enumerate()
                    .filter(|(_, i)| p.clients[**i].baseline.total() > 0)
                    .map(|(rank, &i)| (rank as f64 + 1.0, p.clients[i].percent))
                    .collect();
                (p.policy.clone(), pts)
            })
            .collect();
        let f5 = dir.join("figure5.svg");
        lines_svg(
            &f5,
            &Chart {
                title: "Per client: MDS requests with prefetch, % of none",
                x: "client (busiest first)",
                y: "% of no-prefetch requests",
                x_scale: Scale::Integer,
                y_scale: Scale::Percent,
            },
            &series,
        )?;
        Ok(vec![json, f4, f5])
    }
}
