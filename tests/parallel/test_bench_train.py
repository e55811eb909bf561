"""The training-throughput benchmark's protocol, run for real on the tiny model with both strategies."""
import dataclasses
import os

import pytest

from horovod_torus.bench.train import TrainBenchConfig, run


@pytest.mark.parametrize("strategy", ["torus", "ring"])
def test_train_bench_protocol(hvd, world, strategy):
    size, _ = world
    config = TrainBenchConfig(strategy=strategy, model="tiny", batch_size=3, image_size=32, classes=10,
                              steps=2, warmup_steps=1, sync_iters=2)
    result, host = run(config)
    assert result.replicas_in_sync  # the strategy averaged identical gradients onto every rank
    assert result.world_size == size and result.global_batch == 3 * size and result.grid == str(hvd.grid())
    # tiny model: conv 3*3*3*8+8, conv 3*3*8*16+16, dense 16*10+10 trainable float32 parameters
    assert result.parameters == 224 + 1168 + 170 and result.gradient_bytes == 4 * result.parameters
    assert result.gradient_tensors == 6
    assert result.images_per_s == pytest.approx(3 * size / result.step_time_s["avg"])
    assert result.images_per_s_per_rank == pytest.approx(result.images_per_s / size)
    assert result.sync_share == pytest.approx(result.sync_time_s["avg"] / result.step_time_s["avg"])
    assert 0 < result.step_time_s["min"] <= result.step_time_s["avg"] <= result.step_time_s["max"]
    assert sum(host["ranks_per_host"].values()) == size
    from horovod_torus.tf_defaults import ONEDNN_VAR

    # the package sets TF_ENABLE_ONEDNN_OPTS=1 on x86 before TensorFlow loads (horovod_torus.tf_defaults)
    assert host[ONEDNN_VAR] == os.environ.get(ONEDNN_VAR)
    if host[ONEDNN_VAR] in ("0", "1"):
        assert host["onednn"] is (host[ONEDNN_VAR] == "1"), host
    assert dataclasses.asdict(result)["strategy"] == strategy


def test_train_bench_mixed_float16(hvd, world):
    """--mixed-precision mixed_float16: float16 layers, float32 softmax, loss-scaled gradients reduced,
    weights still identical on every rank; the policy is reset afterwards."""
    import keras

    config = TrainBenchConfig(model="tiny", batch_size=3, image_size=32, classes=10, steps=2, warmup_steps=1,
                              sync_iters=2, mixed_precision="mixed_float16")
    try:
        result, _ = run(config)
        assert keras.mixed_precision.global_policy().name == "mixed_float16"
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert result.replicas_in_sync and result.gradient_bytes == 4 * result.parameters   # float32 variables
    with pytest.raises(ValueError, match="--mixed-precision 'fp16' unknown"):
        TrainBenchConfig(mixed_precision="fp16")
