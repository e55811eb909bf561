"""horovod-torus: 2D-Torus all-reduce for Horovod, a Keras 3 drop-in layer, and a ResNet-50 app."""
from setuptools import find_packages, setup

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
