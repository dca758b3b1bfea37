#!/usr/bin/env python3
"""fsstress- and fsx-style workloads, timed, on any directory.

Used to compare a Tessera mount with ext4 on the same disk (issue 21's
"speed of the correctness workloads"); not a correctness checker (the
project's own fsx and storm tests are in crates/tessera/tests/mount.rs).

  scripts/posix-workloads.py DIR [--procs 4] [--ops 10000] [--fsx-ops 20000] [--seed 1]

Prints one line per workload: seconds and operations per second.
"""
import argparse, os, random, shutil, sys, time
from multiprocessing import Process


def stress(root, n, seed):
    """fsstress-like: random namespace and small-data operations in `root`."""
    r = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    files, dirs = [], [root]
    for i in range(n):
        op = r.random()
        try:
            if op < 0.20 or not files:
                p = os.path.join(r.choice(dirs), f"f{i}")
                with open(p, "wb") as f:
                    f.write(os.urandom(r.randint(0, 8192)))
                files.append(p)
            elif op < 0.28:
                p = os.path.join(r.choice(dirs), f"d{i}")
                os.mkdir(p)
                dirs.append(p)
            elif op < 0.40:
                p = files.pop(r.randrange(len(files)))
                os.unlink(p)
            elif op < 0.48:
                p = files.pop(r.randrange(len(files)))
                q = os.path.join(r.choice(dirs), f"r{i}")
                os.rename(p, q)
                files.append(q)
            elif op < 0.60:
                with open(r.choice(files), "rb") as f:
                    f.read()
            elif op < 0.70:
                os.stat(r.choice(files))
            elif op < 0.76:
                os.listdir(r.choice(dirs))
            elif op < 0.82:
                os.chmod(r.choice(files), r.choice([0o600, 0o644, 0o640]))
            elif op < 0.88:
                p = r.choice(files)
                with open(p, "r+b") as f:
                    f.seek(r.randint(0, 8192))
                    f.write(os.urandom(r.randint(1, 4096)))
                    if r.random() < 0.3:
                        os.fsync(f.fileno())
            elif op < 0.93:
                os.truncate(r.choice(files), r.randint(0, 16384))
            elif op < 0.97:
                p = r.choice(files)
                q = os.path.join(r.choice(dirs), f"l{i}")
                os.link(p, q)
                files.append(q)
            else:
                q = os.path.join(r.choice(dirs), f"s{i}")
                os.symlink("target", q)
        except FileNotFoundError:
            pass


def fsx(path, n, seed):
    """fsx-like: random writes, reads, truncates of one file, checked."""
    r = random.Random(seed)
    model = bytearray()
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    for _ in range(n):
        op = r.random()
        if op < 0.45:
            off, ln = r.randint(0, 256 << 10), r.randint(1, 64 << 10)
            data = bytes([r.randrange(256)]) * ln
            os.pwrite(fd, data, off)
            if len(model) < off:
                model.extend(b"\0" * (off - len(model)))
            model[off:off + ln] = data
        elif op < 0.90:
            if not model:
                continue
            off = r.randrange(len(model))
            ln = r.randint(1, 64 << 10)
            got = os.pread(fd, ln, off)
            if got != bytes(model[off:off + ln]):
                sys.exit(f"fsx: read at {off} of {ln} differs")
        else:
            ln = r.randint(0, 300 << 10)
            os.ftruncate(fd, ln)
            if ln < len(model):
                del model[ln:]
            else:
                model.extend(b"\0" * (ln - len(model)))
    os.close(fd)


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("dir")
    a.add_argument("--procs", type=int, default=4)
    a.add_argument("--ops", type=int, default=10000)
    a.add_argument("--fsx-ops", type=int, default=20000)
    a.add_argument("--seed", type=int, default=1)
    o = a.parse_args()
    base = os.path.join(o.dir, "posix-workloads")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    t = time.monotonic()
    ps = [Process(target=stress, args=(os.path.join(base, f"p{k}"), o.ops, o.seed + k))
          for k in range(o.procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"a stress process failed ({p.exitcode})")
    s = time.monotonic() - t
    print(f"stress: {o.procs} x {o.ops} ops in {s:.2f} s ({o.procs * o.ops / s:.0f} ops/s)")
    t = time.monotonic()
    fsx(os.path.join(base, "fsx"), o.fsx_ops, o.seed)
    s = time.monotonic() - t
    print(f"fsx: {o.fsx_ops} ops in {s:.2f} s ({o.fsx_ops / s:.0f} ops/s)")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
