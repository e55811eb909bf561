"""Keras' own TerminateOnNaN deciding on one rank only (a NaN in rank 0's batch), no StopTogetherCallback:
rank 0 stops, the others wait in the next gradient all-reduce and must get a Python exception naming the
call and the missing rank within the deadline + 10 s, so that their finally blocks run; the job then ends
non-zero. Inside fit's tf.function TensorFlow's py-function boundary turns TorusStallTFError (a
tf.errors.DeadlineExceededError eagerly) into tf.errors.InvalidArgumentError with its message (raised there as
TorusStallGraphError, a ValueError: an UnknownError would be swallowed by horovod.tensorflow.elastic.run).

* STALL_EARLY=sleep (default on the mpi transport): rank 0 stays alive, outside any torus call; the others
  raise after the deadline; the job ends with MPI_Abort (mpirun) or Horovod's shutdown (horovodrun --gloo);
* STALL_EARLY=exit (default on the horovod transport): rank 0 goes on to its exit, where its exit check
  exchanges the exit signature: the others raise at once, naming rank 0 (and, on the horovod transport
  under horovodrun --gloo, the callback that stopped it: keras.callbacks.TerminateOnNaN), and rank 0 exits with status 1 naming the
  callback (run_stall.sh reads that line from the launcher's log).

Launched by tests/parallel/run_stall.sh with a 10 s deadline; prints one line per rank that it checks."""
import os
import sys
import time

from stall_report import report, waited_enough  # this script's directory is on sys.path

import horovod_torus.tensorflow.keras as hvd  # before TensorFlow (oneDNN default)
import keras
import numpy as np
import tensorflow as tf

from horovod_torus.tensorflow import runtime


def main():
    hvd.init(grid="2x2")
    rank, deadline = hvd.rank(), hvd.settings().stall_seconds
    mpi = hvd.transport() == "mpi"
    assert mpi == (os.environ.get("STALL_TRANSPORT", "mpi") == "mpi"), hvd.transport()
    assert deadline == float(os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"])
    early = os.environ.get("STALL_EARLY", "sleep" if mpi else "exit")
    # the model's 3 float32 gradients (12 bytes): the three phases, or with a crossover set the flat call
    want = "torus" if os.environ["HOROVOD_TORUS_MIN_BYTES"] == "0" else "flat"
    assert runtime.torus().algorithm(12) == want, (runtime.torus(), want)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    x = np.ones((16, 2), np.float32)
    if rank == 0:
        x[6:8] = np.nan  # rank 0's fourth batch gives a NaN loss: Keras stops rank 0 there
    start = None

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            nonlocal start
            start = time.monotonic()

    try:
        model.fit(x, np.ones((16, 1), np.float32), batch_size=2, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), Clock(),
                             keras.callbacks.TerminateOnNaN()])
        report(rank, f"FIT RETURNED rank {rank} after stop_training={model.stop_training}")
    except tf.errors.OpError as exc:
        took = time.monotonic() - start
        ok = ("TorusStallGraphError: horovod_torus: torus all-reduce call" in str(exc)
              and isinstance(exc, tf.errors.InvalidArgumentError) and "rank(s) [0]" in str(exc)
              and "did not make this call" in str(exc) and took <= deadline + 10
              and (waited_enough(took, deadline, str(exc)) if early == "sleep" else "they left the torus" in str(exc))
              and (mpi or early == "sleep" or "keras.callbacks.TerminateOnNaN set model.stop_training" in str(exc)))
        report(rank, f"KERAS STALL {'OK' if ok else 'WRONG'} rank {rank} after {took:.1f} s: {str(exc)[:200]}")
        sys.exit(1)
    finally:
        report(rank, f"FINALLY rank {rank}")
    if rank == 0 and early == "sleep":
        time.sleep(60)  # the stopped rank stays alive; the job's end comes from the others' MPI_Abort


if __name__ == "__main__":
    main()
