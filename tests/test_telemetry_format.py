"""Stream file format: round trip, torn tail, tidy Parquet conversion, legacy column names, host parsing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from calorimeter.records.legacy import upgrade_samples
from calorimeter.telemetry import ChunkedStreamWriter, convert_node, read_stream
from calorimeter.telemetry.host import HostReader, cpu_util_pct, parse_proc_stat_cpu
from calorimeter.telemetry.metadata import UnavailableRegistry
from calorimeter.telemetry.schema import GPU_SCHEMA

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def _gpu_row(i: int, gpu: int) -> dict:
    return {
        "time_s": 100.0 + i * 0.05, "monotonic_s": i * 0.05, "gpu_index": gpu, "read_s": 1e-4,
        "power_instant_w": 500.0 + gpu, "energy_millijoule": 2**32 - 50_000 + i * 25_000,
        "clock_event_reasons": 0x4 if i % 2 else 0x24, "nvlink_tx_kib": (2**32 - 2 + i) % 2**32,
    }  # fmt: skip


def test_round_trip_and_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "gpu-s.arrows"
    w = ChunkedStreamWriter(path, GPU_SCHEMA, flush_interval_s=0.5)
    for i in range(3):
        for g in range(2):
            w.append(_gpu_row(i, g))
    w.flush()
    for i in range(3, 6):
        for g in range(2):
            w.append(_gpu_row(i, g))
    w.flush()
    full = path.read_bytes()
    r = read_stream(path)
    assert r.n_batches == 2 and r.table.num_rows == 12 and not r.complete  # no EOS yet
    assert r.table.schema == GPU_SCHEMA
    assert r.table.column("hbm_temp_c").null_count == 12  # missing is null, never -1
    # cut inside the second batch: the first batch survives
    path.write_bytes(full[:-30])
    r = read_stream(path)
    assert r.n_batches == 1 and r.table.num_rows == 6 and "truncated" in (r.error or "")
    path.write_bytes(full)
    w.close()
    r = read_stream(path)
    assert r.complete and r.table.num_rows == 12 and r.error is None
    # only a partial schema message: empty table with the given schema
    path.write_bytes(full[:5])
    r = read_stream(path, GPU_SCHEMA)
    assert r.table.num_rows == 0 and r.table.schema == GPU_SCHEMA


def test_convert_node_unwraps_counters(tmp_path: Path) -> None:
    with ChunkedStreamWriter(tmp_path / "gpu-a.arrows", GPU_SCHEMA) as w:
        for i in range(6):
            for g in range(2):
                w.append(_gpu_row(i, g))
    rep = convert_node(tmp_path, node="n0")
    df = pd.read_parquet(rep["telemetry"])
    assert len(df) == 12 and set(df["node"]) == {"n0"}
    g0 = df[df["gpu_index"] == 0]
    # the energy counter is 64-bit: no wrap, 25 J per sample, counted from the first reading; raw readings kept
    assert g0["energy_j"].tolist() == pytest.approx([25.0 * i for i in range(6)])
    assert g0["energy_millijoule_raw"].tolist()[0] == 2**32 - 50_000 and "energy_millijoule" not in df
    # nvlink_tx_kib wraps at 2**32 after 2 samples (2**32-2, 2**32-1, 0, 1, ...): +1 KiB each sample; its all-ones
    # reading 2**32-1 is NVML's "not available" for a 32-bit counter: dropped, never a wrap or an increase
    got = g0["nvlink_tx_bytes"].tolist()
    assert np.isnan(got[1]) and [got[0], *got[2:]] == pytest.approx([0.0, 2048.0, 3072.0, 4096.0, 5120.0])
    assert g0["nvlink_tx_kib_raw"].tolist()[:3] == [2**32 - 2, 2**32 - 1, 0]
    assert g0["reason_sw_power_cap"].all() and g0["reason_sw_thermal_slowdown"].tolist() == [True, False] * 3
    assert g0["hbm_temp_c"].isna().all()
    assert str(df["clock_event_reasons"].dtype) == "UInt64"


def test_convert_reads_streams_written_under_old_column_names(tmp_path: Path) -> None:
    """Streams of the shipped records say ``energy_mj`` and ``power_avg_w``: they convert under today's names."""
    old = pa.schema([f if f.name not in ("energy_millijoule", "power_driver_avg_w") else
                     pa.field({"energy_millijoule": "energy_mj", "power_driver_avg_w": "power_avg_w"}[f.name], f.type)
                     for f in GPU_SCHEMA])
    with ChunkedStreamWriter(tmp_path / "gpu-old.arrows", old) as w:
        for i in range(4):
            w.append({**{k: v for k, v in _gpu_row(i, 0).items() if k != "energy_millijoule"},
                      "energy_mj": 1000 + 500 * i, "power_avg_w": 400.0})
    df = pd.read_parquet(convert_node(tmp_path, node="n0")["telemetry"])
    assert df["energy_j"].tolist() == pytest.approx([0.0, 0.5, 1.0, 1.5])
    assert (df["power_driver_avg_w"] == 400.0).all() and "power_avg_w" not in df and "energy_mj" not in df
    assert set(df["sampler_label"]) == {"old"}  # the stream's file-name part, gpu-<label>.arrows


