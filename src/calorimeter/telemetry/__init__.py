"""Node telemetry: a per-node GPU/host sampler, its crash-tolerant streams, and their analysis.

See ``docs/telemetry.md`` for the file formats, columns and units.
"""

from calorimeter.telemetry.convert import (
    convert_node,
    load_gpu_samples,
    load_host_samples,
    tidy_gpu_samples,
    tidy_host_samples,
)
from calorimeter.telemetry.counters import counter_deltas, infer_counter_width, unwrap_counter
from calorimeter.telemetry.energy import (
    EnergyCrossCheck,
    counter_delta,
    counter_energy_j,
    cross_check_energy,
    integrate,
    relative_difference,
    time_weighted_mean,
    trapezoid_energy_j,
)
from calorimeter.telemetry.kernels import (
    CATEGORIES,
    COMM_CATEGORIES,
    KernelBreakdown,
    KernelEvent,
    breakdown_traces,
    categorize_kernel,
    kernel_breakdown,
    kernel_events,
    kernel_table,
    load_trace,
    merge_intervals,
    uncovered_length,
    union_length,
)
from calorimeter.telemetry.markers import PHASES, StepMarker, read_step_markers
from calorimeter.telemetry.process import NodeSampler, local_rank, maybe_start_node_sampler, start_node_sampler
from calorimeter.telemetry.reasons import (
    CLOCK_EVENT_REASON_BITS,
    REASON_NAMES,
    decode_clock_event_reasons,
    reason_flags,
    reason_fractions,
)
from calorimeter.telemetry.sampler import SamplerConfig, SessionPaths, run_sampler
from calorimeter.telemetry.streamio import ChunkedStreamWriter, StreamRead, read_stream
from calorimeter.telemetry.windows import (
    assign_windows,
    cut_telemetry,
    phase_windows,
    step_windows,
    window_summary,
)
from calorimeter.telemetry.zeus_windows import ZeusEnergyWindows, ZeusWindow

__all__ = [
    "CATEGORIES",
    "CLOCK_EVENT_REASON_BITS",
    "COMM_CATEGORIES",
    "PHASES",
    "REASON_NAMES",
    "ChunkedStreamWriter",
    "EnergyCrossCheck",
    "KernelBreakdown",
    "KernelEvent",
    "NodeSampler",
    "SamplerConfig",
    "SessionPaths",
    "StepMarker",
    "StreamRead",
    "ZeusEnergyWindows",
    "ZeusWindow",
    "assign_windows",
    "breakdown_traces",
    "categorize_kernel",
    "convert_node",
    "counter_delta",
    "counter_deltas",
    "counter_energy_j",
    "cross_check_energy",
    "cut_telemetry",
    "decode_clock_event_reasons",
    "infer_counter_width",
    "integrate",
    "kernel_breakdown",
    "kernel_events",
    "kernel_table",
    "load_gpu_samples",
    "load_host_samples",
    "load_trace",
    "local_rank",
    "maybe_start_node_sampler",
    "merge_intervals",
    "phase_windows",
    "read_step_markers",
    "read_stream",
    "reason_flags",
    "reason_fractions",
    "relative_difference",
    "run_sampler",
    "start_node_sampler",
    "step_windows",
    "tidy_gpu_samples",
    "tidy_host_samples",
    "time_weighted_mean",
    "trapezoid_energy_j",
    "uncovered_length",
    "union_length",
    "unwrap_counter",
    "window_summary",
]
