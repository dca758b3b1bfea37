#!/usr/bin/env python3
"""Two builds of tessera side by side: `bench small --quick` or
`bench osd --quick`, runs alternated (before, after, before, ...), and the
median of every point with the ratio after / before.

  sudo scripts/bench-two-builds.py small /tmp/tessera-before /tmp/tessera-after 7
  sudo scripts/bench-two-builds.py osd   /tmp/tessera-before /tmp/tessera-after 5

Make the two binaries with `cargo build --release -p tessera` at each
commit (a `git worktree` for the older one, with CARGO_TARGET_DIR pointing
at this checkout's target/ so dependencies are not built twice) and copy
target/release/tessera aside after each build. Absolute figures drift
±30 % on a small virtual machine: for `small`, ext4's own figures (the
same code in both builds) give the machine's drift; for `osd`, the table
is of OSD MB/s, not of its ratio to the in-process baseline, which moves
as much as the OSD does.
"""
import math, re, statistics, subprocess, sys

SMALL = re.compile(r"(create|unlink)\s+(\d+)\s+(shared|per worker)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)")
OSD = re.compile(r"(\S+)\s+(\d+)\s+(no auth|authenticated|encrypted)\s+[\d.]+\s+([\d.]+)\s+\d+\s+\d+")


def run(exe, kind):
    out = subprocess.run([exe, "bench", kind, "--quick"], capture_output=True, text=True, cwd="/tmp")
    pts = {}
    for line in out.stdout.splitlines():
        m = (SMALL if kind == "small" else OSD).match(line)
        if m:
            key = " ".join(m.group(1, 2, 3))
            pts[key] = [float(x) for x in m.groups()[3:]]
    if not pts:
        sys.exit(f"{exe} bench {kind}: no figures\n{out.stdout}\n{out.stderr}")
    return pts


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("small", "osd"):
        sys.exit(__doc__)
    kind, before, after, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    runs = {"before": [], "after": []}
    for i in range(n):
        runs["before"].append(run(before, kind))
        runs["after"].append(run(after, kind))
        print(f"round {i + 1}/{n} done", file=sys.stderr)
    cols = ["mount", "no-lease", "sync-ns", "ext4"] if kind == "small" else ["OSD MB/s"]
    logs = {c: [] for c in cols}
    print("| point | " + " | ".join(f"{c} before | {c} after | ratio" for c in cols) + " |")
    print("|---|" + "---|---|---|" * len(cols))
    for key in runs["before"][0]:
        row = []
        for i, c in enumerate(cols):
            b = statistics.median(r[key][i] for r in runs["before"] if key in r)
            a = statistics.median(r[key][i] for r in runs["after"] if key in r)
            logs[c].append(math.log(a / b))
            row.append(f"{b:,.0f} | {a:,.0f} | {a / b:.2f}")
        print(f"| {key} | " + " | ".join(row) + " |")
    for c in cols:
        print(f"{c}: geometric mean of after / before {math.exp(sum(logs[c]) / len(logs[c])):.3f}")


if __name__ == "__main__":
    main()
