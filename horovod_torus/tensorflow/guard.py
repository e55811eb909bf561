"""The Horovod transport's deadline: a torus call that waits past it raises on every waiting rank.

Why Horovod's own stall shutdown is not relied on: Horovod 0.28.1 gives every process set's controller the
stall settings (``operations.cc``: ``ParseStallInspectorFromEnv`` for each registered set, line 380, and
for the global set, line 511), so the torus' row and column sets are not the problem; but under the Gloo
controller the check never finds a missing rank: ``GlooController::DoInitialization`` fills its
``global_ranks_`` after only ``reserve(size_)`` (``gloo/gloo_controller.cc`` line 92, unchanged on
Horovod's master), so ``global_ranks_.size()`` stays 0 and ``StallInspector::CheckForStalledTensors``
loops over ``global_ranks.size()`` ranks (``stall_inspector.cc`` lines 54-55): no rank is ever missing,
no warning, no shutdown (the MPI controller sizes it, ``mpi/mpi_controller.cc`` line 57, and its stall
shutdown fires). Measured with a plain ``hvd.allreduce`` on the global set: under ``horovodrun --gloo``
the waiting ranks stayed blocked until the missing rank exited; under ``mpirun`` they got Horovod's
shutdown after the deadline. And an op Horovod ends fails with Horovod's "Horovod has been shut down"
``UnknownError``, which ``hvd.elastic.run`` takes for a lost rank.

So the torus keeps its own clock. A torus call can only wait for a rank that did not make it at its first
collective, the signature exchange on the global set (every rank that passed it makes the rest of the
call), so :class:`ExchangeGuard` runs that exchange, eagerly (inside ``tf.function`` through one stateful
``tf.py_function``, in program order), and a watchdog thread watches it:

1. at half the deadline a waiting rank announces its call on the roll-call channel
   (:mod:`horovod_torus.rollcall`), and so does, at once, a rank that entered the call later and finds
   (looking once per watchdog tick after :data:`horovod_torus.rollcall.LISTEN_AFTER_SECONDS`) that another
   rank announced it; at the deadline it collects the announcements until its
   :class:`horovod_torus.rollcall.Tally` is final (:data:`horovod_torus.stall.ROLL_CALL_SECONDS` without a
   new one, at most :data:`horovod_torus.stall.ROLL_CALL_LIMIT_SECONDS`): the ranks that did not announce
   the call are missing;
2. it publishes the verdict (call, name, missing ranks) and shuts Horovod down, which ends the pending ops
   on every rank (Horovod's shutdown reaches all ranks through the global set's negotiation);
3. the exchange catches the ended op and raises :class:`horovod_torus.stall.TorusStallError` (as
   :class:`horovod_torus.tensorflow.transports.TorusStallTFError`) with the verdict, on every waiting
   rank, within the deadline + ROLL_CALL_SECONDS (ROLL_CALL_LIMIT_SECONDS at most) + a poll;
4. at the process's exit (:func:`exit_check`) a rank with a stall tells the others it exits and waits (up
   to the deadline) until the other ranks still in play do too, so that a launcher that ends the job at
   the first non-zero exit (``horovodrun``) does not kill a rank before it has raised and run its handlers.

An op that fails before the deadline without a verdict (a rank died: Horovod's own error) is re-raised
unchanged: Horovod's error, which ``hvd.elastic`` treats as a lost rank; a stall is not (it terminates).
"""
from __future__ import annotations

import os
import sys
import threading
import time

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.rollcall import LISTEN_AFTER_SECONDS
from horovod_torus.stall import EXIT_GRACE_SECONDS, ROLL_CALL_SECONDS, TorusStallError, last_stop, stall_error

__all__ = ["ExchangeGuard", "ENDING", "leave", "exit_check", "peers_in_play", "wait_for_peers"]

#: What the message says happens after a stall on the Horovod transport.
ENDING = ("Horovod was shut down on every rank to end the waiting ops: torus and Horovod calls fail from now "
          "on; let the error end the process (it exits non-zero)")


