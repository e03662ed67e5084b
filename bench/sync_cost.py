#!/usr/bin/env python3
"""What it costs to make one small write durable on a filesystem, four ways, one write at a
time: the floor under the latency of a produce that Runnel acknowledges only once it is
synced (docs/bench.md, "latency-1k").

- append + fdatasync: what a log's active segment does (the file grows, so the filesystem
  journals its size with the data);
- reserved (fallocate, size kept) + append + fdatasync: Runnel's segments reserve their
  blocks ahead;
- overwrite + fdatasync: the blocks were written and synced before (no size or extent
  change to journal);
- O_DIRECT | O_DSYNC overwrite of a whole page: no page cache, one device write and flush.

usage: .cache/venv/bin/python bench/sync_cost.py [DIR]     (default: a folder under /tmp)
env:   WRITES (default 2000), BYTES (default 1024)
"""

import ctypes
import mmap
import os
import statistics
import sys
import tempfile
import time

WRITES = int(os.environ.get("WRITES", "2000"))
BYTES = int(os.environ.get("BYTES", "1024"))
PAGE = 4096
FALLOC_FL_KEEP_SIZE = 1


def timed(op):
    out = []
    for i in range(WRITES):
        t = time.perf_counter_ns()
        op(i)
        out.append((time.perf_counter_ns() - t) / 1000)
    return out


def report(name, us):
    us = sorted(us)
    p = lambda q: us[min(len(us) - 1, int(len(us) * q))]  # noqa: E731
    print(f"| {name} | {statistics.fmean(us):.0f} | {p(0.5):.0f} | {p(0.99):.0f} | {p(0.999):.0f} |", flush=True)


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else None
    with tempfile.TemporaryDirectory(dir=base) as d:
        data = b"x" * BYTES
        print(f"{WRITES} writes of {BYTES} bytes, one at a time, in {d}\n")
        print("| way | avg µs | p50 µs | p99 µs | p99.9 µs |")
        print("|---|---|---|---|---|")

        fd = os.open(os.path.join(d, "append"), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        report("append + fdatasync", timed(lambda i: (os.write(fd, data), os.fdatasync(fd))))
        os.close(fd)

        fd = os.open(os.path.join(d, "reserved"), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, WRITES * BYTES) == 0:
            reserved = "reserved (fallocate, size kept) + append + fdatasync"
        else:
            reserved = "append + fdatasync (no fallocate here)"
        report(reserved, timed(lambda i: (os.write(fd, data), os.fdatasync(fd))))
        os.close(fd)

        size = WRITES * PAGE
        path = os.path.join(d, "written")
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, b"\0" * size)
        os.fsync(fd)
        report("overwrite + fdatasync", timed(lambda i: (os.pwrite(fd, data, i * BYTES), os.fdatasync(fd))))
        os.close(fd)

        try:
            fd = os.open(path, os.O_RDWR | os.O_DIRECT | os.O_DSYNC)
        except OSError as e:
            print(f"| O_DIRECT \\| O_DSYNC overwrite | not here: {e} | | | |")
            return
        page = mmap.mmap(-1, PAGE)  # page-aligned, as O_DIRECT needs
        page.write(b"x" * PAGE)
        report("O_DIRECT \\| O_DSYNC overwrite of a page", timed(lambda i: os.pwritev(fd, [page], i * PAGE)))
        os.close(fd)


if __name__ == "__main__":
    main()
