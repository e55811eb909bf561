"""Waiting on MPI requests against a deadline: a stall raises instead of blocking forever.

MPI calls made outside Horovod never time out, so a rank that skipped a torus call, stopped early (a Keras
``EarlyStopping`` or ``TerminateOnNaN`` that fired on one rank only) or died would leave the others
blocked. The MPI transport therefore issues every collective and point-to-point step of a call as a
non-blocking request and waits through :meth:`CallClock.wait`, which tests the requests
(``MPI_Testall``) until they complete or the call's deadline passes. Then, on every rank that is waiting:

1. a *roll call* on a private communicator: each waiting rank sends the number of the call it waits in to
   every other rank and collects, for :data:`ROLL_CALL_SECONDS`, the numbers the other waiting ranks send;
   the ranks that sent the same call number arrived, the others did not;
2. :class:`TorusStallError` is raised, naming the call number, its name, the deadline and the ranks that
   did not arrive, so ``fit``'s ``on_train_end``, a ``BackupAndRestore`` and the user's ``finally`` run;
3. the pending requests cannot be cancelled (MPI has no cancel for collectives), so the communicators are
   unusable: when the process exits after the error, an ``atexit`` hook tells the other waiting ranks and
   waits (up to :data:`EXIT_GRACE_SECONDS`) until they are exiting too, so that every one has run its own
   error handling, then ends the job with ``MPI_Abort`` (every rank, including one that left early, exits
   non-zero) instead of hanging in ``MPI_Finalize``.

A skipped call or a one-rank stop is a :class:`TorusStallError` (not Horovod's ``HorovodInternalError``,
which Horovod's elastic mode treats as a lost rank and resets).

Importing this module does not import mpi4py (which would initialise MPI): the TensorFlow layer imports
:class:`TorusStallError` under every launcher, Gloo included.
"""
from __future__ import annotations

import atexit
import sys
import time

import numpy as np

__all__ = ["TorusStallError", "CallClock", "ROLL_CALL_SECONDS", "EXIT_GRACE_SECONDS"]

#: Seconds the waiting ranks spend collecting each other's roll-call messages after the deadline.
ROLL_CALL_SECONDS = 3.0

#: Seconds a stalled process waits at exit for the other stalled ranks to be exiting before MPI_Abort.
EXIT_GRACE_SECONDS = 10.0

_ROLL_CALL_TAG, _EXIT_TAG = 73, 74
_abort_registered = {"done": False}


class TorusStallError(RuntimeError):
    """A torus call waited past its deadline for ranks that did not make the same call.

    Attributes:
        call: the call number (1-based, per TorusComm). ``name``: the call's name or "".
        missing: the ranks (of the torus communicator) that did not report waiting in this call.
        deadline: the deadline in seconds.
    """

    def __init__(self, message: str = "", call: int = 0, name: str = "", missing=(), deadline: float = 0.0):
        super().__init__(message)
        self.call, self.name, self.missing, self.deadline = call, name, tuple(missing), deadline


class CallClock:
    """The deadline of one torus call on ``comm`` (the torus' private duplicate communicator).

    Args:
        comm: the communicator of the call's ranks (its ranks are named in the error).
        alarm: a second private duplicate of it, for the roll call only.
        call: the call number; ``name``: the call's name; ``grid``: for the message.
        deadline: seconds the call may wait in total, or None (wait forever, ``MPI_Waitall``).
    """

    def __init__(self, comm, alarm, call: int, name: str, grid, deadline: float | None):
        self.comm, self.alarm, self.call, self.name, self.grid = comm, alarm, call, name, grid
        self.deadline = deadline
        self.start = time.monotonic()

    def wait(self, requests) -> None:
        """Complete ``requests`` (a list of ``MPI.Request``), or raise :class:`TorusStallError` once the
        call has waited :attr:`deadline` seconds (after the roll call)."""
        from mpi4py import MPI

        if not self.deadline:
            MPI.Request.Waitall(requests)
            return
        give_up = self.start + self.deadline
        spins = 0
        # Busy testing, as MPI's own blocking waits do: MPI moves data only inside MPI calls (no progress
        # thread), so napping between tests would slow every large transfer.
        while not MPI.Request.Testall(requests):
            spins += 1
            if spins % 1024 == 0 and time.monotonic() > give_up:
                self._raise()

    def _raise(self):
        missing = self._roll_call()
        label = f" {self.name!r}" if self.name else ""
        _abort_at_exit(self.alarm, [r for r in range(self.alarm.Get_size())
                                    if r not in missing and r != self.alarm.Get_rank()])
        raise TorusStallError(
            f"horovod_torus: torus all-reduce call {self.call}{label} on grid {self.grid} waited "
            f"{self.deadline:.0f} s for the other ranks; rank(s) {list(missing)} did not make this call (a rank "
            f"skipped it, stopped early, e.g. a Keras callback that stopped training on one rank only, or died). "
            f"The torus communicators cannot be used again: the job ends with MPI_Abort when this process "
            f"exits. Stop every rank together (horovod_torus.tensorflow.keras.callbacks.StopTogetherCallback) "
            f"or make the same torus calls on every rank", self.call, self.name, missing, self.deadline)

    def _roll_call(self) -> list[int]:
        """Ranks that did not report waiting in this call within ROLL_CALL_SECONDS (collective only among
        the waiting ranks: every send is non-blocking and never waited for)."""
        from mpi4py import MPI

        me, size = self.alarm.Get_rank(), self.alarm.Get_size()
        mine = np.array([self.call], np.int64)
        for r in range(size):
            if r != me:
                self.alarm.Isend(mine, dest=r, tag=_ROLL_CALL_TAG)
        arrived = {me}
        until = time.monotonic() + ROLL_CALL_SECONDS
        status = MPI.Status()
        while time.monotonic() < until and len(arrived) < size:
            if self.alarm.Iprobe(source=MPI.ANY_SOURCE, tag=_ROLL_CALL_TAG, status=status):
                got = np.empty(1, np.int64)
                self.alarm.Recv(got, source=status.Get_source(), tag=_ROLL_CALL_TAG)
                if int(got[0]) == self.call:
                    arrived.add(status.Get_source())
            else:
                time.sleep(0.01)
        return [r for r in range(size) if r not in arrived]


def _abort_at_exit(alarm, peers: list[int]) -> None:
    """At exit: tell ``peers`` (the other ranks that waited in the stalled call) that this one is exiting,
    wait up to EXIT_GRACE_SECONDS for the same from each, then MPI_Abort."""
    if _abort_registered["done"]:
        return
    _abort_registered["done"] = True

    def abort():
        from mpi4py import MPI

        note = np.zeros(1, np.int64)
        for r in peers:
            alarm.Isend(note, dest=r, tag=_EXIT_TAG)
        waiting, until, status = set(peers), time.monotonic() + EXIT_GRACE_SECONDS, MPI.Status()
        while waiting and time.monotonic() < until:
            if alarm.Iprobe(source=MPI.ANY_SOURCE, tag=_EXIT_TAG, status=status):
                alarm.Recv(np.empty(1, np.int64), source=status.Get_source(), tag=_EXIT_TAG)
                waiting.discard(status.Get_source())
            else:
                time.sleep(0.01)
        print("horovod_torus: a torus call stalled in this process: ending the job with MPI_Abort",
              file=sys.stderr, flush=True)
        MPI.COMM_WORLD.Abort(1)

    atexit.register(abort)
