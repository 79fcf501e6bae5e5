"""A stand-in for the little of PyTorch that peers/python/torch_peer.py
uses, computing on the host: what a machine without CUDA runs the script's
test with. Work issued while a graph records is kept, not run, as CUDA's
stream capture does; a replay runs it."""

__version__ = "0.0-fake"
float32 = "float32"

_recording = []


class Tensor:
    def __init__(self, values):
        self.values = values

    def __getitem__(self, i):
        return Tensor([self.values[i]])

    def item(self):
        return self.values[0]


def zeros(n, device=None, dtype=None):
    assert device == "cuda", device
    return Tensor([0.0] * n)


def add(src, value, out):
    def run():
        out.values[:] = [x + value for x in src.values]

    if _recording:
        _recording[-1].append(run)
    else:
        run()
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
            assert not _recording, "a replay while recording"
            for run in self.work:
                run()

    class graph:
        def __init__(self, graph, stream=None):
            self.g = graph

        def __enter__(self):
            _recording.append([])
            return self.g

        def __exit__(self, *exc):
            self.g.work = _recording.pop()
            return False
