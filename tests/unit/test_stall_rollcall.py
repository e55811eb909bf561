"""The roll call's verdict logic (rollcall.Tally), the mpi transport's CallClock roll call among four
in-process ranks over a stand-in for MPI (late entrants and ranks still in the previous call are not named
missing), the Horovod transport's late entrant joining an open roll call, and who waits for whom at exit."""
import functools
import sys
import threading
import time
import types

import numpy as np
import pytest

import horovod_torus.stall as stall
from horovod_torus.rollcall import ROLL_CALL_LIMIT_SECONDS, ROLL_CALL_SECONDS, Tally
from horovod_torus.stall import CallClock, TorusStallError, stall_error
from horovod_torus.tensorflow.guard import ExchangeGuard, peers_in_play
from horovod_torus.topology import TorusTopology


def test_tally_is_final_after_quiet_seconds_without_news():
    t = Tally(3, 0, 4, now=100.0, quiet=3.0, limit=8.0)
    t.hear(1, 3, 100.5)
    assert not t.final(103.4) and t.final(103.5)  # 3 s after rank 1's arrival, not after the opening
    assert t.missing() == [2, 3] and t.arrived == {0, 1}


def test_tally_a_late_arrival_extends_the_window():
    t = Tally(3, 0, 4, now=0.0, quiet=3.0, limit=20.0)
    t.hear(2, 3, 2.9)
    assert not t.final(5.8)
    t.hear(1, 3, 5.8)
    assert not t.final(8.7) and t.final(8.8) and t.missing() == [3]
    assert Tally(3, 0, 4, now=0.0, quiet=3.0, limit=8.0).final(8.0)  # the limit, whatever the news


def test_tally_waits_for_a_rank_still_in_an_earlier_call_up_to_the_limit():
    t = Tally(3, 0, 3, now=0.0, quiet=1.0, limit=8.0)
    t.hear(1, 2, 0.1)  # rank 1 still waits in call 2: expected
    assert not t.final(5.0)
    assert t.final(8.0) and t.missing() == [1, 2]  # the limit ends the wait
    t = Tally(3, 0, 3, now=0.0, quiet=1.0, limit=8.0)
    t.hear(1, 2, 0.1)
    t.hear(1, 3, 4.0)  # it arrived
    assert not t.final(4.9) and t.final(5.0) and t.missing() == [2]


def test_tally_everyone_arrived_is_final_at_once_and_later_calls_are_ignored():
    t = Tally(5, 2, 3, now=0.0)
    t.hear(0, 6, 0.0)  # rank 0 waits in a later call: not in this one, not expected
    assert t.behind == {} and not t.final(0.1)
    t.hear(0, 5, 0.2)
    t.hear(1, 5, 0.3)
    assert t.final(0.3) and t.missing() == []
    assert (ROLL_CALL_SECONDS, ROLL_CALL_LIMIT_SECONDS) == (Tally(1, 0, 2, 0.0).quiet, Tally(1, 0, 2, 0.0).until)


class _Net:
    """In-process point-to-point messages between fake ranks (thread-safe)."""

    def __init__(self, size):
        self.size, self.lock, self.queues = size, threading.Lock(), [[] for _ in range(size)]


class _Status:
    def __init__(self):
        self.src = None

    def Get_source(self):
        return self.src


class _Alarm:
    """The parts of an mpi4py communicator CallClock's roll call uses."""

    def __init__(self, net, rank):
        self.net, self.rank = net, rank

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.net.size

    def Isend(self, buf, dest, tag):
        with self.net.lock:
            self.net.queues[dest].append((self.rank, tag, np.array(buf, copy=True)))

    def Iprobe(self, source, tag, status):
        with self.net.lock:
            for src, t, _ in self.net.queues[self.rank]:
                if t == tag:
                    status.src = src
                    return True
        return False

    def Recv(self, buf, source, tag):
        with self.net.lock:
            queue = self.net.queues[self.rank]
            i = next(i for i, (s, t, _) in enumerate(queue) if s == source and t == tag)
            buf[...] = queue.pop(i)[2]


class _Request:
    def __init__(self, done_at=None):
        self.done_at = done_at

    def done(self):
        return self.done_at is not None and time.monotonic() >= self.done_at


def _fake_mpi():
    class Request:
        @staticmethod
        def Testall(requests):
            return all(r.done() for r in requests)

        @staticmethod
        def Waitall(requests):
            raise AssertionError("no deadline in this test")

    return types.SimpleNamespace(MPI=types.SimpleNamespace(Request=Request, Status=_Status, ANY_SOURCE=-1))


@pytest.fixture
def fake_mpi(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", _fake_mpi())
    monkeypatch.setattr(stall, "_abort_at_exit", lambda alarm, peers: None)  # no MPI_Abort at this test's exit
    monkeypatch.setattr(stall, "Tally", functools.partial(Tally, quiet=1.0, limit=6.0))


def _run_ranks(plans):
    """Run one thread per rank: plans[r] is a list of (delay before the call, call number, deadline, the
    time its request completes relative to the start or None); returns each rank's TorusStallError or None."""
    net, results, t0 = _Net(4), {}, time.monotonic()

    def rank_main(r):
        heard = {}
        for delay, call, deadline, done in plans[r]:
            time.sleep(delay)
            clock = CallClock(None, _Alarm(net, r), call, "g", TorusTopology(2, 2), deadline, heard)
            try:
                clock.wait([_Request(None if done is None else t0 + done)])
            except TorusStallError as exc:
                results[r] = (exc, time.monotonic() - t0)
                return
        results[r] = None

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(3)]  # rank 3 never makes call 3
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return results


