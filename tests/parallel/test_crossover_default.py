"""The default crossover (``min_torus_bytes="auto"``): below it the flat call runs, at and above it the three
phases, on every transport and in the numpy API, with results equal to numpy and to Horovod's flat call;
calibration agrees across ranks and is cached.

Launched by tests/parallel/run_all.sh with ``HOROVOD_TORUS_MIN_BYTES=auto`` (the package's default; the
other parallel tests run with 0). Before Horovod starts, every rank writes a cache file of crossover
``CROSSOVER`` for this job's key into its own directory (only rank 0's is read), so the default's choice is
known here whatever this machine measures; the calibration itself is checked on empty directories.
"""
import os
import socket
import tempfile

import numpy as np
import pytest

from horovod_torus import __version__, crossover
from horovod_torus.launch import LaunchContext

CROSSOVER = 64 * 1024
CONTEXT = LaunchContext.from_environ()
CACHE = tempfile.mkdtemp(prefix=f"horovod-torus-crossover-r{CONTEXT.rank}-")


def _key(transport, variant=""):
    grid = os.environ["HOROVOD_TORUS_GRID"]
    return crossover.CrossoverKey(world_size=CONTEXT.size, grid=grid, launcher=CONTEXT.launcher,
                                  hosts=((socket.gethostname(), CONTEXT.size),), transport=transport,
                                  variant=variant, version=__version__)


def _mpi_variant():
    """The MPI transport's variant of the key on one host: the column setting and the on-node model."""
    from horovod_torus.columns import ON_NODE

    return f"column={os.environ.get('HOROVOD_TORUS_COLUMN_ALGORITHM', 'auto')};model={ON_NODE.source}"


def _prepare():
    """Cache files of CROSSOVER for the TensorFlow transports of this launch (one host: the ranks' hosts
    are this one; the MPI transport's column model is the on-node one; under an MPI launcher the Horovod
    transport's calls are checked on the MPI communicator, a variant of their own)."""
    fixed = crossover.Calibration(CROSSOVER, {CROSSOVER: 0.5}, 1, 1, 0.0)
    from horovod_torus import ompi_rules

    rules = f";coll_tuned={ompi_rules.describe()}" if CONTEXT.mpi_world else ""  # set by conftest.py
    horovod_variant = "check=mpi" + rules if CONTEXT.mpi_world else ""
    for transport, variant in (("horovod", horovod_variant), ("mpi", _mpi_variant())):
        crossover.write_cache(CACHE, _key(transport, variant), fixed)
    os.environ["HOROVOD_TORUS_CACHE_DIR"] = CACHE


if os.environ.get("HOROVOD_TORUS_MIN_BYTES") != "auto":   # conftest.py sets 0 unless the launch sets it
    pytest.skip("launch this file with HOROVOD_TORUS_MIN_BYTES=auto (tests/parallel/launches.tsv does)",
                allow_module_level=True)
_prepare()  # at import: before the session's hvd fixture initialises Horovod


class Spy:
    """Counts the flat and the three-phase calls of a transport (wraps ``allreduce_flat`` of ``flat_owner``
    and ``reduce_scatter`` of ``phase_owner``, instance attributes)."""

    def __init__(self, flat_owner, phase_owner):
        self.flat = self.phases = 0
        flat, scatter = flat_owner.allreduce_flat, phase_owner.reduce_scatter

        def allreduce_flat(*a):
            self.flat += 1
            return flat(*a)

        def reduce_scatter(*a):
            self.phases += 1
            return scatter(*a)
        flat_owner.allreduce_flat, phase_owner.reduce_scatter = allreduce_flat, reduce_scatter
        self._undo = lambda: (vars(flat_owner).pop("allreduce_flat"), vars(phase_owner).pop("reduce_scatter"))

    def counts(self):
        out = (self.flat, self.phases)
        self.flat = self.phases = 0
        return out


class NativeSpy:
    """horovod_torus._native counting, into ``spy.flat``, the flat calls whose data its ``check_flat`` moved
    (status 0; with status 1 the data moves through ``allreduce_flat``, which the :class:`Spy` counts)."""

    def __init__(self, native, spy):
        self.native, self.spy, self.check = native, spy, native.check

    def check_flat(self, *args):
        status = self.native.check_flat(*args)
        self.spy.flat += status[0] == 0
        return status


