"""The Horovod transport's deadline in one process: ExchangeGuard with a stand-in channel and a blocking op,
the roll-call channels over a real key-value store, the stop recorder, and the rule the elastic work needs
(a stall is not Horovod's HorovodInternalError and does not surface as an UnknownError inside tf.function)."""
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from horovod.common.exceptions import HorovodInternalError

from horovod_torus.rollcall import StoreChannel
from horovod_torus.stall import TorusStallError, last_stop
from horovod_torus.tensorflow.guard import ExchangeGuard
from horovod_torus.tensorflow.keras import stops
from horovod_torus.tensorflow.transports import TorusStallGraphError, TorusStallTFError
from horovod_torus.topology import TorusTopology


class FakeChannel:
    """Ranks ``present`` announce every call; records what this rank published."""

    def __init__(self, present, opened=()):
        self.present, self.announced, self.verdicts, self.open = set(present), [], [], set(opened)

    def announce(self, call):
        self.announced.append(call)

    def opened(self, call):
        return call in self.open

    def arrivals(self, call):
        return set(self.present)

    def publish_verdict(self, verdict):
        self.verdicts.append(verdict)

    def verdict(self, seconds=0.0):
        return self.verdicts[-1] if self.verdicts else None

    def close(self):
        self.closed = True


def blocking_op(ended):
    """A stand-in for a Horovod op that waits for a missing rank until Horovod is shut down."""
    def fn():
        if not ended.wait(30):
            raise AssertionError("the guard never ended the op")
        raise tf.errors.UnknownError(None, None, "Horovod has been shut down")
    return fn


def test_guard_raises_after_the_deadline_naming_the_missing_ranks():
    ended, channel = threading.Event(), FakeChannel({0, 1, 2})
    guard = ExchangeGuard(0.5, TorusTopology(2, 2), 0, channel, end_horovod=ended.set)
    start = time.monotonic()
    with pytest.raises(TorusStallError) as info:
        guard.run(7, "grads", blocking_op(ended))
    took = time.monotonic() - start
    exc = info.value
    assert (exc.call, exc.name, exc.missing, exc.deadline) == (7, "grads", (3,), 0.5)
    assert "call 7 'grads' on grid 2x2 waited 0.5 s" in str(exc) and "rank(s) [3] did not make this call" in str(exc)
    assert channel.announced == [7] and channel.verdicts == [{"call": 7, "name": "grads", "missing": [3], "by": 0}]
    assert 0.5 <= took < 0.5 + 3.0 + 2.0  # deadline + ROLL_CALL_SECONDS + polls
    assert not isinstance(exc, HorovodInternalError)
    guard.close()
    assert channel.closed and guard.channel is None


def test_guard_uses_another_ranks_verdict_when_its_op_ends_first():
    channel = FakeChannel({0, 1})
    channel.verdicts.append({"call": 4, "name": "", "missing": [2, 3], "by": 1})
    guard = ExchangeGuard(60, TorusTopology(2, 2), 0, channel, end_horovod=lambda: None)

    def ended_by_another_rank():
        raise tf.errors.UnknownError(None, None, "Horovod has been shut down")

    with pytest.raises(TorusStallError) as info:
        guard.run(4, "", ended_by_another_rank)
    assert info.value.missing == (2, 3) and "decided by rank 1 in call 4" in str(info.value)
    guard.close()


def test_guard_reraises_horovods_own_error_without_a_verdict():
    guard = ExchangeGuard(60, TorusTopology(2, 2), 0, FakeChannel({0}), end_horovod=lambda: None)
    guard._stall_for = lambda call, name, wait=0: None  # no verdict published anywhere (a rank died)
    with pytest.raises(tf.errors.UnknownError, match="Connection reset"):
        guard.run(1, "", lambda: (_ for _ in ()).throw(tf.errors.UnknownError(None, None, "Connection reset")))
    guard.close()


def test_guard_without_deadline_runs_the_op_only():
    guard = ExchangeGuard(None, TorusTopology(2, 2), 0, None)
    assert guard.run(1, "", lambda: 42) == 42 and guard._thread is None


