"""Pure LR schedule functions behind the callbacks: exact values (no MPI)."""
import pytest

from horovod_torus.tensorflow.keras.schedules import schedule_lr, warmup_multiplier


def test_warmup_multiplier_reaches_one_on_the_last_warmup_batch():
    # size 4, 2 warm-up epochs, 5 steps: batch b of epoch e -> m(e + b/5)
    assert warmup_multiplier(0.0, 4, 2, 5) == pytest.approx(0.25 * (0.2 * 3 / 2 + 1), abs=0)
    assert warmup_multiplier(1 + 4 / 5, 4, 2, 5) == pytest.approx(1.0, rel=1e-15)
    assert warmup_multiplier(0.0, 1, 5, 10) == 1.0        # one rank: no warm-up


@pytest.mark.parametrize("args", [(0.0, 0, 2, 5), (0.0, 4, 0, 5), (0.0, 4, 2, 0)])
def test_warmup_multiplier_rejects_bad_arguments(args):
    with pytest.raises(ValueError, match="need size >= 1"):
        warmup_multiplier(*args)


def test_schedule_lr_staircase_window_and_exponent():
    lr = lambda e, b: schedule_lr(0.5, 0.1, e, b, start_epoch=1, end_epoch=3)  # noqa: E731
    assert lr(0, 0) is None and lr(3, 0) is None           # outside [1, 3)
    assert lr(1, 0) == 0.5 and lr(2, 0) == pytest.approx(0.05, rel=1e-15)
    assert lr(1, 1) is None                                  # staircase: batch 0 only


def test_schedule_lr_smooth_uses_fractional_epochs():
    assert schedule_lr(2.0, lambda e: e, 1, 3, staircase=False, steps_per_epoch=4) == 2.0 * 1.75
    with pytest.raises(ValueError, match="steps_per_epoch"):
        schedule_lr(2.0, lambda e: e, 1, 3, staircase=False)


def test_fractional_warmup_reaches_and_holds_exactly_the_target():
    # size 4, half an epoch of warm-up, 4 steps per epoch: batches 0 and 1 ramp, then exactly 1.0
    m = [warmup_multiplier(b / 4, 4, 0.5, 4) for b in range(4)]
    assert m == [0.25 * (0.25 * 3 / 0.5 + 1), 1.0, 1.0, 1.0]
    # 0.3 epochs of 10 steps: 0.3 * 10 is 3.0000000000000004 in floats; the ramp still ends on exactly 1
    assert [warmup_multiplier(b / 10, 4, 0.3, 10) for b in range(2, 5)] == [1.0, 1.0, 1.0]
    # 2.5 steps of warm-up (0.5 epoch of 5 steps): never above 1
    assert max(warmup_multiplier(b / 5, 8, 0.5, 5) for b in range(5)) == 1.0


def test_schedule_lr_smooth_fractional_end_epoch_ends_mid_epoch():
    lr = lambda e, b: schedule_lr(0.2, lambda x: x, e, b, end_epoch=0.5, staircase=False,  # noqa: E731
                                  steps_per_epoch=4)
    assert [lr(0, b) for b in range(4)] == [0.0, 0.2 * 0.25, None, None]
    assert lr(1, 0) is None
    # integer bounds: the same window as the staircase test (epoch 3 batch 0 is outside [1, 3))
    assert schedule_lr(1.0, 0.5, 2, 3, start_epoch=1, end_epoch=3, staircase=False, steps_per_epoch=4) \
        == pytest.approx(0.5 ** 1.75)
    assert schedule_lr(1.0, 0.5, 3, 0, start_epoch=1, end_epoch=3, staircase=False, steps_per_epoch=4) is None