def _transports(hvd):
    """transport -> (the object whose allreduce_flat moves its flat calls' data, the one of its phases): the
    MPI transport's flat calls are checked on its communicator and move their data with Horovod's flat call
    (horovod_torus.tensorflow.transports.MPIChecked, which passes the Horovod transport's ops through)."""
    torus = hvd.torus()
    spies = {"horovod": (torus._horovod, torus._horovod)}
    if torus.torus_comm is not None:
        spies["mpi"] = (torus._horovod, torus.torus_comm)
    return spies


def test_the_default_reads_the_cache_and_picks_flat_below_and_torus_above(hvd, world):
    import tensorflow as tf

    size, rank = world
    torus = hvd.torus()
    assert hvd.settings().min_torus_bytes == "auto"
    want_transports = ("horovod", "mpi") if torus.torus_comm is not None else ("horovod",)
    assert torus.crossover == {t: CROSSOVER for t in want_transports}
    assert torus.crossover_source == {t: "cache" for t in want_transports}
    for t, owners in _transports(hvd).items():
        spy = Spy(*owners)
        try:
            for n, algorithm in ((1, "flat"), (CROSSOVER // 4 - 1, "flat"), (CROSSOVER // 4, "torus"),
                                 (CROSSOVER // 4 + 1001, "torus")):
                assert torus.algorithm(4 * n, t) == algorithm
                x = tf.constant((np.arange(n) % 7 + rank).astype(np.float32))
                checks = (torus.torus_comm.calls if torus.torus_comm is not None else 0, torus._horovod.calls())
                got = hvd.allreduce(x, op=hvd.Sum, strategy=f"torus:{t}").numpy()
                if torus.torus_comm is not None:  # under mpirun every call of both transports is checked on
                    # the MPI communicator, none by the Horovod transport (one Horovod negotiation less)
                    assert (torus.torus_comm.calls, torus._horovod.calls()) == (checks[0] + 1, checks[1]), (t, n)
                else:
                    assert (torus._horovod.calls(), 0) == (checks[1] + 1, checks[0]), (t, n)
                flat = hvd.allreduce(x, op=hvd.Sum, strategy="horovod").numpy()
                want = sum((np.arange(n) % 7 + r).astype(np.float32) for r in range(size))
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(got, flat)
                assert spy.counts() == ((1, 0) if algorithm == "flat" else (0, 1)), (t, n)
        finally:
            spy._undo()


def test_the_bench_names_the_algorithm_that_ran(hvd, world):
    from horovod_torus.bench.allreduce import algorithm_of

    t = hvd.torus().transport
    assert algorithm_of("torus", CROSSOVER - 4) == "flat"
    assert algorithm_of("torus", CROSSOVER).startswith("torus")
    assert algorithm_of(f"torus:{t}", 8) == "flat"
    assert algorithm_of("horovod", 1 << 30) == algorithm_of("ring", 8) == "flat"


def test_calibration_on_an_empty_cache_agrees_and_is_cached(hvd, world, tmp_path):
    """Measured on every transport (the largest size first: on one host usually the only one), the same
    value on every rank, written by rank 0, then read back without measuring."""
    import tensorflow as tf

    size, rank = world
    torus = hvd.torus()
    saved = dict(torus.crossover), dict(torus.crossover_source)
    directory = str(tmp_path)   # per rank: only rank 0's is written
    try:
        measured = dict(torus.resolve_crossover(directory, CONTEXT.launcher))
        sources = dict(torus.crossover_source)
        again = dict(torus.resolve_crossover(directory, CONTEXT.launcher))
        again_sources = dict(torus.crossover_source)
    finally:
        torus.crossover, torus.crossover_source = saved
    values = [measured[t] for t in sorted(measured)]
    gathered = hvd.allgather(tf.constant([values], tf.int64)).numpy()
    assert (gathered == gathered[0]).all(), gathered
    assert set(sources.values()) == {"measured"} and set(again_sources.values()) == {"cache"}
    assert again == measured
    assert all(v in crossover.DEFAULT_SIZES + (crossover.NEVER,) for v in values)
    files = sorted(os.listdir(directory))
    assert len(files) == (len(measured) if rank == 0 else 0), files


@pytest.fixture()
def mpi_world(hvd):
    if hvd.torus_comm() is None:
        pytest.skip("the numpy API needs an MPI world (mpirun)")
    from mpi4py import MPI

    return MPI.COMM_WORLD


def test_numpy_api_default_picks_flat_below_and_torus_above(hvd, mpi_world, tmp_path):
    """TorusComm.create with the default: rank 0's cache file of the ``numpy`` key gives the crossover;
    the small calls are one flat MPI_Allreduce, the large ones the three phases; results equal numpy and
    MPI_Allreduce."""
    from mpi4py import MPI

    from horovod_torus.mpi import TorusComm, torus_allreduce

    comm, rank, size = mpi_world, mpi_world.Get_rank(), mpi_world.Get_size()
    directory = str(tmp_path)
    crossover.write_cache(directory, _key("numpy", _mpi_variant()), crossover.Calibration(CROSSOVER, {}, 1, 1, 0.0))
    with TorusComm.create(comm, cache_dir=directory) as tc:
        assert (tc.min_torus_bytes, tc.crossover_source) == (CROSSOVER, "cache")
        spy = Spy(tc, tc)
        if tc.native is not None:  # a flat call's data may move in its C call (status 0) instead
            tc.native = NativeSpy(tc.native, spy)
        for n, algorithm in ((2, "flat"), (CROSSOVER // 4 - 1, "flat"), (CROSSOVER // 4, "torus"),
                             (CROSSOVER // 4 + 999, "torus")):
            assert tc.algorithm(4 * n) == algorithm
            x = (np.arange(n) % 5 + rank).astype(np.float32)
            got = torus_allreduce(tc, x)
            flat = np.empty_like(x)
            comm.Allreduce(x, flat, op=MPI.SUM)
            np.testing.assert_array_equal(got, sum((np.arange(n) % 5 + r).astype(np.float32) for r in range(size)))
            np.testing.assert_array_equal(got, flat)
            assert spy.counts() == ((1, 0) if algorithm == "flat" else (0, 1)), n
        assert tc.calls == 4   # the user's calls only


def test_numpy_api_calibrates_once_agrees_and_caches(hvd, mpi_world, tmp_path):
    from horovod_torus.mpi import TorusComm

    comm = mpi_world
    directory = str(tmp_path)
    with TorusComm.create(comm, cache_dir=directory, min_torus_bytes="auto") as tc:
        first = (tc.min_torus_bytes, tc.crossover_source, tc.calls)
    with TorusComm.create(comm, cache_dir=directory) as tc:
        second = (tc.min_torus_bytes, tc.crossover_source)
    with TorusComm.create(comm, cache_dir=directory, min_torus_bytes=0) as tc:
        explicit = (tc.min_torus_bytes, tc.crossover_source, tc.algorithm(8))
    everyone = comm.allgather(first[0])
    assert len(set(everyone)) == 1, everyone
    assert first[1:] == ("measured", 0) and second == (first[0], "cache")
    assert explicit == (0, "setting", "torus")


def test_numpy_api_ranks_that_disagree_on_the_setting_raise_on_every_rank(hvd, mpi_world):
    """min_torus_bytes given on rank 0 only: SettingsMismatchError on every rank, before any calibration."""
    from horovod_torus.agreement import SettingsMismatchError
    from horovod_torus.mpi import TorusComm

    rank = mpi_world.Get_rank()
    with pytest.raises(SettingsMismatchError, match="min_torus_bytes"):
        TorusComm.create(mpi_world, min_torus_bytes=0 if rank == 0 else "auto", cache_dir="off")
    with TorusComm.create(mpi_world, min_torus_bytes=4096) as tc:   # still usable afterwards
        assert tc.min_torus_bytes == 4096 and tc.crossover_source == "setting"