def test_store_channel_roll_call_verdict_and_note():
    from horovod.runner.http.http_server import KVStoreServer

    server = KVStoreServer(verbose=0)
    port = server.start_server()
    try:
        base = f"http://127.0.0.1:{port}/horovod_torus_stall_test"
        ranks = [StoreChannel(base, r, 3) for r in range(3)]
        ranks[0].announce(5)
        ranks[1].announce(5)
        ranks[2].announce(6)  # waits in another call: missing from call 5
        assert ranks[0].arrivals(5, quiet=0.5) == {0, 1}
        assert ranks[2].opened(5) and not ranks[2].opened(7) and ranks[2].heard(5) == {0, 1}
        assert ranks[2].verdict() is None
        ranks[1].publish_verdict({"call": 5, "missing": [2], "by": 1})
        assert ranks[2].verdict(1.0) == {"call": 5, "missing": [2], "by": 1}
        ranks[2].publish_note("it stopped training: X", [0, 1])
        assert ranks[0].note(2, 1.0) == "it stopped training: X" and ranks[0].note(1, 0.0) is None
        ranks[1].publish_exit()
        assert ranks[0].exited([1, 2], 0.3) == {1}
        ranks[2].publish_exit()
        assert ranks[0].exited([0, 1, 2], 1.0) == {1, 2}
    finally:
        server.shutdown_server()


def test_the_callback_that_stopped_fit_is_recorded(monkeypatch):
    import horovod_torus.stall as stall

    monkeypatch.setattr(stall, "_stops", [])  # the process-wide record, emptied for this test
    stops.install()
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.ones((8, 2), np.float32)
    x[4:] = np.nan
    model.fit(x, np.ones((8, 1), np.float32), batch_size=2, verbose=0, callbacks=[keras.callbacks.TerminateOnNaN()])
    assert model.stop_training is True
    assert last_stop().startswith("keras.callbacks.TerminateOnNaN set model.stop_training (in on_batch_end)")
    model.stop_training = False
    assert model.stop_training is False


def test_stall_is_not_a_horovod_internal_error_in_any_form():
    """hvd.elastic resets on HorovodInternalError (and, for TensorFlow, on an UnknownError naming a Horovod
    op); a stall must end the run: none of its forms is either."""
    base = TorusStallError("horovod_torus: torus all-reduce call 3 ...", 3, "", (1,), 10.0)
    for cls in (TorusStallError, TorusStallTFError, TorusStallGraphError):
        assert not issubclass(cls, HorovodInternalError)
    assert isinstance(TorusStallTFError(base), tf.errors.DeadlineExceededError)

    def stalled(x):
        raise TorusStallGraphError(TorusStallTFError(base))

    f = tf.function(lambda x: tf.py_function(stalled, [x], tf.int64))
    with pytest.raises(tf.errors.OpError) as info:
        f(tf.constant(1))
    assert type(info.value) is tf.errors.InvalidArgumentError  # not UnknownError: elastic would swallow it
    assert "TorusStallGraphError: horovod_torus: torus all-reduce call 3" in str(info.value)
    assert not any(op in str(info.value) for op in ("HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast"))


def test_a_rank_that_left_is_named_from_the_exchanged_words(monkeypatch):
    import horovod_torus.stall as stall
    from horovod_torus.signature import EXIT_SIGNATURE, CallSignature, leaving
    from horovod_torus.stall import left_error, note_stop

    grads = CallSignature(elements=12, dtype="float32", layout=(("float32", (3, 4)),))
    rows = np.stack([EXIT_SIGNATURE.words(5)] + [grads.words(5) for _ in range(3)])
    assert leaving(rows) == [0]
    assert leaving(np.stack([grads.words(5)] * 4)) == []
    stayer = left_error(rows, [0], 2, TorusTopology(2, 2), "; rank 0: it stopped training: X")
    assert (stayer.call, stayer.missing) == (5, (0,))
    assert ("torus all-reduce call 5 on grid 2x2: rank(s) [0] did not make this call: they left the torus "
            "(shutdown() or the end of the process); rank 0: it stopped training: X") in str(stayer)
    monkeypatch.setattr(stall, "_stops", [])
    note_stop("keras.callbacks.EarlyStopping set model.stop_training (in on_epoch_end) on model 'm'")
    leaver = left_error(rows, [0], 0, TorusTopology(2, 2))
    assert leaver.missing == (1, 2, 3)
    assert ("this rank (rank 0) left the torus (shutdown() or the end of the process) after 4 torus calls while "
            "rank(s) [1, 2, 3] made torus call 5; it stopped training: keras.callbacks.EarlyStopping") in str(leaver)
