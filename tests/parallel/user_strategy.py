"""A user's own strategy, registered on import (what --strategy-module imports): the flat Horovod
all-reduce, counting its calls so the tests can tell it really ran."""
from horovod_torus.strategies import get_strategy, register_strategy

CALLS = {"n": 0}


def counted_ring(tensors, op, name, compression, prescale_factor, postscale_factor):
    CALLS["n"] += 1
    return get_strategy("ring")(tensors, op, name, compression, prescale_factor, postscale_factor)


register_strategy("counted_ring", counted_ring, overwrite=True)
