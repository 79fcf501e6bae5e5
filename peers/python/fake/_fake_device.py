"""The host "device" under the stand-ins for torch and cupy: arrays of
floats, and work that runs at once or, while a graph records, is kept for
its replays, as CUDA's stream capture does."""

_recording = []


class Values:
    def __init__(self, values):
        self.values = values

    def __getitem__(self, i):
        return type(self)([self.values[i]])

    def first(self):
        return self.values[0]


def issue(run):
    """Run `run` now, or keep it for the graph being recorded."""
    if _recording:
        _recording[-1].append(run)
    else:
        run()


def begin_capture():
    _recording.append([])


def end_capture():
    """The work recorded since the matching begin_capture."""
    return _recording.pop()


def replay(work):
    assert not _recording, "a replay while recording"
    for run in work:
        run()
