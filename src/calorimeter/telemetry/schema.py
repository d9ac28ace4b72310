"""Column definitions of the sampler's Arrow streams (units are part of every name)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from calorimeter.telemetry.reasons import ACCUMULATED_FIELD_NAMES, accumulated_column


@dataclass(frozen=True)
class Column:
    """One sampled GPU metric.

    Attributes:
        name: Column name (unit suffix included).
        type: Arrow type in the stream.
        source: What call produces it (documentation only).
        counter_bits: For cumulative counters: wrap width in bits (0 = infer 32/64 from the data);
            None for gauges.
        tidy: For counters: the column of the tidy table that holds the increase since the first reading.
        tidy_scale: For counters: factor from the stream's unit to the tidy column's.
    """

    name: str
    type: pa.DataType
    source: str
    counter_bits: int | None = None
    tidy: str | None = None
    tidy_scale: float = 1.0

    @property
    def raw(self) -> str:
        """For counters: the tidy table's column of the raw readings (``<name>_raw``, UInt64)."""
        return f"{self.name}_raw"


#: Sampled per-GPU metrics, in stream order (after the key columns).
GPU_METRICS: tuple[Column, ...] = (
    Column("power_instant_w", pa.float64(), "zeus get_instant_power_usage (NVML field POWER_INSTANT) / 1000"),
    Column(
        "power_driver_avg_w", pa.float64(), "zeus get_average_power_usage (NVML field POWER_AVERAGE, ~1 s) / 1000"
    ),
    Column(
        "memory_power_driver_avg_w",
        pa.float64(),
        "zeus get_average_memory_power_usage (POWER_AVERAGE, scope MEMORY) / 1000",
    ),
    Column("memory_power_instant_w", pa.float64(), "NVML field POWER_INSTANT, scope MEMORY / 1000"),
    Column("gpu_temp_c", pa.float64(), "zeus get_gpu_temperature (nvmlDeviceGetTemperatureV GPU)"),
    Column("hbm_temp_c", pa.float64(), "NVML field NVML_FI_DEV_MEMORY_TEMP"),
    Column("sm_clock_mhz", pa.float64(), "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"),
    Column("mem_clock_mhz", pa.float64(), "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"),
    Column("gpu_util_pct", pa.float64(), "nvmlDeviceGetUtilizationRates().gpu"),
    Column("mem_util_pct", pa.float64(), "nvmlDeviceGetUtilizationRates().memory"),
    Column("clock_event_reasons", pa.uint64(), "nvmlDeviceGetCurrentClocksEventReasons (or ...ThrottleReasons)"),
    Column(
        "energy_millijoule",
        pa.uint64(),
        "zeus get_total_energy_consumption (nvmlDeviceGetTotalEnergyConsumption), mJ since the driver loaded",
        64,
        "energy_j",
        1e-3,
    ),
    Column("pcie_tx_bytes", pa.uint64(), "NVML field NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 0, "pcie_tx_bytes"),
    Column("pcie_rx_bytes", pa.uint64(), "NVML field NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 0, "pcie_rx_bytes"),
    Column(
        "nvlink_tx_kib", pa.uint64(), "NVML field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (all links)", 0,
        "nvlink_tx_bytes", 1024.0,
    ),
    Column(
        "nvlink_rx_kib", pa.uint64(), "NVML field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX (all links)", 0,
        "nvlink_rx_bytes", 1024.0,
    ),
    Column("power_limit_w", pa.float64(), "nvmlDeviceGetEnforcedPowerLimit / 1000"),
    *(
        Column(
            accumulated_column(reason), pa.uint64(), f"NVML field {field} (ns since the driver loaded)", 64,
            accumulated_column(reason),
        )
        for reason, field in ACCUMULATED_FIELD_NAMES.items()
    ),
)

GPU_METRIC_NAMES: tuple[str, ...] = tuple(c.name for c in GPU_METRICS)

#: The cumulative counters among them (energy, PCIe and NVLink bytes, accumulated throttle time).
GPU_COUNTERS: tuple[Column, ...] = tuple(c for c in GPU_METRICS if c.counter_bits is not None)

#: Key columns of every GPU row.
GPU_KEY_FIELDS: tuple[pa.Field, ...] = (
    pa.field("time_s", pa.float64(), nullable=False),
    pa.field("monotonic_s", pa.float64(), nullable=False),
    pa.field("gpu_index", pa.int32(), nullable=False),
    pa.field("read_s", pa.float64(), nullable=False),
)

#: Schema of ``gpu-<label>.arrows``: one row per (sample time, GPU).
GPU_SCHEMA: pa.Schema = pa.schema(list(GPU_KEY_FIELDS) + [pa.field(c.name, c.type) for c in GPU_METRICS])

#: Schema of ``host-<label>.arrows``: long format, one row per (sample time, metric, source).
HOST_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("time_s", pa.float64(), nullable=False),
        pa.field("monotonic_s", pa.float64(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("value", pa.float64()),
    ]
)

#: Host metric names (``metric`` column of the host stream).
HOST_METRICS: tuple[str, ...] = (
    "cpu_util_pct",  # /proc/stat, busy share of all CPUs since the previous sample (steal counts as busy)
    "cpu_steal_pct",  # /proc/stat, share of all CPUs stolen by the hypervisor since the previous sample
    "cpu_temp_c",  # /sys/class/thermal/thermal_zone*/temp or hwmon temp*_input, / 1000
    "rapl_energy_uj",  # /sys/class/powercap/intel-rapl:*/energy_uj (cumulative, wraps at max_energy_range_uj)
    "ib_tx_bytes",  # /sys/class/infiniband/<dev>/ports/<p>/counters/port_xmit_data * 4 (cumulative)
    "ib_rx_bytes",  # .../port_rcv_data * 4 (cumulative)
    "sampler_loop_s",  # wall time of one sampling iteration (all GPUs + host), source "sampler"
    "sampler_gpu_read_s",  # time to read every GPU in one iteration, source "sampler"
)
