"""Real torch / safetensors checkpoints, written by the tests themselves."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from conftest import validate
from torch import nn


def verify_json(*args: str) -> tuple[int, dict]:
    """`ray-doctor verify-checkpoint --format json ...`: exit code and the validated report."""
    proc = subprocess.run(
        [sys.executable, "-m", "ray_doctor", "verify-checkpoint", "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, validate(json.loads(proc.stdout))


def rules_of(report: dict) -> list[str]:
    return [f["rule"] for f in report["findings"]]


class Net(nn.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, 2)


def trained_state(hidden: int = 8) -> dict:
    """A model and Adam optimizer after one real step: what a training loop saves."""
    torch.manual_seed(0)
    model = Net(hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = model.fc2(model.bn(model.fc1(torch.randn(16, 4)))).pow(2).mean()
    loss.backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}
