#!/usr/bin/env python3
"""The cost of replica chains (namespace on the OSDs), side by side.

Start two clusters on this machine and mount them, one copy and three:

  tessera up --data /tmp/cc1 --osds 3 --size 1G --listen 127.0.0.1:7501 \
      --cluster c1 --namespace osd --replicas 1 --mount /mnt/c1
  tessera up --data /tmp/cc3 --osds 3 --size 1G --listen 127.0.0.1:7503 \
      --cluster c3 --namespace osd --replicas 3 --mount /mnt/c3

then run this script. Each of three rounds makes 1,000 empty files, 200
files of 64 KiB written and fsynced, and unlinks the 1,000, on one mount
then the other; it prints the median rate of each and the ratio R=3 / R=1.
"""
import os, time, sys
def run(mp, n, tag):
    d = os.path.join(mp, tag); os.makedirs(d, exist_ok=True)
    t = time.perf_counter()
    for i in range(n):
        fd = os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.close(fd)
    c = n / (time.perf_counter() - t)
    t = time.perf_counter()
    data = os.urandom(64 << 10)
    for i in range(200):
        with open(os.path.join(d, f"w{i}"), "wb") as f:
            f.write(data); f.flush(); os.fsync(f.fileno())
    w = 200 / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(n):
        os.unlink(os.path.join(d, f"f{i}"))
    u = n / (time.perf_counter() - t)
    return c, w, u
res = {1: [], 3: []}
for rnd in range(3):
    for r, mp in ((1, "/mnt/c1"), (3, "/mnt/c3")):
        res[r].append(run(mp, 1000, f"r{rnd}"))
for r in (1, 3):
    print(r, [tuple(round(x) for x in v) for v in res[r]])
med = lambda xs: sorted(xs)[1]
for k, name in enumerate(["creates/s", "64KiB write+fsync files/s", "unlinks/s"]):
    a = med([v[k] for v in res[1]]); b = med([v[k] for v in res[3]])
    print(f"{name}: R=1 {a:.0f}, R=3 {b:.0f}, ratio {b/a:.2f}")
