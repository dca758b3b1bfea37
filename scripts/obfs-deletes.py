#!/usr/bin/env python3
"""Deletes of OBFS-mix files through a mount, one thread.

Writes N files of the OBFS mix (80 % 512 KiB, 20 % 1 KiB-512 KiB; seeded,
so every run writes the same sizes) into DIR, then unlinks them one by one,
and prints files written per second and deletes per second.

    python3 scripts/obfs-deletes.py /mnt/tessera/dir 400

Run it on a Tessera mount and on a local file system in the same session
to compare: absolute figures drift from run to run on a shared machine.
"""

import os
import random
import sys
import time


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: obfs-deletes.py DIR FILES")
    d, n = sys.argv[1], int(sys.argv[2])
    os.makedirs(d, exist_ok=True)
    rnd = random.Random(1)
    buf = os.urandom(512 << 10)
    t = time.perf_counter()
    for i in range(n):
        size = 512 << 10 if rnd.random() < 0.8 else rnd.randint(1024, 512 << 10)
        with open(f"{d}/o{i}", "wb") as f:
            f.write(buf[:size])
    written = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(n):
        os.unlink(f"{d}/o{i}")
    deleted = time.perf_counter() - t
    print(
        f"write {n / written:.0f} files/s; "
        f"delete {n / deleted:.0f}/s ({deleted / n * 1e6:.0f} us)"
    )


if __name__ == "__main__":
    main()
