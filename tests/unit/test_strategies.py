"""The strategy registry: built-ins, validation at registration, clear errors (no MPI)."""
import pytest

from horovod_torus import strategies as S
from horovod_torus.tensorflow.ops import horovod_allreduce


def good(tensors, op, name, compression, prescale_factor, postscale_factor):
    return list(tensors)


def test_builtins_are_horovod_and_the_torus_transports():
    assert S.available_strategies() == ("horovod", "torus", "torus:horovod", "torus:mpi")
    assert S.get_strategy("horovod") is horovod_allreduce
    with pytest.warns(DeprecationWarning, match="strategy 'ring' is deprecated: use 'horovod'"):
        assert S.get_strategy("ring") is horovod_allreduce
    assert S.DEFAULT_STRATEGY == "torus"
    with pytest.raises(RuntimeError, match="call horovod_torus.tensorflow.init"):
        S.get_strategy("torus")   # bound to the process's torus, which init() makes


def test_check_strategy_rejects_unknown_names_before_init():
    S.check_strategy("torus:mpi")
    with pytest.raises(ValueError, match="unknown all-reduce strategy 'tours'"):
        S.check_strategy("tours")


def test_import_strategy_modules_names_the_missing_module():
    with pytest.raises(ImportError, match="'no_such_module_xyz' cannot be imported"):
        S.import_strategy_modules("json, no_such_module_xyz")


def test_register_get_overwrite_unregister():
    S.register_strategy("mine", good)
    try:
        assert S.get_strategy("mine") is good and "mine" in S.available_strategies()
        with pytest.raises(ValueError, match="already registered"):
            S.register_strategy("mine", good)
        other = lambda tensors, op, name, compression, prescale_factor, postscale_factor: tensors  # noqa
        S.register_strategy("mine", other, overwrite=True)
        assert S.get_strategy("mine") is other
    finally:
        S.unregister_strategy("mine")
    assert "mine" not in S.available_strategies()


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown all-reduce strategy 'tours'.*'horovod', 'torus'"):
        S.get_strategy("tours")


@pytest.mark.parametrize("fn, match", [
    (42, "must be callable"),
    (lambda tensors: tensors, "cannot be called as"),
    (lambda a, b, c, d, e, f: a, "cannot be called as"),          # right arity, wrong keywords
    (lambda tensors, op, name, compression, prescale_factor, postscale_factor, extra: 0, "cannot be called"),
])
def test_bad_callables_are_rejected_at_registration(fn, match):
    with pytest.raises(TypeError, match=match):
        S.register_strategy("bad", fn)
    assert "bad" not in S.available_strategies()


@pytest.mark.parametrize("name, exc, match", [
    ("ring", ValueError, "built in"), ("torus", ValueError, "built in"), ("", ValueError, "non-empty"),
    ("a b", ValueError, "whitespace"), (3, TypeError, "must be a str"),
])
def test_bad_names(name, exc, match):
    with pytest.raises(exc, match=match):
        S.register_strategy(name, good)


def test_resolve_accepts_names_and_checked_callables():
    assert S.resolve_strategy("horovod") is horovod_allreduce
    assert S.resolve_strategy(good) is good
    with pytest.raises(TypeError, match="cannot be called as"):
        S.resolve_strategy(lambda x: x)
    with pytest.raises(ValueError, match="built in"):
        S.unregister_strategy("torus")
