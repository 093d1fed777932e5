"""The resume gate's round trip: save a checkpoint, optionally break it on
purpose, reload it in a NEW process with ``weights_only=True``, compare."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch


def break_checkpoint(path: Path, checkpoint: dict[str, Any], how: str | None) -> None:
    """Damage the saved file the way ``how`` says (None leaves it whole)."""
    if how == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "drop_optimizer":
        torch.save({k: v for k, v in checkpoint.items() if k != "optimizer"}, path)


def weight_sums(state: dict[str, torch.Tensor]) -> dict[str, float]:
    """A cheap fingerprint of each floating tensor."""
    return {k: float(v.double().sum()) for k, v in state.items() if v.is_floating_point()}


# Runs in a fresh interpreter: only torch, never pickled code (weights_only=True).
_CHILD = """
import json, sys, torch
path, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    ck = torch.load(path, map_location="cpu", weights_only=True)
    missing = [k for k in ("model", "optimizer", "step", "rng") if k not in ck]
    if missing:
        raise KeyError(f"checkpoint lacks {missing}")
    torch.set_rng_state(ck["rng"]["torch"])
    sampler = torch.Generator()
    sampler.set_state(ck["rng"]["sampler"])
    print(json.dumps({
        "step": int(ck["step"]),
        "lr": float(ck["optimizer"]["param_groups"][0]["lr"]),
        "next_batch": torch.randperm(n, generator=sampler)[:batch].tolist(),
        "torch_draw": float(torch.rand(1)),
        "sums": {k: float(v.double().sum()) for k, v in ck["model"].items()
                 if v.is_floating_point()},
        "optimizer_states": len(ck["optimizer"]["state"]),
    }))
except Exception as exc:
    print(json.dumps({"error": f"reload failed: {type(exc).__name__}: {exc}"[:300]}))
"""


def reload_elsewhere(path: Path, n: int, batch: int) -> dict[str, Any]:
    """What a fresh interpreter reads back from ``path`` (or an ``error``)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(n), str(batch)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        return {"error": f"reload process failed (exit {proc.returncode}): {proc.stderr[-300:]}"}


def compare_reload(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Every difference between what was saved and what came back."""
    problems = [
        f"{key}: saved {expected[key]!r:.60}, reloaded {got[key]!r:.60}"
        for key in ("step", "lr", "next_batch", "torch_draw", "optimizer_states")
        if expected[key] != got[key]
    ]
    bad = [
        k
        for k, v in expected["sums"].items()
        if not math.isclose(v, got["sums"].get(k, math.nan), rel_tol=1e-9, abs_tol=1e-9)
    ]
    if bad:
        problems.append(f"weights differ after reload: {bad[:3]}")
    return problems
