"""horovod_torus.timing: what is timed, what is waited for, and when the barrier runs (a fake clock)."""
import pytest

from horovod_torus import timing


class Clock:
    """perf_counter that advances only when the timed function or wait runs (1 s per call, 0.5 s per wait)."""

    def __init__(self):
        self.now, self.log = 0.0, []

    def perf_counter(self):
        return self.now

    def fn(self):
        self.now += 1.0
        self.log.append("call")
        return len(self.log)

    def wait(self, out):
        self.now += 0.5
        self.log.append(f"wait {out}")

    def barrier(self):
        self.log.append("barrier")


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(timing.time, "perf_counter", c.perf_counter)
    return c


def test_time_loop_waits_for_the_last_result_only(clock):
    seconds = timing.time_loop(clock.fn, 3, warmup=1, wait=clock.wait, barrier=clock.barrier)
    assert clock.log == ["call", "wait 1", "barrier", "call", "call", "call", "wait 6"]
    assert seconds == pytest.approx((3 * 1.0 + 0.5) / 3)
    assert timing.time_loop(clock.fn, 2) == pytest.approx(1.0)


def test_time_calls_times_each_call_with_its_wait(clock):
    times = timing.time_calls(clock.fn, 2, warmup=2, wait=clock.wait, barrier=clock.barrier)
    assert times == [1.5, 1.5]
    assert clock.log == ["call", "wait 1", "call", "wait 3", "barrier", "call", "wait 6", "barrier", "call",
                         "wait 9"]
    assert timing.time_calls(clock.fn, 3) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("iters, warmup", [(0, 0), (2, -1)])
def test_bad_counts_are_errors(iters, warmup):
    for loop in (timing.time_loop, timing.time_calls):
        with pytest.raises(ValueError, match="iters"):
            loop(lambda: None, iters, warmup=warmup)
