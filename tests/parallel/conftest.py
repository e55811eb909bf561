"""Multi-rank tests: every rank of a real mpirun/horovodrun launch runs the same tests in the same order.

Horovod is initialised once per process with the grid from HOROVOD_TORUS_GRID (set per launch by
tests/parallel/run_all.sh). Tests run every collective before asserting, so a failed assertion on one
rank never leaves the other ranks waiting.
"""
import os

import pytest

# The tests here check the torus' three phases: they keep running them at every size (min_torus_bytes=0),
# unless their launch sets HOROVOD_TORUS_MIN_BYTES (test_crossover_default.py's launches set auto, the
# package's default). Set at import, before any test initialises Horovod; inherited by processes they start.
os.environ.setdefault("HOROVOD_TORUS_MIN_BYTES", "0")

# Test modules import mpi4py (which starts MPI) before the session's init: give Open MPI the columns'
# all-reduce rule first, as init would (horovod_torus.ompi_rules; a numpy-API script does the same).
from horovod_torus.launch import LaunchContext  # noqa: E402
from horovod_torus.ompi_rules import prepare_for_job  # noqa: E402

prepare_for_job(LaunchContext.from_environ())


@pytest.fixture(scope="session")
def hvd():
    import horovod_torus.tensorflow as hvd

    hvd.init()
    return hvd


@pytest.fixture(scope="session")
def world(hvd):
    return hvd.size(), hvd.rank()


def pytest_report_header(config):
    return f"torus grid {os.environ.get('HOROVOD_TORUS_GRID', 'default')}"
