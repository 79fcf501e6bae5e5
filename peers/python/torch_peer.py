#!/usr/bin/env python3
"""The peers rows on CUDA through what CUDA users run today: PyTorch's
CUDA graphs (torch.cuda.CUDAGraph) and CuPy's stream capture
(cupy.cuda.Graph), each eager and replayed.

The work is the peers crate's (peers/src/rows.rs): a chain of K dependent
add-one kernels ping-ponging between two buffers of N floats, issued and then
synced, timed round by round. One JSON object per peer and row goes to
stdout, with the fields `scripts/peers-table` reads:

  peer, row, elems, kernels, rounds, control,
  eager_us_per_kernel, replay_us_per_kernel   (end to end, through the sync)
  issue_us_per_eager, issue_us_per_replay     (the caller's thread, per pass)
  capture_us, outputs                         (the first element of each buffer)

What differs from our side: PyTorch runs its own add kernel
(`torch.add(src, 1, out=dst)`, the same data movement as ours, one read and
one write per element, in its own block size); CuPy runs our CUDA source
(conformance/kernels/workload.cu's add_one, 64-thread blocks) through
`RawKernel`, which compiles it with NVRTC as our CUDA backend does.

Without CUDA (no torch and no cupy, or no device) it says so in one line and
exits 0, or 1 with PEERS_REQUIRE_CUDA=1. `--rows` prints the rows as JSON
and needs nothing.

  python3 peers/python/torch_peer.py [--short] [--control] [--peer torch|cupy] [--rows]
"""

import argparse
import json
import os
import sys
import time

# Threads per block of the workload's kernels (WORKGROUP in workload.cu).
WORKGROUP = 64

HERE = os.path.dirname(os.path.abspath(__file__))
# Where our CUDA source lies: beside this script in the GPU bundle, else in
# the repository.
SOURCES = (
    os.path.join(HERE, "workload.cu"),
    os.path.join(HERE, "..", "..", "conformance", "kernels", "workload.cu"),
)


def our_cuda_source():
    """The workload's CUDA source, whose add_one our CUDA backend runs."""
    for path in SOURCES:
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
    raise RuntimeError(f"our CUDA source is not at any of {', '.join(SOURCES)}")


