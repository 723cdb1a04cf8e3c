"""The collective stage's rank attribution: PyTorch Flight Recorder in every worker.

`WORKER_ENV` turns Flight Recorder on in the stage's workers (a ring buffer of each rank's
collectives). When a rank's allreduce fails or times out, the probe dumps that buffer on
demand (JSON) and pushes it to the collector, so dumps from every node reach the driver.
`attribute_failure` reads them with inspect's own reader and analysis and puts the answer
(which rank never arrived, which disagreed) first in a failed stage.
"""

from __future__ import annotations

import json
from typing import Any

from ray_doctor.collectives import attribute
from ray_doctor.model import CollectiveEvidence, RankDump
from ray_doctor.rules.collective_desync import describe, evidence_of, fix_for
from ray_doctor.scan._flight_recorder import from_json
from ray_doctor.smoke._findings import finding
from ray_doctor.smoke._model import StageResult, StageStatus

# TORCH_FR_BUFFER_SIZE (TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.6) is read when the first
# process group is made, so it must be in the workers' environment before Train starts them.
# NCCL also dumps on its watchdog's timeout, next to the worker (node-local files).
WORKER_ENV = {
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
}
DUMP_KEY = "fr:"  # collector key prefix: "fr:<rank>" holds that rank's JSON dump


def _dumps(values: dict[str, Any]) -> list[RankDump]:
    dumps = []
    for key, text in values.items():
        if not key.startswith(DUMP_KEY) or not isinstance(text, str):
            continue
        rank = key[len(DUMP_KEY) :]
        try:
            parsed = from_json(json.loads(text), f"rank {rank} Flight Recorder dump", rank)
        except ValueError:
            continue
        if isinstance(parsed, RankDump):
            dumps.append(parsed)
    return dumps


def attribute_failure(result: StageResult, values: dict[str, Any]) -> StageResult:
    """A failed collective stage, with the rank attribution the dumps allow put first."""
    if result.status != StageStatus.FAIL:
        return result
    dumps = _dumps(values)
    result.details["flight_recorder_dumps"] = sorted(d.rank for d in dumps if d.rank is not None)
    if not dumps:
        return result
    answer = attribute(CollectiveEvidence(dumps=dumps))
    if answer.call is None and not answer.found:
        return result
    message = describe(answer)
    result.message = f"{message} {result.message}"
    result.findings.insert(
        0, finding("collective-desync", message, fix_for(answer), evidence_of(answer))
    )
    return result
