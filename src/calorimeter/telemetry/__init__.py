"""Node telemetry: a per-node GPU/host sampler, its crash-tolerant streams, their conversion to tidy tables, and the
kernel breakdown of profiled steps. Windows, averages, energies and data quality are computed in one place,
:mod:`calorimeter.analysis.window`.

See ``docs/telemetry.md`` for the file formats, columns and units.
"""

from calorimeter.telemetry.convert import (
    convert_node,
    load_gpu_samples,
    load_host_samples,
    tidy_gpu_samples,
    tidy_host_samples,
)
from calorimeter.telemetry.counters import CounterTrace, counter_trace, infer_counter_width, unwrap_counter
from calorimeter.telemetry.kernels import (
    CATEGORIES,
    COMM_CATEGORIES,
    KernelBreakdown,
    KernelEvent,
    breakdown_traces,
    categorize_kernel,
    copies_as_comm,
    kernel_breakdown,
    kernel_events,
    kernel_table,
    load_trace,
    merge_intervals,
    uncovered_length,
    union_length,
)
from calorimeter.telemetry.process import NodeSampler, start_node_sampler
from calorimeter.telemetry.reasons import (
    CLOCK_EVENT_REASON_BITS,
    REASON_NAMES,
    decode_clock_event_reasons,
    reason_flags,
)
from calorimeter.telemetry.sampler import SamplerConfig, SamplerPaths, run_sampler
from calorimeter.telemetry.streamio import ChunkedStreamWriter, StreamRead, read_stream

__all__ = [
    "CATEGORIES",
    "CLOCK_EVENT_REASON_BITS",
    "COMM_CATEGORIES",
    "REASON_NAMES",
    "ChunkedStreamWriter",
    "CounterTrace",
    "KernelBreakdown",
    "KernelEvent",
    "NodeSampler",
    "SamplerConfig",
    "SamplerPaths",
    "StreamRead",
    "breakdown_traces",
    "categorize_kernel",
    "copies_as_comm",
    "convert_node",
    "counter_trace",
    "decode_clock_event_reasons",
    "infer_counter_width",
    "kernel_breakdown",
    "kernel_events",
    "kernel_table",
    "load_gpu_samples",
    "load_host_samples",
    "load_trace",
    "merge_intervals",
    "read_stream",
    "reason_flags",
    "run_sampler",
    "start_node_sampler",
    "tidy_gpu_samples",
    "tidy_host_samples",
    "uncovered_length",
    "union_length",
    "unwrap_counter",
]
