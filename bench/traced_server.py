"""The socket server under tracemalloc, for `bench/socket_bench.py --tracemalloc`: on SIGUSR1 it takes
a heap snapshot named by the file `$BENCH_TRACE_FILE.next`; the snapshot named `open` is written as
its growth over the one named `base` (top allocation sites by line, then by traceback) to
`$BENCH_TRACE_FILE.open`. Benchmark only: tracemalloc slows the server several times."""

from __future__ import annotations

import os
import signal
import tracemalloc
from pathlib import Path

from mediator_project import socket_server

FRAMES = 6
snapshots: dict[str, tracemalloc.Snapshot] = {}


def _filtered(snap: tracemalloc.Snapshot) -> tracemalloc.Snapshot:
    return snap.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])


def _growth(base: tracemalloc.Snapshot, now: tracemalloc.Snapshot) -> str:
    lines = []
    total = sum(s.size_diff for s in now.compare_to(base, "filename"))
    lines.append(f"heap growth traced: {total / 1024:.0f} KiB")
    lines.append("by line:")
    for stat in now.compare_to(base, "lineno")[:30]:
        frame = stat.traceback[0]
        lines.append(f"  {stat.size_diff / 1024:9.0f} KiB {stat.count_diff:8d} blocks  {frame.filename}:{frame.lineno}")
    lines.append("by traceback (innermost last):")
    for stat in now.compare_to(base, "traceback")[:12]:
        lines.append(f"  {stat.size_diff / 1024:9.0f} KiB {stat.count_diff:8d} blocks")
        for frame in stat.traceback:
            lines.append(f"      {frame.filename}:{frame.lineno}")
    return "\n".join(lines)


def _on_signal(signum, frame) -> None:
    path = os.environ["BENCH_TRACE_FILE"]
    label = Path(f"{path}.next").read_text().strip()
    snap = _filtered(tracemalloc.take_snapshot())
    snapshots[label] = snap
    text = _growth(snapshots["base"], snap) if label != "base" and "base" in snapshots else "snapshot taken"
    Path(f"{path}.{label}").write_text(text + "\n")


def main() -> None:
    tracemalloc.start(FRAMES)
    signal.signal(signal.SIGUSR1, _on_signal)
    socket_server.main()


if __name__ == "__main__":
    main()
