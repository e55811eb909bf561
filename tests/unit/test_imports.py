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
