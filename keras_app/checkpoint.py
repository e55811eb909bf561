"""Atomic, verified checkpoints of a Keras model, its optimizer state and the run's history.

A checkpoint is a folder ``OUTPUT_DIR/checkpoints/ckpt-EEEE`` (EEEE = epochs completed) holding
``model.weights.h5`` (Keras weights), ``optimizer.npz`` (every variable of the optimizer ``fit`` uses,
iterations included; with mixed_float16 that is the LossScaleOptimizer with its loss scale and the inner
optimizer's slots) and ``state.json`` (epoch, history, the optimizer variables' names in the npz order,
SHA-256 of the two data files). Optimizer variables are restored by name
(:func:`optimizer_variable_names`). It is written into a temporary
folder and renamed into place, so a crash mid-write never touches an earlier checkpoint; a damaged
checkpoint is detected by its checksums and reported, never silently skipped.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

import numpy as np

__all__ = ["CheckpointError", "CheckpointStore", "optimizer_variable_names"]

_NAME = re.compile(r"^ckpt-(\d{4,})$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be restored (damaged, or made for another model/optimizer)."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def optimizer_variable_names(optimizer, model_variables=()) -> list[str]:
    """Stable names of ``optimizer.variables``, the keys a checkpoint restores them by.

    A variable's path ``OPTIMIZER/REST`` becomes ``ROLE/REST`` with ROLE = ``optimizer`` (the optimizer
    itself) or ``inner_optimizer`` (the optimizer a LossScaleOptimizer wraps), and a slot variable named
    after a model variable (``conv1_conv_kernel_momentum``) becomes ``var<j>/momentum``, j = that variable's
    index in ``model_variables`` (the model's trainable variables): Keras numbers optimizer and unnamed
    layer names per process (``adam``/``adam_1``, ``dense``/``dense_1``), the roles and indices do not
    change. E.g. ``optimizer/dynamic_scale``, ``inner_optimizer/iteration``, ``inner_optimizer/var0/momentum``.

    Raises ValueError when two variables get the same name."""
    roles = {optimizer.name: "optimizer"}
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        roles[inner.name] = "inner_optimizer"
    prefixes = sorted(((v.path.replace("/", "_") + "_", j) for j, v in enumerate(model_variables)),
                      key=lambda pj: -len(pj[0]))
    names = []
    for v in optimizer.variables:
        parts, role = v.path.split("/"), None
        while len(parts) > 1 and parts[0] in roles:   # "loss_scale_optimizer/sgd/x_momentum": inner's
            role = roles[parts.pop(0)]
        if role is None:
            names.append(v.path)
            continue
        rest = "/".join(parts)
        for prefix, j in prefixes:
            if rest.startswith(prefix) and len(rest) > len(prefix):
                rest = f"var{j}/{rest[len(prefix):]}"
                break
        names.append(f"{role}/{rest}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"optimizer variables share the names {dup[:5]}: cannot checkpoint them by name")
    return names


class CheckpointStore:
    """Checkpoints under ``directory``; keeps the newest ``keep`` (older ones are deleted after a save)."""

    def __init__(self, directory: str, keep: int = 2):
        if keep < 1:
            raise ValueError(f"keep={keep} must be >= 1")
        self.directory, self.keep = directory, keep

    def epochs(self) -> list[int]:
        """Completed checkpoints (epochs), oldest first; temporary folders are ignored."""
        if not os.path.isdir(self.directory):
            return []
        return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(self.directory)) if m)

    def path(self, epoch: int) -> str:
        return os.path.join(self.directory, f"ckpt-{epoch:04d}")

    def save(self, epoch: int, model, optimizer, state: dict) -> str:
        """Write checkpoint ``epoch`` atomically; returns its path. ``state`` must be JSON-serialisable."""
        os.makedirs(self.directory, exist_ok=True)
        final = self.path(epoch)
        tmp = f"{final}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            model.save_weights(os.path.join(tmp, "model.weights.h5"))
            names = optimizer_variable_names(optimizer, model.trainable_variables)
            arrays = {f"v{i:05d}": np.asarray(v.numpy()) for i, v in enumerate(optimizer.variables)}
            np.savez(os.path.join(tmp, "optimizer.npz"), **arrays)
            meta = {"epoch": epoch, "state": state, "optimizer_variables": names,
                    "sha256": {f: _sha256(os.path.join(tmp, f)) for f in ("model.weights.h5", "optimizer.npz")}}
            with open(os.path.join(tmp, "state.json"), "w") as fh:
                json.dump(meta, fh)
            if os.path.exists(final):          # re-saving an epoch (e.g. after a resume): swap atomically
                old = f"{final}.old-{os.getpid()}"
                os.rename(final, old)
                os.rename(tmp, final)
                shutil.rmtree(old)
            else:
                os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for old_epoch in self.epochs()[:-self.keep]:
            shutil.rmtree(self.path(old_epoch), ignore_errors=True)
        return final

    def _fix(self, epoch: int) -> str:
        path, others = self.path(epoch), [e for e in self.epochs() if e != epoch]
        return (f"delete {path} to resume from {self.path(others[-1])}" if others else
                f"delete {path} (or start without --resume)")

    def verify(self, epoch: int) -> dict:
        """Checkpoint ``epoch``'s ``state.json`` (dict), after checking every file against its SHA-256 there
        (no model needed: the app checks the checkpoint it will resume from before training starts).
        Raises CheckpointError naming the folder, what is wrong, and the fix."""
        path = self.path(epoch)
        try:
            with open(os.path.join(path, "state.json")) as fh:
                meta = json.load(fh)
            for name, digest in meta["sha256"].items():
                if _sha256(os.path.join(path, name)) != digest:
                    raise CheckpointError(f"{name} does not match its SHA-256 in state.json")
        except (OSError, ValueError, KeyError, TypeError, CheckpointError) as err:
            raise CheckpointError(f"checkpoint {path} is damaged ({err}); {self._fix(epoch)}") from err
        return meta

    def restore(self, epoch: int, model, optimizer) -> dict:
        """Load checkpoint ``epoch`` into ``model`` and ``optimizer`` (built here if needed); returns its
        ``state`` dict. Raises CheckpointError naming the folder, what is wrong, and the fix."""
        path, fix = self.path(epoch), self._fix(epoch)
        meta = self.verify(epoch)
        try:
            if not optimizer.built:         # first: Keras loads an optimizer's part of the h5 only if built
                optimizer.build(model.trainable_variables)
            model.load_weights(os.path.join(path, "model.weights.h5"))
            with np.load(os.path.join(path, "optimizer.npz")) as data:
                arrays = [data[k] for k in sorted(data.files)]
            saved_names = meta.get("optimizer_variables")
            if saved_names is None:         # written before names were stored: by position
                if len(arrays) != len(optimizer.variables):
                    raise ValueError(f"{len(arrays)} optimizer variables saved, {len(optimizer.variables)} here")
            else:
                saved = dict(zip(saved_names, arrays))
                names = optimizer_variable_names(optimizer, model.trainable_variables)
                missing = [n for n in names if n not in saved]
                extra = [n for n in saved_names if n not in set(names)]
                if missing or extra:
                    accumulation = any("hvd_" in n for n in missing + extra)
                    raise ValueError(f"optimizer variables differ: not in the checkpoint {missing[:5]}"
                                     f"{' ...' if len(missing) > 5 else ''}, only in the checkpoint {extra[:5]}"
                                     f"{' ...' if len(extra) > 5 else ''} (" + (
                                         "another DistributedOptimizer backward_passes_per_step?" if accumulation
                                         else "another optimizer or mixed-precision policy?") + ")")
                arrays = [saved[n] for n in names]
            for var, arr in zip(optimizer.variables, arrays):
                if tuple(var.shape) != arr.shape:
                    raise ValueError(f"optimizer variable {var.path} has shape {tuple(var.shape)}, "
                                     f"saved {arr.shape}")
                var.assign(arr)
        except (OSError, ValueError) as err:
            raise CheckpointError(f"checkpoint {path} does not fit this model/optimizer ({err}); "
                                  f"use the same config, or {fix}") from err
        return meta["state"]