def test_shipped_samples_name_their_sampler_run_under_todays_column() -> None:
    """Records converted before the rename carry the sampler run's file-name part as ``session``: every reader
    (through :func:`upgrade_samples`) sees it as ``sampler_label``."""
    shipped = next(iter(sorted(REFERENCE.glob("h200x2-thermal-soak-2026-11-28/*/cells/*/telemetry.parquet"))))
    raw = pd.read_parquet(shipped)
    assert "session" in raw and "sampler_label" not in raw
    df = upgrade_samples(raw)
    assert "session" not in df and df["sampler_label"].tolist() == raw["session"].tolist()


def test_host_reader_on_fake_tree(tmp_path: Path) -> None:
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    (proc / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    z = sys_ / "class/thermal/thermal_zone0"
    z.mkdir(parents=True)
    (z / "type").write_text("x86_pkg_temp\n")
    (z / "temp").write_text("45500\n")
    rapl = sys_ / "class/powercap/intel-rapl:0"
    rapl.mkdir(parents=True)
    (rapl / "name").write_text("package-0\n")
    (rapl / "energy_uj").write_text("123\n")
    (rapl / "max_energy_range_uj").write_text("262143328850\n")
    ib = sys_ / "class/infiniband/mlx5_0/ports/1/counters"
    ib.mkdir(parents=True)
    (ib / "port_xmit_data").write_text("1000\n")
    (ib / "port_rcv_data").write_text("10\n")
    reg = UnavailableRegistry()
    h = HostReader(proc_root=proc, sys_root=sys_)
    h.probe(reg)
    assert reg.entries == {}
    # busy = user+nice+system+irq+softirq+steal = 150, total = 1000; then +60 busy (15 of it stolen), +100 total
    (proc / "stat").write_text("cpu  130 0 65 830 60 0 0 15 0 0\n")
    vals = {(m, s): v for m, s, v in h.read()}
    assert vals[("cpu_util_pct", "all")] == pytest.approx(60.0)
    assert vals[("cpu_steal_pct", "all")] == pytest.approx(15.0)
    assert vals[("cpu_temp_c", "thermal_zone0:x86_pkg_temp")] == pytest.approx(45.5)
    assert vals[("rapl_energy_uj", "intel-rapl:0:package-0")] == 123.0
    assert vals[("ib_tx_bytes", "mlx5_0/1")] == 4000.0 and vals[("ib_rx_bytes", "mlx5_0/1")] == 40.0
    assert h.info["rapl_max_energy_range_uj"] == {"intel-rapl:0:package-0": 262143328850.0}
    assert parse_proc_stat_cpu("cpu  1 1 1 1\n") == (3, 4, 0)
    assert parse_proc_stat_cpu("cpu  1 1 1 1 0 0 0 2\n") == (5, 6, 2)
    assert cpu_util_pct((5, 10), (5, 10)) is None


def test_host_reader_reports_missing(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    reg = UnavailableRegistry()
    HostReader(proc_root=tmp_path / "proc", sys_root=tmp_path / "sys").probe(reg)
    metrics = {m for m, _ in reg.entries}
    assert metrics == {"cpu_util_pct", "cpu_temp_c", "rapl_energy_uj", "ib_tx_bytes", "ib_rx_bytes"}
    assert "RAPL" in reg.entries[("rapl_energy_uj", "host")]


def test_schema_has_units() -> None:
    units = ("_s", "_ns", "_w", "_c", "_mhz", "_pct", "_millijoule", "_bytes", "_kib", "reasons", "gpu_index")
    assert all(name.endswith(units) for name in GPU_SCHEMA.names)
    assert GPU_SCHEMA.field("energy_millijoule").type == pa.uint64()
    assert not [n for n in GPU_SCHEMA.names if n.endswith("_mj")]  # mJ and MJ read alike: never abbreviated