def _end_horovod() -> None:
    _hvd.shutdown()


class ExchangeGuard:
    """The deadline of the signature exchanges of one process's Horovod transport.

    Args:
        deadline: seconds a call may wait (None or 0: forever, no watchdog).
        grid: the TorusTopology (named in the message); ``rank``: this rank.
        channel: the roll-call channel (:func:`horovod_torus.rollcall.channel_for`) or None.
        end_horovod: ends every pending Horovod op (default: ``hvd.shutdown()``).

    Attributes:
        stall: the :class:`horovod_torus.stall.TorusStallError` this process raised or learned, or None.
    """

    def __init__(self, deadline, grid, rank: int, channel, end_horovod=_end_horovod):
        self.deadline, self.grid, self.rank, self.channel = deadline or None, grid, rank, channel
        self._end = end_horovod
        self._lock = threading.Lock()
        self._active = None  # (call, name, start) of the exchange in progress
        self._declared: dict[int, TorusStallError] = {}
        self._thread = None
        self._closed = False
        self.stall: TorusStallError | None = None

    def close(self) -> None:
        """Stop the watchdog thread and free the channel (``shutdown()``, on every rank)."""
        self._closed = True
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def run(self, call: int, name: str, fn):
        """``fn()`` (blocking Horovod ops of call number ``call``), under the deadline.

        Raises:
            horovod_torus.stall.TorusStallError: the call waited past the deadline here, or another rank's
                verdict ended it.
            tf.errors.OpError: Horovod's own error (e.g. a rank died), unchanged.
        """
        if not self.deadline:
            return fn()
        self._start()
        with self._lock:
            self._active = (int(call), name, time.monotonic())
        try:
            return fn()
        except tf.errors.OpError:
            stall = self._stall_for(int(call), name)
            if stall is None:
                raise
            raise stall from None
        finally:
            with self._lock:
                self._active = None

    def verdict_error(self, call: int, name: str) -> TorusStallError | None:
        """The stall that ended Horovod in this job, seen from this rank's call ``call`` (None: none)."""
        return self._stall_for(int(call), name, wait=1.0)

    def notes(self, ranks, seconds: float = 2.0) -> str:
        """``"; rank R: NOTE"`` for each of ``ranks`` that published why it left (empty without any)."""
        if self.channel is None:
            return ""
        found = [(r, self.channel.note(r, seconds if i == 0 else 0.2)) for i, r in enumerate(ranks)]
        return "".join(f"; rank {r}: {n}" for r, n in found if n)

    def publish_note(self, text: str, to) -> None:
        """Tell ranks ``to`` why this rank left (no-op without a channel)."""
        if self.channel is not None and text:
            self.channel.publish_note(text, to)

    def _stall_for(self, call, name, wait=ROLL_CALL_SECONDS + 2.0):
        if call in self._declared:
            return self._declared[call]
        verdict = self.channel.verdict(wait) if self.channel is not None else None
        if verdict is None:
            return None
        self.stall = stall_error(call, name, self.grid, self.deadline, verdict["missing"],
                                 f"{ENDING} (decided by rank {verdict['by']} in call {verdict['call']})",
                                 verdict["by"])
        return self.stall

    def _start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="horovod_torus-stall", daemon=True)
            self._thread.start()

    def _watch(self):
        tick = min(0.5, max(0.05, self.deadline / 40))
        announced = None
        while not self._closed:
            time.sleep(tick)
            with self._lock:
                active = self._active
            if active is None:
                continue
            call, name, start = active
            waited = time.monotonic() - start
            if self.channel is not None and announced != call and (
                    waited >= self.deadline / 2 or (waited >= min(LISTEN_AFTER_SECONDS, self.deadline / 4)
                                                    and self.channel.opened(call))):
                self.channel.announce(call)  # a call waiting half the deadline, or joining an open roll call
                announced = call
            if waited < self.deadline or call in self._declared:
                continue
            try:
                self._declare(call, name)
            except Exception as exc:  # the watchdog must not die silently: end the wait anyway
                print(f"horovod_torus: stall roll call failed ({exc!r}); shutting Horovod down", file=sys.stderr)
                self._end()

    def _declare(self, call, name):
        missing = None
        if self.channel is not None:
            arrived = self.channel.arrivals(call)
            missing = [r for r in range(self.grid.size) if r not in arrived]
        with self._lock:
            if self._active is None or self._active[0] != call:
                return  # the call completed during the roll call
        self.stall = self._declared[call] = stall_error(call, name, self.grid, self.deadline, missing, ENDING,
                                                        self.rank)
        if self.channel is not None:
            self.channel.publish_verdict({"call": call, "name": name, "missing": missing, "by": self.rank})
        print(f"horovod_torus: rank {self.rank}: {self.stall}", file=sys.stderr, flush=True)
        self._end()


