"""Importing the drop-in API must not initialise MPI (mpi4py's MPI module calls MPI_Init when imported):
under horovodrun --gloo there is no MPI world, and a process that is an MPI singleton cannot start mpirun
(the app's launchers, the ablation driver) as a child."""
import subprocess
import sys


def test_importing_the_tensorflow_and_keras_api_leaves_mpi_alone():
    code = ("import sys, horovod_torus.tensorflow, horovod_torus.tensorflow.keras, horovod_torus.stall; "
            "print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]


def test_the_drop_ins_have_every_public_name_of_horovods_modules():
    """`import horovod_torus.tensorflow[.keras] as hvd` in place of Horovod's: every public function, class
    and constant of horovod.tensorflow / horovod.tensorflow.keras 0.28.1 is there (modules aside)."""
    code = ("import types, horovod.tensorflow as a, horovod.tensorflow.keras as b, horovod_torus.tensorflow as c, "
            "horovod_torus.tensorflow.keras as d\n"
            "for stock, ours in ((a, c), (b, d)):\n"
            "    names = [n for n in dir(stock) if not n.startswith('_') and not isinstance(getattr(stock, n), "
            "types.ModuleType)]\n"
            "    assert len(names) > 30, names\n"
            "    print(stock.__name__, [n for n in names if not hasattr(ours, n)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    # not in horovod_torus.tensorflow: the TF1 optimizer and the partial tape (docs/guide/migrating.md, "Not
    # supported"), and Horovod's implementation helpers that its module namespace happens to import
    assert out.stdout.splitlines() == [
        "horovod.tensorflow ['DistributedOptimizer', 'LocalGradientAggregationHelper', 'PartialDistributedGradientTape'"
        ", 'check_extension', 'handle_average_backwards_compatibility', 'process_set_included_op', 'split_list']",
        "horovod.tensorflow.keras []"]
