"""The settings checks a user meets first, in both APIs: a malformed ``HOROVOD_TORUS_TRANSPORT`` raises in
the numpy API too (the one validator of :mod:`horovod_torus.settings`), a NaN or negative stall deadline is
rejected where it was given (not as a bogus ``SettingsMismatchError``, NaN != NaN), ``inf`` means never in
both APIs (exported to Horovod as 0, not an OverflowError), and a second ``init`` compares what
docs/configuration.md says it compares.

No MPI job and no Horovod start: the numpy API runs on ``MPI.COMM_SELF`` posing as rank 0 of two ranks that
resolved the same settings, ``init`` under a one-rank ``horovodrun --gloo`` environment with
``horovod.tensorflow.init`` replaced by a stop."""
import ast
import math
import re
import pathlib
import warnings
from types import SimpleNamespace

import pytest

from horovod_torus.agreement import SettingsMismatchError
from horovod_torus.settings import ENVIRONMENT, TorusSettings
from horovod_torus.topology import TorusTopology

ROOT = pathlib.Path(__file__).resolve().parents[2]
STALL = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"
CHECK = "HOROVOD_STALL_CHECK_TIME_SECONDS"
MUST = r" must be a number of seconds >= 0 \(0: wait forever\)"


@pytest.fixture
def clean_environ(monkeypatch):
    """No torus variable of the calling shell leaks in; Horovod's stall variables restored afterwards
    (``init`` writes them)."""
    for name in [n for names in ENVIRONMENT.values() for n in names] + [CHECK]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def resolve(environ=None, **kwargs):
    return TorusSettings.resolve(size=4, local_size=4, environ=environ or {}, **kwargs)


# --- the deadline: NaN and negative numbers rejected, inf means never --------------------------------------

@pytest.mark.parametrize("environ, kwargs, match", [
    ({}, {"stall_seconds": math.nan}, r"^stall_seconds=nan" + MUST),
    ({}, {"stall_seconds": -1}, r"^stall_seconds=-1" + MUST),
    ({}, {"stall_seconds": -math.inf}, r"^stall_seconds=-inf" + MUST),
    ({STALL: "nan"}, {}, rf"^{STALL}='nan'" + MUST),
    ({STALL: "NaN"}, {}, rf"^{STALL}='NaN'" + MUST),
    ({STALL: "-inf"}, {}, rf"^{STALL}='-inf'" + MUST),
    ({STALL: "-0.5"}, {}, rf"^{STALL}='-0.5'" + MUST),
    ({}, {"stall_seconds": math.nan, "names": {"stall_seconds": "stall_shutdown_seconds"}},
     r"^stall_shutdown_seconds=nan" + MUST),
])
def test_a_nan_or_negative_deadline_is_rejected_naming_its_source(environ, kwargs, match):
    with pytest.raises(ValueError, match=match):
        resolve(environ, **kwargs)


@pytest.mark.parametrize("environ, kwargs", [({}, {"stall_seconds": math.inf}), ({STALL: "inf"}, {}),
                                             ({STALL: "Infinity"}, {}), ({}, {"stall_seconds": 0}),
                                             ({STALL: "0"}, {})])
def test_inf_and_zero_both_mean_never(environ, kwargs):
    settings = resolve(environ, **kwargs)
    assert settings.stall_seconds is None
    assert settings.agreement()["stall_seconds"] is None  # the ranks compare equal values: inf on one, 0 on another


# --- the numpy API ----------------------------------------------------------------------------------------

class _Made(Exception):
    """TorusComm.create got past the agreement to making the torus communicators."""


def _rank_0_of_2():
    """``MPI.COMM_SELF`` posing as rank 0 of two ranks whose peer resolved the same settings (what an
    environment exported to every rank gives); making any communicator from it fails the test."""
    from mpi4py import MPI

    class Rank0Of2(MPI.Intracomm):
        def Get_size(self):
            return 2

        def allgather(self, obj):
            return [obj, obj]

        def Dup(self, *args):
            raise AssertionError("TorusComm.create made a communicator: the settings were not rejected first")

    return Rank0Of2(MPI.COMM_SELF)


@pytest.fixture
def torus_comm(clean_environ):
    from horovod_torus.mpi import TorusComm

    return TorusComm


