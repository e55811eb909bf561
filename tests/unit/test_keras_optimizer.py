"""DistributedOptimizer / DistributedGradientTape with a recording strategy, and bad input (no MPI).

The recording strategy sums nothing (one process) but records each call, which shows the contract the
benchmark relies on: ONE grouped strategy call per step, carrying every dense gradient.
"""
import numpy as np
import pytest
import keras
import tensorflow as tf

import horovod_torus.tensorflow as hvd
import horovod_torus.tensorflow.keras as khvd
from horovod_torus.tensorflow.gradients import GradientReducer, ReductionOptions


class Recording:
    def __init__(self):
        self.calls = []

    def __call__(self, tensors, op, name, compression, prescale_factor, postscale_factor):
        self.calls.append(dict(n=len(tensors), shapes=[tuple(t.shape) for t in tensors], op=op,
                               pre=prescale_factor, post=postscale_factor))
        return [t * 1 for t in tensors]


def test_fit_makes_one_strategy_call_per_step_with_all_gradients():
    rec = Recording()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), strategy=rec, gradient_predivide_factor=4.0)
    model.compile(optimizer=opt, loss="mse")
    model.fit(np.ones((8, 3), "float32"), np.ones((8, 2), "float32"), batch_size=4, verbose=0)
    assert len(rec.calls) == 1     # traced once: one call in the step function
    assert rec.calls[0]["shapes"] == [(3, 4), (4,), (4, 2), (2,)]
    assert (rec.calls[0]["pre"], rec.calls[0]["post"]) == (0.25, 4.0)
    assert int(opt.iterations.numpy()) == 2
    assert type(opt).__name__ == "SGD" and isinstance(opt, keras.optimizers.SGD)


def test_reducer_keeps_none_and_honours_groups():
    rec = Recording()
    vs = [tf.Variable(tf.ones([2])) for _ in range(5)]
    grads = [tf.ones([2]), None, tf.ones([2]), tf.ones([2]), None]
    out = GradientReducer(ReductionOptions(strategy=rec))(grads, vs)
    assert out[1] is None and out[4] is None and [c["n"] for c in rec.calls] == [3]
    rec.calls.clear()
    GradientReducer(ReductionOptions(strategy=rec, groups=2))(grads, vs)
    assert [c["n"] for c in rec.calls] == [2, 1]
    rec.calls.clear()
    GradientReducer(ReductionOptions(strategy=rec, groups=[[vs[3], vs[0]]]))(grads, vs)
    assert [c["n"] for c in rec.calls] == [2, 1]


def test_tape_returns_the_sources_structure():
    rec = Recording()
    a, b = tf.Variable(2.0), tf.Variable([1.0, 1.0])
    with tf.GradientTape() as tape:
        loss = a * a
    g = hvd.DistributedGradientTape(tape, strategy=rec).gradient(loss, {"a": a, "b": b})
    assert g["b"] is None and float(g["a"]) == 4.0 and rec.calls[0]["n"] == 1


