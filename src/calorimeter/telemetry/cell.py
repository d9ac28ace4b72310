"""Telemetry of one cell attempt: the node sampler started by local rank 0 around the whole attempt."""

from __future__ import annotations

import logging
from typing import Any

from calorimeter.plan.settings import TelemetrySettings
from calorimeter.records.atomic import write_atomic
from calorimeter.records.paths import RunPaths
from calorimeter.telemetry.process import start_node_sampler

log = logging.getLogger(__name__)


def start_cell_sampler(run: RunPaths, node: int, local_rank: int, settings: TelemetrySettings) -> Any | None:
    """Start the node sampler on local rank 0 (None on other ranks or with telemetry disabled).

    Args:
        run: the run's folder in the attempt's staging folder.
        node: node index of this rank.
        local_rank: local rank on the node.
        settings: the sweep's telemetry settings (``enabled``, ``period_ms``).
    """
    if local_rank != 0 or not settings.enabled:
        return None

    try:
        return start_node_sampler(run.node(node), period_s=settings.period_s,
                                  label=f"node{node}")
    except Exception as e:  # noqa: BLE001 - a failed sampler must not fail the measurement; the record says why
        log.warning("telemetry sampler did not start on node %d: %s", node, e)
        run.node(node).mkdir(parents=True, exist_ok=True)
        text = f"{type(e).__name__}: {e}\n"
        write_atomic(run.sampler_failed(node), lambda tmp: tmp.write_text(text))
        return None


def stop_cell_sampler(sampler: Any | None) -> None:
    """Stop a sampler started by :func:`start_cell_sampler` (no-op for None)."""
    if sampler is not None:
        sampler.stop()