def test_callclock_a_rank_entering_after_the_deadline_joins_and_is_not_named_missing(fake_mpi):
    # ranks 0 and 2 wait in call 3 from t=0 (deadline 0.5 s, then a 1 s quiet window); rank 1 enters 0.8 s
    # late, after their roll call opened, with a 30 s deadline of its own: it must join at once
    results = _run_ranks({0: [(0.0, 3, 0.5, None)], 1: [(0.8, 3, 30.0, None)], 2: [(0.0, 3, 0.5, None)]})
    for r in range(3):
        exc, took = results[r]
        assert exc.call == 3 and exc.missing == (3,), (r, exc)
    assert {results[0][0].by, results[2][0].by} <= {0, 2} and any(results[r][0].by == r for r in (0, 2))  # opener
    assert results[1][0].by in (0, 2) and "joined the roll call of rank" in str(results[1][0])
    assert results[1][1] < 0.8 + 1.0 + 3.0  # joined on entering (+ its quiet window), long before its deadline
    assert all(results[r][1] < 0.5 + 6.0 for r in (0, 2))


def test_callclock_a_rank_still_in_the_previous_call_is_expected(fake_mpi):
    # rank 2 is still in call 2 until t=3 (long after the 0.5 s deadline + 1 s quiet of ranks 0 and 1),
    # then enters call 3: it answered "behind", so the verdict waited for it
    results = _run_ranks({0: [(0.0, 3, 0.5, None)], 1: [(0.0, 3, 0.5, None)],
                          2: [(0.0, 2, 60.0, 3.0), (0.0, 3, 60.0, None)]})
    for r in range(3):
        exc, took = results[r]
        assert exc.call == 3 and exc.missing == (3,), (r, exc)
    assert results[0][1] >= 3.0 and results[2][0].by in (0, 1)


def test_callclock_without_a_late_rank_names_it_after_the_quiet_window(fake_mpi):
    results = _run_ranks({0: [(0.0, 3, 0.5, None)], 1: [(4.0, 3, 30.0, None)], 2: [(0.0, 3, 0.5, None)]})
    assert results[0][0].missing == (1, 3) and 1.5 <= results[0][1] < 4.0  # rank 1 came after the verdict


class _Channel:
    def __init__(self, opened):
        self.open, self.announced, self.verdicts = set(opened), [], []

    def announce(self, call):
        self.announced.append((call, time.monotonic()))

    def opened(self, call):
        return call in self.open

    def arrivals(self, call):
        return {0, 1, 2}

    def publish_verdict(self, verdict):
        self.verdicts.append(verdict)

    def verdict(self, seconds=0.0):
        return self.verdicts[-1] if self.verdicts else None

    def close(self):
        pass


def test_guard_a_late_entrant_announces_as_soon_as_it_finds_the_roll_call_open():
    channel, ended = _Channel(opened={4}), threading.Event()
    guard = ExchangeGuard(8.0, TorusTopology(2, 2), 1, channel, end_horovod=ended.set)
    start = time.monotonic()

    def op():
        while not channel.announced and time.monotonic() < start + 3.0:
            time.sleep(0.02)
        return "done"

    assert guard.run(4, "", op) == "done"
    guard.close()
    assert channel.announced and channel.announced[0][0] == 4
    assert channel.announced[0][1] - start < 8.0 / 2  # before half its own deadline: it joined the open call
    assert not ended.is_set()


def test_guard_does_not_look_for_a_roll_call_in_a_short_call():
    channel = _Channel(opened={4})
    looks = []
    channel.opened = lambda call: looks.append(call) or True
    guard = ExchangeGuard(8.0, TorusTopology(2, 2), 1, channel, end_horovod=lambda: None)
    assert guard.run(4, "", lambda: time.sleep(0.3) or 7) == 7  # shorter than LISTEN_AFTER_SECONDS
    guard.close()
    assert looks == [] and channel.announced == []


def test_who_waits_for_whom_at_exit():
    verdict = stall_error(3, "", TorusTopology(2, 2), 10.0, [3], "ends", by=0)
    assert peers_in_play(verdict, 1, 4) == [0, 2]  # not for rank 3, which may stay alive outside any call
    assert peers_in_play(verdict, 3, 4) == [0, 1, 2]  # the missing rank waits for the others to raise
    left = TorusStallError("left", 3, "<exit>", (1, 2, 3), 0.0)  # a rank left: no verdict, every rank exits
    assert left.by is None and peers_in_play(left, 0, 4) == [1, 2, 3]


@pytest.mark.parametrize("missing, name, says", [
    ((), "<exit>", "rank 3 exits with status 1: it made 2 torus calls while the other ranks waited in call 3"),
    ((0, 1, 2), "<exit>", "rank(s) [0, 1, 2] did not make this call"),
])
def test_exit_check_mpi_names_the_calls_a_leaving_rank_made(monkeypatch, capsys, missing, name, says):
    """The mpi exit check's line: a roll call that found every rank at the exit check's number means the
    others waited in a real call of that number (the leaving rank skipped one); other stalls print as is."""
    grid = TorusTopology(2, 2)
    exc = stall_error(3, name, grid, 10.0, missing, "the job ends")

    class Leaving:
        rank, alarm = 3, types.SimpleNamespace(Get_size=lambda: 4)

        def leave(self):
            raise exc

    ended = []
    monkeypatch.setattr(stall, "_abort_when_peers_exit", lambda alarm, peers: ended.append(peers))
    monkeypatch.setitem(stall._abort_registered, "done", False)
    stall.exit_check_mpi(Leaving())
    assert says in capsys.readouterr().err and ended == [[0, 1, 2]]
