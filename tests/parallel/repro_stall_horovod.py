"""Reproducer of an open problem, not run by make test: on the Horovod transport (horovodrun --gloo), rank 3
skips a torus call; with a 10 s deadline Horovod's stall shutdown should end the other ranks' wait within
the deadline + 10 s. Seen on 2026-12-01: Horovod's stall inspector did not fire; ranks 0-2 raised
"Horovod has been shut down" only when rank 3 exited after 60 s (lines "HOROVOD STALL WRONG ... 60.1 s").

    HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=10 STALL_DIR=$(mktemp -d) PYTHONPATH=$PWD \
      .venv/bin/horovodrun --gloo -np 4 -H localhost:4 .venv/bin/python tests/parallel/repro_stall_horovod.py
"""
import os
import sys
import time

import horovod_torus.tensorflow as hvd  # before TensorFlow (oneDNN default)
import tensorflow as tf


def report(rank, line):
    """One result line: printed, and appended to STALL_DIR/rank<R>.txt (launcher output interleaves)."""
    print(line, flush=True)
    with open(os.path.join(os.environ.get("STALL_DIR", "/tmp"), f"rank{rank}.txt"), "a") as fh:
        fh.write(line + "\n")


def main():
    hvd.init(grid="2x2", transport="horovod")
    rank, deadline = hvd.rank(), hvd.settings().stall_seconds
    x = tf.ones([4])
    try:
        for k in range(3):
            if rank == 3 and k == 1:
                continue  # rank 3 skips a call and then waits outside Horovod
            start = time.monotonic()
            hvd.allreduce(x, op=hvd.Sum, strategy="torus").numpy()
        if rank == 3:
            time.sleep(60)
    except tf.errors.OpError as exc:
        took = time.monotonic() - start
        ok = rank != 3 and "shut down" in str(exc) and deadline <= took <= deadline + 10
        report(rank, f"HOROVOD STALL {'OK' if ok else 'WRONG'} rank {rank} after {took:.1f} s: "
                     f"{type(exc).__name__}: {str(exc)[:160]}")
        sys.exit(1)
    finally:
        report(rank, f"FINALLY rank {rank}")


if __name__ == "__main__":
    main()
