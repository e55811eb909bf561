"""horovod-torus: 2D-Torus all-reduce for Horovod, a Keras 3 drop-in layer, and a ResNet-50 app."""
import os
import shlex
import shutil
import subprocess

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


def mpi_flags(mpicc: str) -> dict:
    """Compile and link flags of the MPI library mpi4py uses, from its wrapper compiler (``mpicc -show``:
    Open MPI, MPICH, Intel MPI). {} when there is none."""
    path = shutil.which(mpicc)
    if path is None:
        return {}
    try:
        words = shlex.split(subprocess.run([path, "-show"], capture_output=True, text=True, check=True).stdout)[1:]
    except (OSError, subprocess.CalledProcessError):
        return {}
    flags = {"include_dirs": [], "library_dirs": [], "libraries": [], "extra_link_args": []}
    for w in words:
        for prefix, key in (("-I", "include_dirs"), ("-L", "library_dirs"), ("-l", "libraries")):
            if w.startswith(prefix) and len(w) > 2:
                flags[key].append(w[2:])
                break
        else:
            flags["extra_link_args"].append(w)
    return flags


class BuildNative(build_ext):
    """Build horovod_torus._native (the numpy API's check and small flat call in C) against the MPI of
    ``$MPICC`` (default ``mpicc``). Optional: without an MPI wrapper compiler or a C compiler the package
    installs without it and the numpy API runs the same calls from Python (slower per call, same results)."""

    def build_extension(self, ext):
        flags = mpi_flags(os.environ.get("MPICC", "mpicc"))
        if not flags:
            print(f"horovod-torus: no MPI wrapper compiler ({os.environ.get('MPICC', 'mpicc')} -show failed); "
                  f"{ext.name} not built, the numpy API runs its check from Python")
            return
        for key, value in flags.items():
            getattr(ext, key).extend(value)
        super().build_extension(ext)

setup(
    name="horovod-torus",
    version="0.1.0",
    description="2D-Torus all-reduce (Mikami et al. 2018) as a Horovod extension, with a Keras 3 "
                "drop-in DistributedOptimizer and a ResNet-50 training app",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["horovod_torus", "horovod_torus.*", "keras_app", "keras_app.*"]),
    # Horovod itself must be built against the installed TensorFlow (see README / `make setup`).
    install_requires=["numpy", "mpi4py"],
    ext_modules=[Extension("horovod_torus._native", ["horovod_torus/_native.c"], optional=True)],
    cmdclass={"build_ext": BuildNative},
    # TensorFlow itself is not required here: tensorflow-cpu (requirements.txt) or tensorflow[and-cuda]
    # (requirements-gpu.txt), pinned, must be installed before Horovod is built against it.
    extras_require={
        "app": ["tensorflow-datasets==4.9.7", "matplotlib>=3.8,<4"],      # keras_app: TFDS readers, plots
        "cpu": ["tensorflow-cpu==2.18.1"],                                # then build Horovod (README)
        "gpu": ["tensorflow[and-cuda]==2.18.1"],                          # then build Horovod with NCCL
        "test": ["pytest>=8,<9"],
    },
    entry_points={"console_scripts": [
        "horovod-torus-bench=horovod_torus.bench.__main__:main",
        "horovod-torus-plan=horovod_torus.plan:main",
        "horovod-torus-train=keras_app.train:main",
        "horovod-torus-doctor=horovod_torus.doctor:main",
    ]},
    license="Apache-2.0",
    license_files=["LICENSE", "NOTICE"],
)
