"""Pure learning-rate schedule functions behind the LR callbacks (Goyal et al. 2017, Horovod's callbacks).

Epochs are fractional: epoch ``e`` batch ``b`` of ``steps_per_epoch`` s is ``e + b / s``.
"""
from __future__ import annotations

__all__ = ["schedule_lr", "warmup_multiplier"]


def warmup_multiplier(epoch: float, size: int, warmup_epochs: float, steps_per_epoch: int) -> float:
    """Horovod's gradual warm-up factor: from about 1/size at the first batch to exactly 1 at the last
    batch of epoch ``warmup_epochs - 1``::

        m(e) = 1/size * ((e + 1/steps_per_epoch) * (size - 1) / warmup_epochs + 1)

    The ``1/steps_per_epoch`` shift makes the factor reach 1 on the last warm-up batch (Horovod's rule).
    """
    if size < 1 or warmup_epochs <= 0 or steps_per_epoch < 1:
        raise ValueError(f"size={size}, warmup_epochs={warmup_epochs}, steps_per_epoch={steps_per_epoch}: "
                         f"need size >= 1, warmup_epochs > 0, steps_per_epoch >= 1")
    e = epoch + 1.0 / steps_per_epoch
    return 1.0 / size * (e * (size - 1) / warmup_epochs + 1)


def schedule_lr(initial_lr: float, multiplier, epoch: int, batch: int, *, start_epoch: int = 0,
                end_epoch: int | None = None, staircase: bool = True,
                steps_per_epoch: int | None = None) -> float | None:
    """Learning rate set before batch ``batch`` of epoch ``epoch``, or None when it is left unchanged.

    ``multiplier`` is a float m (then the factor is ``m ** (epoch - start_epoch)``) or a function of the
    (fractional, when not staircase) epoch. Inside ``[start_epoch, end_epoch)``: with ``staircase`` the
    rate changes at batch 0 only, to ``initial_lr * multiplier(epoch)``; without it, at every batch, to
    ``initial_lr * multiplier(epoch + batch / steps_per_epoch)``.
    """
    if epoch < start_epoch or (end_epoch is not None and epoch >= end_epoch):
        return None
    fn = multiplier if callable(multiplier) else (lambda e: multiplier ** (e - start_epoch))
    if staircase:
        return initial_lr * fn(epoch) if batch == 0 else None
    if not steps_per_epoch:
        raise ValueError("staircase=False needs steps_per_epoch")
    return initial_lr * fn(epoch + float(batch) / steps_per_epoch)
