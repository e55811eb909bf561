"""Exact values of the pure schedules and of the per-step learning rate across a batch change and a resume."""

import pytest

from keras_app.schedules import (batch_stages, global_batch_at, learning_rate, parse_batch_schedule,
                                 steps_per_epoch)


def test_parse_and_stages():
    s = parse_batch_schedule("2:512, 0:256")
    assert s == ((0, 256), (2, 512))
    assert [(st.start_epoch, st.end_epoch, st.global_batch) for st in batch_stages(s, 5)] == \
        [(0, 2, 256), (2, 5, 512)]
    assert [(st.start_epoch, st.end_epoch) for st in batch_stages(s, 1)] == [(0, 1)]
    assert [global_batch_at(s, e) for e in range(4)] == [256, 256, 512, 512]
    assert steps_per_epoch(60000, 512) == 117


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("0:256,2", "'2' is not EPOCH:GLOBAL_BATCH"), ("0:256,a:512", "'a:512'"),
    ("1:256", "starts at epoch 1"), ("0:256,0:512", "epoch twice"), ("0:0", "global batch >= 1"),
    ("0:256;2:512", "is not EPOCH:GLOBAL_BATCH")])
def test_malformed_schedule(text, words):
    with pytest.raises(ValueError, match="batch schedule") as err:
        parse_batch_schedule(text)
    assert words in str(err.value) and "0:256,2:512" in str(err.value)


def test_epoch_smaller_than_batch():
    with pytest.raises(ValueError, match="smaller than the global batch 512"):
        steps_per_epoch(100, 512)


def test_learning_rate_values():
    kw = dict(base_lr=0.1, base_batch=256, warmup_epochs=2, total_epochs=6)
    assert learning_rate(0.0, 256, **kw) == 0.0
    assert learning_rate(0.5, 512, **kw) == pytest.approx(0.05)          # 0.2 * 0.5 / 2
    assert learning_rate(2.0, 512, **kw) == pytest.approx(0.2)           # peak, cosine start
    assert learning_rate(4.0, 512, **kw) == pytest.approx(0.1)           # half way down
    assert learning_rate(6.0, 512, **kw) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(4.0, 512, **kw, decay="linear") == pytest.approx(0.1)
    assert learning_rate(5.0, 256, **kw, decay="constant") == pytest.approx(0.1)
    assert learning_rate(1.0, 256, **kw, warmup_start_fraction=0.5) == pytest.approx(0.075)
    with pytest.raises(ValueError, match="decay='step'"):
        learning_rate(3.0, 256, **kw, decay="step")