@pytest.mark.parametrize("name", ["HOROVOD_TORUS_TRANSPORT", "HOROVOD_TORUS_BACKEND"])
def test_numpy_api_rejects_a_malformed_transport_variable(torus_comm, clean_environ, name):
    """The numpy API does not use the transport, but a malformed value is a mistake the user should hear
    of (docs/configuration.md), with the same message as ``init``'s: before any communicator is made."""
    clean_environ.setenv(name, "foo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match=rf"^{name}='foo' is not a torus transport: choose one of auto, "
                                             r"horovod, mpi") as info:
            torus_comm.create(_rank_0_of_2(), min_torus_bytes=0)
    assert not isinstance(info.value, SettingsMismatchError)


@pytest.mark.parametrize("env, kwargs, match", [
    ({}, {"stall_seconds": math.nan}, r"^stall_seconds=nan" + MUST),
    ({STALL: "nan"}, {}, rf"^{STALL}='nan'" + MUST),
    ({}, {"stall_seconds": -3}, r"^stall_seconds=-3" + MUST),
])
def test_numpy_api_rejects_a_nan_deadline_not_as_a_mismatch(torus_comm, clean_environ, env, kwargs, match):
    for k, v in env.items():
        clean_environ.setenv(k, v)
    with pytest.raises(ValueError, match=match) as info:
        torus_comm.create(_rank_0_of_2(), min_torus_bytes=0, **kwargs)
    assert not isinstance(info.value, SettingsMismatchError)


@pytest.mark.parametrize("env, kwargs", [({}, {"stall_seconds": math.inf}), ({STALL: "inf"}, {})])
def test_numpy_api_takes_an_inf_deadline_as_never(torus_comm, clean_environ, env, kwargs):
    for k, v in env.items():
        clean_environ.setenv(k, v)
    made = []

    def from_settings(cls, comm, settings, column_model=None):
        made.append(settings)
        raise _Made

    clean_environ.setattr(torus_comm, "from_settings", classmethod(from_settings))
    with pytest.raises(_Made):
        torus_comm.create(_rank_0_of_2(), min_torus_bytes=0, **kwargs)
    assert made[0].stall_seconds is None  # TorusComm.deadline None: wait forever


# --- init -------------------------------------------------------------------------------------------------

#: One rank under horovodrun --gloo: no MPI world, and no exchange (a world of one rank agrees with itself).
ONE_GLOO_RANK = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "1",
                 "HOROVOD_SIZE": "1", "HOROVOD_RANK": "0", "HOROVOD_LOCAL_SIZE": "1", "HOROVOD_LOCAL_RANK": "0"}


class _HorovodStarted(Exception):
    """init got as far as horovod.tensorflow.init; ``environ``: Horovod's stall variables at that point."""

    def __init__(self, environ):
        super().__init__(environ)
        self.environ = environ


@pytest.fixture
def first_init(clean_environ):
    """``runtime.init`` up to ``horovod.tensorflow.init``, which raises :class:`_HorovodStarted`."""
    import os

    from horovod_torus.tensorflow import runtime

    for k, v in ONE_GLOO_RANK.items():
        clean_environ.setenv(k, v)
    clean_environ.delenv("HOROVOD_ELASTIC", raising=False)
    clean_environ.setattr(runtime._hvd, "is_initialized", lambda: False)
    clean_environ.setattr(runtime.ompi_rules, "prepare_for_job", lambda context: (None, "not in this test"))

    def started(**kwargs):
        raise _HorovodStarted({k: os.environ.get(k) for k in (STALL, CHECK)})

    clean_environ.setattr(runtime._hvd, "init", started)
    return runtime.init


@pytest.mark.parametrize("env, kwargs", [({}, {"stall_shutdown_seconds": math.inf}), ({STALL: "inf"}, {})])
def test_init_exports_an_inf_deadline_to_horovod_as_never(first_init, clean_environ, env, kwargs):
    for k, v in env.items():
        clean_environ.setenv(k, v)
    with pytest.raises(_HorovodStarted) as info:  # not OverflowError: cannot convert float infinity to integer
        first_init(min_torus_bytes=0, **kwargs)
    assert info.value.environ == {STALL: "0", CHECK: None}


@pytest.mark.parametrize("env, kwargs, match", [
    ({}, {"stall_shutdown_seconds": math.nan}, r"^stall_shutdown_seconds=nan" + MUST),
    ({STALL: "nan"}, {}, rf"^{STALL}='nan'" + MUST),
    ({}, {"stall_shutdown_seconds": -1.0}, r"^stall_shutdown_seconds=-1.0" + MUST),
])
def test_init_rejects_a_nan_deadline_before_horovod_starts(first_init, clean_environ, env, kwargs, match):
    for k, v in env.items():
        clean_environ.setenv(k, v)
    with pytest.raises(ValueError, match=match) as info:
        first_init(min_torus_bytes=0, **kwargs)
    assert not isinstance(info.value, SettingsMismatchError)


