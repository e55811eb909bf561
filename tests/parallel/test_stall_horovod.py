"""A rank that skips a torus call on the Horovod transport (horovodrun --gloo) must not leave the others
blocked: after the deadline every waiting rank raises TorusStallError naming the call and the rank that did
not arrive, within the deadline + 10 s, runs its own cleanup, and the job ends non-zero: the rank that
skipped exits with status 1 too, saying so. Launched by tests/parallel/run_stall.sh with a 10 s deadline;
it EXPECTS the launch to fail and checks every rank's line (STALL_DIR/rank<R>.txt)."""
import os
import sys
import time

import horovod_torus.tensorflow as hvd  # before TensorFlow (oneDNN default)
import tensorflow as tf
from stall_report import report, waited_enough  # this script's directory is on sys.path


def main():
    hvd.init(grid="2x2", transport="horovod")
    rank, deadline = hvd.rank(), hvd.settings().stall_seconds
    assert deadline == float(os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"])
    graph = os.environ.get("STALL_GRAPH") == "1"
    call = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, strategy="torus")) if graph else (
        lambda t: hvd.allreduce(t, op=hvd.Sum, strategy="torus"))
    x = tf.ones([4])
    for k in range(3):
        if rank == 3 and k == 1:
            continue  # rank 3 skips a call and then stays alive, outside Horovod
        start = time.monotonic()
        try:
            out = call(x).numpy()
            assert (out == 4).all(), out
        except (hvd.TorusStallError, tf.errors.OpError) as exc:
            took, text = time.monotonic() - start, str(exc)
            if graph:  # the py-function boundary: InvalidArgumentError carrying TorusStallGraphError's message
                kind_ok = isinstance(exc, tf.errors.InvalidArgumentError) and "TorusStallGraphError: " in text
            else:
                kind_ok = (isinstance(exc, hvd.TorusStallError) and exc.call == 3 and tuple(exc.missing) == (3,)
                           and isinstance(exc, tf.errors.DeadlineExceededError))
            ok = (kind_ok and "torus all-reduce call 3 " in text and "rank(s) [3] did not make this call" in text
                  and took <= deadline + 10 and waited_enough(took, deadline, text))
            report(rank, f"STALL {'OK' if ok else 'WRONG'} rank {rank} {type(exc).__name__} call 3 missing [3] "
                         f"after {took:.1f} s: {text[:300]}")
            report(rank, f"CLEANUP rank {rank}")  # a user's finally / on_train_end runs here
            time.sleep(10)  # let rank 3 reach its own exit first (the launcher then ends the job)
            sys.exit(1)
    if rank == 3:
        report(rank, "SKIPPER rank 3 waits")
        time.sleep(deadline + 8)  # alive, never calling again; then it exits: the exit check must fail it


if __name__ == "__main__":
    main()
