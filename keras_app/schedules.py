"""Pure schedule functions: batch-size control stages and the learning rate (warm-up, linear scaling, decay).

Everything here is a plain function of its arguments (no TensorFlow, no state), so the value at any step
is exact and the same after a resume. Sources: batch-size control, Mikami et al. arXiv 1811.05233 s.3.1;
linear scaling rule and gradual warm-up, Goyal et al. arXiv 1706.02677 s.2.1-2.2; cosine decay,
Loshchilov & Hutter arXiv 1608.03983.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BatchStage", "parse_batch_schedule", "round_batch_schedule", "batch_stages", "global_batch_at", "steps_per_epoch",
           "learning_rate"]


@dataclass(frozen=True)
class BatchStage:
    """Epochs ``[start_epoch, end_epoch)`` trained at ``global_batch`` images per step (summed over ranks)."""
    start_epoch: int
    end_epoch: int
    global_batch: int


def parse_batch_schedule(text: str) -> tuple[tuple[int, int], ...]:
    """Parse ``"EPOCH:GLOBAL_BATCH,..."`` (e.g. ``"0:256,2:512"``) into sorted ``((epoch, batch), ...)``.

    Raises:
        ValueError: an empty string, an item not of the form ``int:int``, a negative epoch, a batch < 1,
            the same epoch twice, or a first stage that does not start at epoch 0. The message names the
            offending text and shows the expected form.
    """
    form = "expected EPOCH:GLOBAL_BATCH[,EPOCH:GLOBAL_BATCH...] starting at epoch 0, e.g. '0:256,2:512'"
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"batch schedule {text!r} is empty: {form}")
    stages = []
    for item in text.split(","):
        parts = item.strip().split(":")
        try:
            epoch, batch = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"batch schedule {text!r}: item {item.strip()!r} is not EPOCH:GLOBAL_BATCH; "
                             f"{form}") from None
        if epoch < 0 or batch < 1:
            raise ValueError(f"batch schedule {text!r}: item {item.strip()!r} needs epoch >= 0 and "
                             f"global batch >= 1; {form}")
        stages.append((epoch, batch))
    stages.sort()
    epochs = [e for e, _ in stages]
    if len(set(epochs)) != len(epochs):
        raise ValueError(f"batch schedule {text!r} names an epoch twice; {form}")
    if epochs[0] != 0:
        raise ValueError(f"batch schedule {text!r} starts at epoch {epochs[0]}; {form}")
    return tuple(stages)


def round_batch_schedule(text: str, world_size: int) -> str:
    """``text`` with each global batch rounded down to a multiple of ``world_size`` (at least
    ``world_size``): ``round_batch_schedule("0:256,1:512", 3) == "0:255,1:510"``. ``text`` itself when
    every batch already is a multiple. The one rounding rule of the app (``make demo NP=N``, run_local.sh,
    the fix that a not-divisible schedule's error proposes). Raises ValueError like
    :func:`parse_batch_schedule`."""
    stages = parse_batch_schedule(text)
    if all(batch % world_size == 0 for _, batch in stages):
        return text
    return ",".join(f"{epoch}:{max(world_size, batch // world_size * world_size)}" for epoch, batch in stages)


def batch_stages(schedule: tuple[tuple[int, int], ...], epochs: int) -> list[BatchStage]:
    """The stages that cover epochs ``[0, epochs)``; stages starting at or after ``epochs`` are dropped."""
    out = []
    for i, (start, batch) in enumerate(schedule):
        end = schedule[i + 1][0] if i + 1 < len(schedule) else epochs
        end = min(end, epochs)
        if start < end:
            out.append(BatchStage(start, end, batch))
    return out


def global_batch_at(schedule: tuple[tuple[int, int], ...], epoch: int) -> int:
    """The global batch used in (0-based) ``epoch``: the last stage that starts at or before it."""
    batch = schedule[0][1]
    for start, b in schedule:
        if start <= epoch:
            batch = b
    return batch


def steps_per_epoch(num_examples: int, global_batch: int) -> int:
    """Optimizer steps in one epoch: ``num_examples // global_batch`` (the remainder is dropped).

    Raises ValueError when the epoch is shorter than one global batch."""
    steps = num_examples // global_batch
    if steps < 1:
        raise ValueError(f"an epoch of {num_examples} examples is smaller than the global batch "
                         f"{global_batch}; lower the batch schedule or raise train_examples")
    return steps


def learning_rate(epoch: float, global_batch: int, *, base_lr: float, base_batch: int,
                  warmup_epochs: float, total_epochs: float, decay: str = "cosine",
                  final_lr_fraction: float = 0.0, warmup_start_fraction: float = 0.0) -> float:
    """Learning rate at fractional epoch ``epoch`` (= epoch index + step / steps_per_epoch).

    ``peak = base_lr * global_batch / base_batch`` (linear scaling rule with the *current* global batch).
    Warm-up, ``epoch < warmup_epochs``: ``peak * (s + (1 - s) * epoch / warmup_epochs)`` with
    ``s = warmup_start_fraction`` (gradual, per step). After it, with ``p = (epoch - warmup_epochs) /
    (total_epochs - warmup_epochs)`` clipped to [0, 1] and ``f = final_lr_fraction``:
    ``cosine``: ``peak * (f + (1 - f) * (1 + cos(pi p)) / 2)``; ``linear``: ``peak * (1 - (1 - f) p)``;
    ``constant``: ``peak``.

    Example: ``learning_rate(0.5, 512, base_lr=0.1, base_batch=256, warmup_epochs=1, total_epochs=3)``
    is ``0.1 * 2 * 0.5 = 0.1``.
    """
    peak = base_lr * global_batch / base_batch
    if warmup_epochs > 0 and epoch < warmup_epochs:
        s = warmup_start_fraction
        return peak * (s + (1.0 - s) * epoch / warmup_epochs)
    span = total_epochs - warmup_epochs
    p = 1.0 if span <= 0 else min(1.0, max(0.0, (epoch - warmup_epochs) / span))
    f = final_lr_fraction
    if decay == "cosine":
        return peak * (f + (1.0 - f) * 0.5 * (1.0 + math.cos(math.pi * p)))
    if decay == "linear":
        return peak * (1.0 - (1.0 - f) * p)
    if decay == "constant":
        return peak
    raise ValueError(f"decay={decay!r} is not one of 'cosine', 'linear', 'constant'")