def test_init_exports_a_finite_deadline_in_whole_seconds(first_init):
    with pytest.raises(_HorovodStarted) as info:
        first_init(min_torus_bytes=0, stall_shutdown_seconds=90.5)
    assert info.value.environ == {STALL: "90", CHECK: "60"}


# --- a second init ----------------------------------------------------------------------------------------

@pytest.fixture
def running(clean_environ):
    """``runtime.init`` while a torus runs: grid 2x2, transport chosen ``mpi``, the other settings as given
    to the first init (min_torus_bytes ``auto``, column algorithm ``auto``, deadline 300 s)."""
    from horovod_torus.tensorflow import runtime

    torus = SimpleNamespace(grid=TorusTopology(2, 2), transport="mpi")
    clean_environ.setattr(runtime._hvd, "is_initialized", lambda: True)
    clean_environ.setitem(runtime._current, "torus", torus)
    clean_environ.setitem(runtime._current, "settings", TorusSettings(grid=TorusTopology(2, 2)))
    clean_environ.setenv("HOROVOD_TORUS_GRID", "4x1")  # not read again
    return runtime.init, torus


@pytest.mark.parametrize("kwargs", [
    {}, {"grid": "2x2"}, {"grid": TorusTopology(2, 2)}, {"transport": "auto"}, {"transport": "mpi"},
    {"min_torus_bytes": "auto"}, {"column_algorithm": "auto"}, {"stall_shutdown_seconds": 300},
    {"cache_dir": "/elsewhere"}, {"comm": [0, 1]}, {"process_sets": ["not even a process set"]},
])
def test_a_second_init_with_the_running_settings_returns_the_running_torus(running, kwargs):
    init, torus = running
    assert init(**kwargs) is torus


@pytest.mark.parametrize("kwargs, match", [
    ({"grid": "4x1"}, r"^init\(grid=4x1\): horovod_torus already runs on grid 2x2; call shutdown\(\) first"),
    ({"transport": "horovod"}, r"^init\(transport='horovod'\): .* on grid 2x2 with transport='mpi'"),
    ({"min_torus_bytes": 65536}, r"^init\(min_torus_bytes=65536\): .* with min_torus_bytes='auto'"),
    ({"column_algorithm": "ring"}, r"^init\(column_algorithm='ring'\): .* with column_algorithm='auto'"),
    ({"stall_shutdown_seconds": 60}, r"^init\(stall_shutdown_seconds=60\): .* with stall_shutdown_seconds=300.0"),
    ({"stall_shutdown_seconds": math.inf}, r"^init\(stall_shutdown_seconds=inf\): .* stall_shutdown_seconds=300.0"),
    ({"stall_shutdown_seconds": math.nan}, r"^stall_shutdown_seconds=nan" + MUST),
])
def test_a_second_init_with_another_setting_raises_naming_both(running, kwargs, match):
    init, _ = running
    with pytest.raises(ValueError, match=match):
        init(**kwargs)


def test_configuration_page_says_what_a_second_init_compares():
    """docs/configuration.md's paragraph on a second ``init`` names every argument that init compares (those
    it hands to ``_same_as_running``; ``backend`` as ``transport``) outside its "not compared" sentence, and
    every other parameter of init in that sentence."""
    source = (ROOT / "horovod_torus" / "tensorflow" / "runtime.py").read_text()
    init = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "init")
    call = next(n for n in ast.walk(init)
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_same_as_running")
    compared = {"stall_shutdown_seconds" if k.arg == "stall_seconds" else k.arg for k in call.keywords} | {"backend"}
    parameters = [a.arg for a in init.args.args + init.args.kwonlyargs] + ["**kwargs"]
    page = (ROOT / "docs" / "configuration.md").read_text()
    start = page.index("Called again while Horovod runs")
    paragraph = " ".join(page[start:page.index("\n\n", start)].split())
    sentences = re.split(r"(?<=\.) (?=[A-Z`])", paragraph)
    not_compared = [s for s in sentences if "not compared" in s]
    assert len(not_compared) == 1, f"one sentence must say which arguments are not compared: {paragraph}"
    others = " ".join(s for s in sentences if s not in not_compared)
    for name in parameters:
        if name in compared:
            assert f"`{name}`" in others and f"`{name}`" not in not_compared[0], f"a second init compares {name}"
        else:
            assert f"`{name}`" in not_compared[0], f"a second init does not compare {name}"