class Row:
    """As peers/src/rows.rs: elements per kernel, kernels per pass, rounds."""

    def __init__(self, elems, kernels, control, rounds=None):
        self.elems = elems
        self.kernels = kernels
        self.control = control
        if rounds is None:
            rounds = min(max(50_000_000 // max(elems * kernels, 1), 3), 50)
        self.rounds = rounds

    def name(self):
        e = self.elems
        if e >= 1 << 20 and e % (1 << 20) == 0:
            elems = f"{e >> 20} Mi"
        elif e >= 1 << 10 and e % (1 << 10) == 0:
            elems = f"{e >> 10} Ki"
        else:
            elems = str(e)
        return f"{elems} x{self.kernels}" + (" (control)" if self.control else "")


def all_rows():
    rows = [Row(e, k, False) for e in (256, 4 << 10, 64 << 10) for k in (10, 100, 1000)]
    rows.append(Row(1 << 20, 100, True))
    return rows


def short_rows():
    return [Row(256, 10, False, rounds=3)]


class Measure:
    """The caller's time to issue a pass, and that plus the sync after it."""

    def __init__(self):
        self.issue = 0.0
        self.total = 0.0

    def round(self, issue, sync):
        start = time.perf_counter()
        issue()
        self.issue += time.perf_counter() - start
        sync()
        self.total += time.perf_counter() - start


class Peer:
    """A side: two buffers, the chain issued on its stream, and a graph of
    it. Each peer says how it makes buffers, issues one add-one, runs eager
    work on its stream, captures, replays and reads an element."""

    def setup(self, row):
        self.row = row
        self.a, self.b = self.buffer(row.elems), self.buffer(row.elems)
        self.eager()  # the warmup, on the stream the graph is captured on
        self.sync()
        start = time.perf_counter()
        self.graph = self.capture()
        self.sync()
        return time.perf_counter() - start

    def issue(self):
        add_one, a, b = self.add_one, self.a, self.b
        for i in range(self.row.kernels):
            if i % 2 == 0:
                add_one(a, b)
            else:
                add_one(b, a)

    def sync(self):
        self.stream.synchronize()

    def outputs(self):
        return [self.first(self.a), self.first(self.b)]

    def teardown(self):
        self.graph = self.a = self.b = None


class Torch(Peer):
    name = "torch"

    def __init__(self, torch):
        self.torch = torch
        self.stream = torch.cuda.Stream()

    def describe(self):
        t = self.torch
        return f"PyTorch {t.__version__} on {t.cuda.get_device_name(0)}"

    def buffer(self, elems):
        return self.torch.zeros(elems, device="cuda", dtype=self.torch.float32)

    def add_one(self, src, dst):
        self.torch.add(src, 1.0, out=dst)

    def eager(self):
        with self.torch.cuda.stream(self.stream):
            self.issue()

    def capture(self):
        graph = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(graph, stream=self.stream):
            self.issue()
        return graph

    def replay(self):
        with self.torch.cuda.stream(self.stream):
            self.graph.replay()

    def first(self, x):
        return float(x[0].item())


class Cupy(Peer):
    name = "cupy"

    def __init__(self, cp):
        self.cp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.kernel = cp.RawKernel(our_cuda_source(), "add_one")

    def describe(self):
        cp = self.cp
        name = cp.cuda.runtime.getDeviceProperties(0)["name"]
        if isinstance(name, bytes):
            name = name.decode()
        return f"CuPy {cp.__version__} on {name}"

    def buffer(self, elems):
        self.grid = ((elems + WORKGROUP - 1) // WORKGROUP,)
        self.n = self.cp.uint32(elems)
        return self.cp.zeros(elems, dtype=self.cp.float32)

    def add_one(self, src, dst):
        self.kernel(self.grid, (WORKGROUP,), (src, dst, self.n))

    def eager(self):
        with self.stream:
            self.issue()

    def capture(self):
        self.stream.begin_capture()
        with self.stream:
            self.issue()
        return self.stream.end_capture()

    def replay(self):
        self.graph.launch(stream=self.stream)

    def first(self, x):
        return float(x[0].get())


def open_peers(wanted):
    """The peers that can run here, and why each other cannot."""
    peers, missing = [], []
    if wanted in ("all", "torch"):
        try:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is false")
            peers.append(Torch(torch))
        except Exception as err:  # an import or a driver that refuses
            missing.append(f"torch: {err}")
    if wanted in ("all", "cupy"):
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA device")
            peers.append(Cupy(cupy))
        except Exception as err:
            missing.append(f"cupy: {err}")
    return peers, missing


def run_row(peers, row):
    """Every peer's figures for `row`, interleaved round by round."""
    captures = [p.setup(row) for p in peers]
    eager = [Measure() for _ in peers]
    replay = [Measure() for _ in peers]
    for _ in range(row.rounds):
        for i, p in enumerate(peers):
            eager[i].round(p.eager, p.sync)
            replay[i].round(p.replay, p.sync)
    out = []
    for i, p in enumerate(peers):
        per_kernel = 1e6 / (row.rounds * row.kernels)
        per_pass = 1e6 / row.rounds
        out.append(
            {
                "peer": p.name,
                "row": row.name(),
                "elems": row.elems,
                "kernels": row.kernels,
                "rounds": row.rounds,
                "control": row.control,
                "eager_us_per_kernel": eager[i].total * per_kernel,
                "replay_us_per_kernel": replay[i].total * per_kernel,
                "issue_us_per_eager": eager[i].issue * per_pass,
                "issue_us_per_replay": replay[i].issue * per_pass,
                "capture_us": captures[i] * 1e6,
                "outputs": p.outputs(),
            }
        )
        p.teardown()
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="one short row")
    parser.add_argument("--control", action="store_true", help="the control row alone")
    parser.add_argument("--peer", choices=("all", "torch", "cupy"), default="all")
    parser.add_argument("--rows", action="store_true", help="print the rows, run nothing")
    args = parser.parse_args(argv)
    if args.rows:
        for row in all_rows() + short_rows():
            print(json.dumps({"row": row.name(), "elems": row.elems, "kernels": row.kernels,
                              "rounds": row.rounds, "control": row.control}))
        return 0
    peers, missing = open_peers(args.peer)
    if not peers:
        print(f"torch_peer: no CUDA for the peers ({'; '.join(missing)}); nothing to compare")
        return 1 if os.environ.get("PEERS_REQUIRE_CUDA") == "1" else 0
    for p in peers:
        print(f"# {p.name}: {p.describe()}", file=sys.stderr)
    for reason in missing:
        print(f"# skipped {reason}", file=sys.stderr)
    if args.short:
        rows = short_rows()
    elif args.control:
        rows = [r for r in all_rows() if r.control]
    else:
        rows = all_rows()
    for row in rows:
        figures = run_row(peers, row)
        outputs = {tuple(f["outputs"]) for f in figures}
        if len(outputs) > 1:
            print(f"torch_peer: {row.name()}: the peers' outputs differ: {outputs}", file=sys.stderr)
            return 1
        for f in figures:
            print(json.dumps(f), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