def leave(transport) -> None:
    """Exchange :data:`horovod_torus.signature.EXIT_SIGNATURE` on ``transport`` (a HorovodTransport): the
    barrier of ``shutdown()`` and of the process's exit. Every rank leaving: returns. Some rank still
    making torus calls: raises :class:`horovod_torus.stall.TorusStallError` on every rank at once, naming
    the ranks that left (and on the leaving rank, the ranks still in a call)."""
    from horovod_torus.signature import EXIT_SIGNATURE

    transport.exchange(EXIT_SIGNATURE.words(transport.calls() + 1), EXIT_SIGNATURE)


def exit_check(transport) -> None:
    """At the process's exit (registered by ``init`` on the Horovod transport): :func:`leave`, and exit
    with status 1, printing why, when this rank left while others still made torus calls, made fewer calls
    than a stalled call waited for, or raised a stall itself; before exiting, :func:`wait_for_peers`."""
    guard = transport.guard
    try:
        if guard.stall is None:
            if _hvd.is_initialized():
                leave(transport)
                return
            if guard.verdict_error(transport.calls() + 1, "") is None:
                return  # Horovod was shut down normally
        stall = guard.stall
    except TorusStallError as exc:
        stall = exc
    if transport.rank in tuple(stall.missing) and guard.channel is not None:
        stop = f"; it had stopped training: {last_stop()}" if last_stop() else ""
        print(f"horovod_torus: rank {transport.rank} exits with status 1: it made {transport.calls()} torus calls "
              f"while the other ranks waited in call {stall.call}{stop}", file=sys.stderr, flush=True)
    else:
        print(f"horovod_torus: rank {transport.rank} exits with status 1: {stall}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    wait_for_peers(guard, stall, transport.rank)
    if _hvd.is_initialized():
        _hvd.shutdown()  # ends Horovod on every rank cleanly (an abrupt exit aborts the peers' Gloo threads)
    os._exit(1)


def peers_in_play(stall: TorusStallError, rank: int, size: int) -> list[int]:
    """The ranks a rank with ``stall`` waits for at its exit: every other rank, except, after a verdict
    that named this rank present, the ranks it named missing (they may stay alive outside any call)."""
    others = [r for r in range(size) if r != rank]
    if stall.by is None or rank in stall.missing:  # a rank left (every rank exits), or this one was missing
        return others
    return [r for r in others if r not in stall.missing]


def wait_for_peers(guard, stall: TorusStallError, rank: int) -> None:
    """Tell the other ranks that this one exits after ``stall``, and wait (up to the deadline, or
    :data:`horovod_torus.stall.EXIT_GRACE_SECONDS` without one) until
    :func:`peers_in_play` exit too: ``horovodrun`` ends the job at the first non-zero exit, and a rank that
    left first must not end it before the waiting ranks have raised and run their own handlers."""
    if guard.channel is None:
        return
    guard.channel.publish_exit()
    guard.channel.exited(peers_in_play(stall, rank, guard.grid.size), guard.deadline or EXIT_GRACE_SECONDS)
