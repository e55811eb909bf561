"""Every test process imports horovod_torus before TensorFlow, as the app and the tools do, so that the
tests run TensorFlow with the project's defaults (oneDNN on x86: horovod_torus.tf_defaults)."""
import horovod_torus  # noqa: F401
