"""A stand-in for the little of CuPy that peers/python/torch_peer.py uses,
computing on the host (`_fake_device`). Its RawKernel runs the one kernel
the script compiles, add_one, by name."""

import _fake_device as device

__version__ = "0.0-fake"
float32 = "float32"


def uint32(n):
    return int(n)


class ndarray(device.Values):
    def get(self):
        return self.first()


def zeros(n, dtype=None):
    return ndarray([0.0] * n)


class RawKernel:
    def __init__(self, source, name):
        assert name == "add_one" and "add_one" in source, name

    def __call__(self, grid, block, args, shared_mem=0):
        src, dst, n = args
        assert grid[0] * block[0] >= n, (grid, block, n)

        def run():
            dst.values[:n] = [x + 1.0 for x in src.values[:n]]

        device.issue(run)


class _Graph:
    def __init__(self, work):
        self.work = work

    def launch(self, stream=None):
        device.replay(self.work)


class cuda:
    class runtime:
        @staticmethod
        def getDeviceCount():
            return 1

        @staticmethod
        def getDeviceProperties(index):
            return {"name": b"fake device"}

    class Stream:
        def __init__(self, non_blocking=False):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            pass

        def begin_capture(self):
            device.begin_capture()

        def end_capture(self):
            return _Graph(device.end_capture())
