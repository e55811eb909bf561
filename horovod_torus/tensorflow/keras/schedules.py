"""Pure learning-rate schedule functions behind the LR callbacks (Goyal et al. 2017, Horovod's callbacks).

Epochs are fractional: epoch ``e`` batch ``b`` of ``steps_per_epoch`` s is ``e + b / s``.
"""
from __future__ import annotations

__all__ = ["schedule_lr", "warmup_multiplier"]


def warmup_multiplier(epoch: float, size: int, warmup_epochs: float, steps_per_epoch: int) -> float:
    """Horovod's gradual warm-up factor: from about 1/size at the first batch to exactly 1 at the last
    batch before fractional epoch ``warmup_epochs``, and 1 from there on::

        m(e) = min(1, 1/size * ((e + 1/steps_per_epoch) * (size - 1) / warmup_epochs + 1))

    The ``1/steps_per_epoch`` shift makes the factor reach 1 on the last warm-up batch (Horovod's rule).
    ``warmup_epochs`` may be fractional (0.5: half an epoch); the factor never exceeds 1, and is exactly
    1.0 once ``e + 1/steps_per_epoch`` reaches ``warmup_epochs`` (to within float rounding: 1e-9 epochs).
    """
    if size < 1 or warmup_epochs <= 0 or steps_per_epoch < 1:
        raise ValueError(f"size={size}, warmup_epochs={warmup_epochs}, steps_per_epoch={steps_per_epoch}: "
                         f"need size >= 1, warmup_epochs > 0, steps_per_epoch >= 1")
    e = epoch + 1.0 / steps_per_epoch
    if e >= warmup_epochs - 1e-9:
        return 1.0
    return min(1.0, 1.0 / size * (e * (size - 1) / warmup_epochs + 1))


def schedule_lr(initial_lr: float, multiplier, epoch: int, batch: int, *, start_epoch: int = 0,
                end_epoch: int | None = None, staircase: bool = True,
                steps_per_epoch: int | None = None) -> float | None:
    """Learning rate set before batch ``batch`` of epoch ``epoch``, or None when it is left unchanged.

    ``multiplier`` is a float m (then the factor is ``m ** (epoch - start_epoch)``) or a function of the
    (fractional, when not staircase) epoch. Inside ``[start_epoch, end_epoch)``: with ``staircase`` the
    rate changes at batch 0 only, to ``initial_lr * multiplier(epoch)``; without it, at every batch, to
    ``initial_lr * multiplier(epoch + batch / steps_per_epoch)``, and the window is tested on that
    fractional epoch, so a fractional ``end_epoch`` (e.g. 0.5) ends the changes mid-epoch (for integer
    bounds both tests agree).
    """
    if not staircase and not steps_per_epoch:
        raise ValueError("staircase=False needs steps_per_epoch")
    at = epoch if staircase else epoch + float(batch) / steps_per_epoch
    if at < start_epoch or (end_epoch is not None and at >= end_epoch):
        return None
    fn = multiplier if callable(multiplier) else (lambda e: multiplier ** (e - start_epoch))
    if staircase:
        return initial_lr * fn(epoch) if batch == 0 else None
    return initial_lr * fn(at)
