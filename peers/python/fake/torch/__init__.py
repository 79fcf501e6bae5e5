"""A stand-in for the little of PyTorch that peers/python/torch_peer.py
uses, computing on the host (`_fake_device`): what a machine without CUDA
runs the script's test with."""

import _fake_device as device

__version__ = "0.0-fake"
float32 = "float32"


class Tensor(device.Values):
    def item(self):
        return self.first()


def zeros(n, device=None, dtype=None):
    assert device == "cuda", device
    return Tensor([0.0] * n)


def add(src, value, out):
    def run():
        out.values[:] = [x + value for x in src.values]

    device.issue(run)
    return out


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_name(index=0):
        return "fake device"

    class Stream:
        def synchronize(self):
            pass

    class stream:
        def __init__(self, stream):
            self.s = stream

        def __enter__(self):
            return self.s

        def __exit__(self, *exc):
            return False

    class CUDAGraph:
        def __init__(self):
            self.work = None

        def replay(self):
            device.replay(self.work)

    class graph:
        def __init__(self, graph, stream=None):
            self.g = graph

        def __enter__(self):
            device.begin_capture()
            return self.g

        def __exit__(self, *exc):
            self.g.work = device.end_capture()
            return False
