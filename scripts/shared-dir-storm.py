#!/usr/bin/env python3
"""Creates and unlinks of empty files by worker processes in one directory.

For each worker count, FILES empty files are made with
open(O_CREAT|O_EXCL) + close, split evenly among the worker processes,
all in DIR/w<N> (one shared directory), then unlinked by the process that
made them. Prints operations per second (first worker's start to last
worker's end) and how busy the machine's CPUs were meanwhile
(/proc/stat), which tells a lock-bound point (CPUs idle) from a CPU-bound
one.

    python3 scripts/shared-dir-storm.py /mnt/tessera/storm 8000 1,4,16
    python3 scripts/shared-dir-storm.py /mnt/tessera/storm 8000 1,4,16 --cpus 0

--cpus pins every worker to those CPUs (sched_setaffinity); together with
`taskset -a -p MASK PID` on the mount's process it shows what placing the
mount and the workers on the same or on different CPUs costs
(docs/BENCHMARKS.md, "One shared directory: where the CPUs go").

Run it on a Tessera mount and on a local file system in the same session
to compare: absolute figures drift from run to run on a shared machine.
"""

import argparse
import multiprocessing as mp
import os
import time


def work(d, i, n, op, cpus, bar, q):
    if cpus:
        os.sched_setaffinity(0, cpus)
    bar.wait()
    t0 = time.perf_counter()
    if op == "create":
        for k in range(n):
            fd = os.open(f"{d}/f{i}_{k}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
    else:
        for k in range(n):
            os.unlink(f"{d}/f{i}_{k}")
    q.put((t0, time.perf_counter()))


def cpu_times():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v), v[3] + v[4]  # all, idle + iowait


def point(d, workers, n, op, cpus):
    bar = mp.Barrier(workers + 1)
    q = mp.Queue()
    ps = [mp.Process(target=work, args=(d, i, n, op, cpus, bar, q)) for i in range(workers)]
    for p in ps:
        p.start()
    c0 = cpu_times()
    bar.wait()
    spans = [q.get() for _ in ps]
    c1 = cpu_times()
    for p in ps:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a worker failed ({op}, {workers} workers)")
    begin = min(s[0] for s in spans)
    end = max(s[1] for s in spans)
    busy = 1 - (c1[1] - c0[1]) / max(1, c1[0] - c0[0])
    return n * workers / (end - begin), busy


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("files", type=int)
    ap.add_argument("workers", help="comma-separated worker counts, e.g. 1,4,16")
    ap.add_argument("--cpus", help="pin the workers to these CPUs, e.g. 0 or 0,1")
    a = ap.parse_args()
    mp.set_start_method("fork")
    cpus = {int(c) for c in a.cpus.split(",")} if a.cpus else None
    for w in (int(x) for x in a.workers.split(",")):
        d = os.path.join(a.dir, f"w{w}")
        os.makedirs(d, exist_ok=False)
        n = a.files // w
        for op in ("create", "unlink"):
            rate, busy = point(d, w, n, op, cpus)
            print(f"{op:6} workers={w:2} {rate:9.0f}/s  cpu busy {busy * 100:3.0f} %", flush=True)
        os.rmdir(d)


if __name__ == "__main__":
    main()