@pytest.mark.parametrize("call, exc, match", [
    (lambda: khvd.DistributedOptimizer("sgd"), TypeError, r"keras.optimizers.Optimizer instance, got 'sgd'"),
    (lambda: khvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1)), TypeError,
     "Keras 2 optimizer"),
    (lambda: khvd.DistributedOptimizer(keras.optimizers.SGD(), strategy="tours"), ValueError,
     "unknown all-reduce strategy 'tours'"),
    (lambda: khvd.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0), ValueError,
     "backward_passes_per_step=0"),
    (lambda: khvd.DistributedOptimizer(keras.optimizers.SGD(), op=khvd.Sum, gradient_predivide_factor=2.0),
     ValueError, "only with op=Average"),
    (lambda: khvd.DistributedOptimizer(keras.optimizers.SGD(), groups=-1), ValueError, "groups=-1"),
    (lambda: khvd.DistributedOptimizer(khvd.DistributedOptimizer(keras.optimizers.SGD())), ValueError,
     "already a DistributedOptimizer"),
    (lambda: hvd.DistributedGradientTape(object()), TypeError, "needs a tf.GradientTape"),
    (lambda: hvd.DistributedGradientTape(tf.GradientTape(), strategy="x"), ValueError, "unknown"),
    (lambda: khvd.callbacks.BroadcastGlobalVariablesCallback(0), RuntimeError, "before Horovod was initialised"),
    (lambda: khvd.callbacks.MetricAverageCallback(), RuntimeError, "before Horovod was initialised"),
    (lambda: khvd.callbacks.LearningRateWarmupCallback(0.1), RuntimeError, "call hvd.init()"),
])
def test_bad_input_errors_name_the_value(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_horovod_parameter_order_and_defaults_are_kept():
    import inspect
    import horovod.tensorflow as stock_tf
    import horovod.tensorflow.keras as stock_keras
    from horovod.common.basics import HorovodBasics
    for ours, stock in [(khvd.DistributedOptimizer, stock_keras.DistributedOptimizer),
                        (hvd.DistributedGradientTape, stock_tf.DistributedGradientTape),
                        (hvd.allreduce, stock_tf.allreduce), (hvd.grouped_allreduce, stock_tf.grouped_allreduce),
                        (khvd.callbacks.LearningRateWarmupCallback, stock_keras.callbacks.LearningRateWarmupCallback),
                        (khvd.callbacks.LearningRateScheduleCallback, stock_keras.callbacks.LearningRateScheduleCallback),
                        (khvd.callbacks.BroadcastGlobalVariablesCallback, stock_keras.callbacks.BroadcastGlobalVariablesCallback),
                        (khvd.callbacks.MetricAverageCallback, stock_keras.callbacks.MetricAverageCallback),
                        # horovod.tensorflow.init is init(*args, **kwargs) around HorovodBasics.init:
                        (hvd.init, HorovodBasics.init), (khvd.init, HorovodBasics.init)]:
        a = [(p.name, p.default) for p in inspect.signature(ours).parameters.values()
             if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)]
        b = [(p.name, p.default) for p in inspect.signature(stock).parameters.values()
             if p.kind != p.KEYWORD_ONLY and p.name not in ("args", "kwargs", "self")]
        assert a == b, ours


def test_jit_compile_is_refused_before_the_first_step_with_the_fix():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), strategy=Recording()),
                  loss="mse", jit_compile=True)
    with pytest.raises(ValueError, match=r"jit_compile=False"):
        model.fit(np.ones((4, 3), "float32"), np.ones((4, 2), "float32"), batch_size=4, verbose=0)


def test_horovod_helper_names_are_re_exported():
    import horovod.tensorflow as stock_tf
    for name in ("rank_op", "size_op", "local_rank_op", "local_size_op", "broadcast_"):
        assert getattr(hvd, name) is getattr(stock_tf, name)


def test_buckets_cut_in_reverse_order_by_bytes():
    rec = Recording()
    vs = [tf.Variable(tf.ones([n])) for n in (4, 4, 2, 8)]          # 16, 16, 8, 32 bytes
    grads = [tf.ones([n]) for n in (4, 4, 2, 8)]
    GradientReducer(ReductionOptions(strategy=rec, bucket_bytes=24))(grads, vs)
    assert [c["shapes"] for c in rec.calls] == [[(8,)], [(2,), (4,)], [(4,)]]   # 32 | 8+16 | 16
    with pytest.raises(ValueError, match="not both"):
        ReductionOptions(strategy=rec, groups=2, bucket_bytes=8)
    with pytest.raises(ValueError, match="bucket_bytes=0"):
        ReductionOptions(strategy=rec, bucket_bytes=0)


def test_horovods_aggregation_counter_reads_the_passes_since_the_last_all_reduce():
    """``opt._agg_helper.counter`` (Horovod's private helper, which its own test_tensorflow2_keras.py reads):
    the backward passes since the last all-reduce, None with one pass per step, as in Horovod."""
    assert khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), strategy=Recording())._agg_helper is None
    rec = Recording()
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), strategy=rec, backward_passes_per_step=2)
    with pytest.raises(AttributeError, match="not built yet"):
        opt._agg_helper.counter
    v = tf.Variable([1.0, 2.0])
    seen = []
    for _ in range(3):
        opt.apply([tf.constant([1.0, 1.0])], [v])
        seen.append(int(opt._agg_helper.counter.numpy()))
    assert seen == [1, 0, 1] and len(rec.calls) == 1  # one all-reduce, at the second pass
