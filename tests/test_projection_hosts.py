"""The host speed of a machine in the projection: machines named by their GPUs, a factor per machine on the host
times of the host-bound regime, fitted with them; on synthetic rows and on the committed 2x H200 sets."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT

from calorimeter.plan.cell import Cell
from calorimeter.plan.work import workload
from calorimeter.projection.compute import ComputeRates, fit_host_times, host_features
from calorimeter.projection.hosts import fit_factors
from calorimeter.records.machines import machine_keys


def test_a_machine_is_named_by_the_smallest_uuid_of_the_gpus_its_cells_share() -> None:
    gpus = pd.DataFrame({
        "cell_id": ["a", "a", "b", "c", "c", "d"],
        "node": [0, 0, 0, 0, 0, 0],
        "hostname": ["vm", "vm", "vm", "vm", "vm", "box"],
        "uuid": ["GPU-bbbbbbbb-1", "GPU-aaaaaaaa-2", "GPU-bbbbbbbb-1", "GPU-cccccccc-3", "GPU-dddddddd-4", None],
    })
    assert machine_keys(gpus) == {"a": "GPU-aaaaaaaa", "b": "GPU-aaaaaaaa", "c": "GPU-cccccccc", "d": "box"}
    assert machine_keys(pd.DataFrame(columns=["cell_id"])) == {}


def test_factors_are_geometric_means_shrunk_toward_an_average_machine() -> None:
    import math

    got = fit_factors([math.log(1.2), math.log(1.2), math.log(0.8), math.nan], ["x", "x", "y", None], shrink=0.0)
    # centred on the rows' geometric mean: x twice at 1.2, y once at 0.8
    centre = (2 * math.log(1.2) + math.log(0.8)) / 3
    assert got == {"x": pytest.approx(1.2 / math.exp(centre)), "y": pytest.approx(0.8 / math.exp(centre))}
    shrunk = fit_factors([math.log(1.5)], ["x"], shrink=1.0)  # one row, centred: an only machine is the average
    assert shrunk == {"x": pytest.approx(1.0)}


def test_a_machine_factor_counts_configurations_not_repetitions() -> None:
    import math

    lr = [math.log(1.5)] * 3 + [math.log(1.5), math.log(1.5), 0.0, 0.0, 0.0, 0.0]
    machines = ["x"] * 3 + ["y"] * 2 + ["z"] * 4
    configs = ["a", "a", "a", "a", "b", "a", "b", "c", "d"]
    got = fit_factors(lr, machines, shrink=1.0, configs=configs)
    raw = {"x": math.log(1.5) / 2, "y": 2 * math.log(1.5) / 3, "z": 0.0}  # x: one configuration, three runs
    centre = (3 * raw["x"] + 2 * raw["y"] + 4 * raw["z"]) / 9
    assert got == {m: pytest.approx(math.exp(v - centre)) for m, v in raw.items()}
    # counted as rows, x's three runs of one configuration would weigh more than y's two configurations
    by_rows = fit_factors(lr, machines, shrink=1.0)
    assert by_rows["x"] > by_rows["y"] and got["x"] < got["y"]


def _tp(seq: int, overlap: bool = False) -> Cell:
    return Cell(sweep="t", model="llama3-8b-8l", hardware="h200", nodes=1, gpus_per_node=2, tp=2,
                sequence_parallel=True, seq_len=seq, global_batch=16, micro_batch=1, precision="bf16", overlap=overlap)


def test_a_slower_host_is_found_and_its_launch_floor_scaled() -> None:
    """Host-bound TP rows on two machines, the second's host 1.5x slower on every configuration: the fit puts the
    whole difference in the machines' factors (their ratio 1.5 up to the shrinkage), not in the coefficients, and a
    projection for each machine takes its own floor."""
    true = {"iteration": 0.0, "layer_passes": 2e-3, "z3_calls": 0.0, "tp_calls": 3e-4, "tp_fused_calls": 2e-4,
            "tp_symm_mem_calls": 0.0}
    rates = ComputeRates({}, {}, 0, launch=true)
    rows, busy, machines = [], [], []
    for c in (_tp(1024), _tp(2048), _tp(4096), _tp(2048, overlap=True)):
        st = workload(c).stages[0]
        ov = "ring" if c.overlap else "none"
        for m, k in (("fast", 1.0), ("slow", 1.5)):
            rows.append((c.cell_id, st, k * rates.launch_s(st, ov), ov))
            busy.append(0.3)
            machines.append(m)
    launch, z3_host, factors = fit_host_times(rows, busy, machines)
    assert factors["slow"] / factors["fast"] == pytest.approx(1.5 ** (1 / (1 + 0.25 / 4)), rel=0.02)
    fitted = ComputeRates({}, {}, 0, launch=launch, z3_host=z3_host, host_factor=factors)
    st = rows[0][1]
    assert fitted.launch_s(st, "none", "slow") / fitted.launch_s(st, "none", "fast") == pytest.approx(
        factors["slow"] / factors["fast"])
    assert fitted.launch_s(st, "none", "unknown") == fitted.launch_s(st, "none")  # an average calibrated host
    assert host_features(st)["z3_calls"] == 0 and z3_host == {"z3_calls": 0.0}
    # without machines: one host, no factors
    assert fit_host_times(rows, busy, None)[2] == {}


def test_a_host_bound_moe_cell_times_its_experts_not_the_dense_coefficients() -> None:
    """Host-bound dense TP rows made from known launch coefficients and one host-bound Mixtral TP2xEP2 row whose
    expert loop adds host time per local expert pass: the fit puts that time on the expert-pass coefficient and
    recovers the dense coefficients, so that the dense rows' projected floors do not move (with the MoE row folded into
    the layer and TP coefficients, they moved by tens of percent)."""
    true = {"iteration": 0.0, "layer_passes": 2e-3, "expert_passes": 5e-3, "z3_calls": 0.0, "tp_calls": 3e-4,
            "tp_fused_calls": 2e-4, "tp_symm_mem_calls": 0.0}
    moe = Cell(sweep="t", model="mixtral-8x7b-4l", hardware="h200", nodes=1, gpus_per_node=4, tp=2, ep=2,
               sequence_parallel=True, seq_len=4096, global_batch=32, micro_batch=1, precision="bf16")
    cells = [_tp(512), _tp(1024), _tp(2048), _tp(4096), _tp(8192), _tp(1024, overlap=True), _tp(4096, overlap=True),
             moe]
    rows = []
    for c in cells:
        st = workload(c).stages[0]
        ov = "ring" if c.overlap else "none"
        feats = host_features(st, ov)  # the truth, whatever features the fit knows
        rows.append((c.cell_id, st, sum(v * feats[f] for f, v in true.items()), ov))
    assert host_features(rows[-1][1])["expert_passes"] > 0
    launch, _, _ = fit_host_times(rows, [0.3] * len(rows), None)
    fitted = ComputeRates({}, {}, 0, launch=launch)
    for _, st, t, ov in rows:
        assert fitted.launch_s(st, ov) == pytest.approx(t, rel=1e-6)


def _z3(seq: int, mb: int = 1) -> Cell:
    return Cell(sweep="t", model="llama3-8b-8l", hardware="h200", nodes=1, gpus_per_node=2, zero_stage=3, seq_len=seq,
                global_batch=16, micro_batch=mb, precision="bf16")


def test_gpu_bound_zero3_cells_join_the_host_time_fit_but_not_the_machine_factors() -> None:
    """A host-bound run is one whose host happened to be slow: host-bound ZeRO-3 rows made with 3 ms of host time per
    call (two machines, the second 1.5x slower), GPU-bound ones with 2 ms on a third machine. Without the GPU-bound
    rows the fit finds the host-bound rows' host time; with them it moves toward theirs; the third machine, with no
    host-bound row, gets no factor."""
    from calorimeter.projection.schedule import tandem_idle_s

    def row(c: Cell, h: float, gpu: float) -> tuple[str, object, float, str]:
        st = workload(c).stages[0]
        return c.cell_id, st, gpu + tandem_idle_s(h * host_features(st)["z3_calls"], gpu), "none"

    rows, busy, machines = [], [], []
    for c, gpu in ((_z3(2048), 0.7), (_z3(4096), 1.1)):
        for m, k in (("fast", 1.0), ("slow", 1.5)):
            rows.append(row(c, k * 3e-3, gpu))
            busy.append(gpu)
            machines.append(m)
    gpu_bound = [(*row(c, 2e-3, gpu), gpu, "third") for c, gpu in ((_z3(8192), 2.0), (_z3(2048, mb=4), 0.55))]
    _, alone, f_alone = fit_host_times(rows, busy, machines)
    _, joined, f_joined = fit_host_times(rows, busy, machines, z3_rows=gpu_bound)
    assert f_alone["slow"] / f_alone["fast"] == pytest.approx(1.5 ** (1 / (1 + 0.25 / 2)), rel=0.02)
    mean_factor = (f_alone["slow"] * f_alone["fast"]) ** 0.5
    assert alone["z3_calls"] * mean_factor == pytest.approx(3e-3 * 1.5**0.5, rel=0.05)
    assert 2e-3 < joined["z3_calls"] < alone["z3_calls"] and set(f_joined) == {"fast", "slow"}


def test_the_committed_sets_put_the_2026_11_27_machine_slower_than_the_2026_11_23_one() -> None:
    """TP2+SP overlap off at 2048: 0.718 s on the 2026-11-23 findings machine, 1.073 s on the 2026-11-27 fourth
    machine; its other host-bound configurations 1.2-1.6x slower too. The calibration's factors say so, and a
    host-bound projection names the machine its host speed comes from."""
    from calorimeter.projection.calibration import calibrate
    from calorimeter.projection.measured import load_measured
    from calorimeter.projection.model import Projector

    srcs = ["results/reference/findings-2026-11-23/h200x2-findings",
            "results/reference/hostbound-2026-11-27/h200x2-hostbound-2048",
            "results/reference/hostbound-2026-11-27/h200x2-hostbound-ring"]
    ms = load_measured([str(ROOT / s) for s in srcs])
    old, new = "GPU-6e4fcbbf", "GPU-2c92ad9a"
    assert {old, new} <= set(ms.runs["machine"])
    cal = calibrate(ms, "h200")
    f = cal.compute.host_factor
    assert f[new] / f[old] > 1.2
    cell = ms.cell("llama3-8b-8l_h200-1x2_tp2-pp1-dp1-sp_z1_rc-full_ov-off_mb1-gb16-s2048")
    rows = {m: Projector(cal).project(cell, m) for m in (old, new, None)}
    assert rows[new]["iteration_time_s"] > rows[None]["iteration_time_s"] > rows[old]["iteration_time_s"]
    assert rows[new]["host_bound"] and f"machine {new}" in rows[new]["calibrated"]
    assert "machine not given" in rows[None]["assumed"] and rows[None]["host_factor"] == 1.0


def test_a_rank_times_its_host_issuing_tiny_operations() -> None:
    """The host speed a record carries (each rank's ``host_cpu.dispatch_us_per_op``): positive, from the stated
    number of operations; a device that cannot run says why instead of a number."""
    from calorimeter.records.provenance import host_dispatch

    got = host_dispatch("cpu", ops=200, repeats=3)
    assert 0 < got["dispatch_us_per_op"] < 1e4 and got["dispatch_ops"] == 200 and got["dispatch_repeats"] == 3
    bad = host_dispatch("no-such-device", ops=10)
    assert "dispatch_us_per_op" not in bad and bad["dispatch_unavailable"]


def test_host_bound_cells_of_another_gpu_type_with_the_same_software_join_the_host_fit() -> None:
    """calibration.host_bound_elsewhere: the H200 host-probe cells (host-bound, same engine build) join the H100
    calibration's host fit and the H100 ones never count twice; another software build brings none."""
    from dataclasses import replace

    from calorimeter.projection.calibration import host_bound_elsewhere
    from calorimeter.projection.fingerprint import fingerprint_of
    from calorimeter.projection.measured import load_measured

    base = ROOT / "results/reference/hostprobe-2026-11-27"
    ms = load_measured([str(base / "h100x2-hostprobe"), str(base / "h200x2-hostprobe")])
    runs = ms.runs.set_index("cell_id")
    h100 = set(ms.runs.cell_id[ms.runs.hardware == "h100"])
    fp = fingerprint_of(runs.loc[sorted(h100)[0]])
    got = host_bound_elsewhere(ms, h100, fp)
    assert {c for c, _, _ in got} == set(ms.runs.cell_id[ms.runs.hardware == "h200"])
    assert all(busy < 0.8 * t for _, busy, t in got)
    assert host_bound_elsewhere(ms, h100, replace(fp, torch="2.10.0")) == []


def test_full_clock_gpus_all_at_one_activity_get_no_line_of_their_own() -> None:
    """power.fit_power: twelve full-clock GPUs all near 50% busy (the 2x H100 host probe) cannot set a slope; their
    own line put the 1-GPU H100 cells 15-35% low. Spread over 10-60% busy, they get it."""
    from calorimeter.projection.power import fit_power

    def rows(acts: list[float], power: float, slope: float) -> list[tuple[str, dict[str, float], float]]:
        return [(f"c{i}", {"u_gemm": a, "u_other": 0.0, "u_comm": 0.0}, power + slope * a) for i, a in enumerate(acts)]

    managed = rows([0.8 + 0.02 * i for i in range(8)], 400.0, 300.0)
    narrow = rows([0.47 + 0.005 * i for i in range(12)], 150.0, 600.0)
    wide = rows([0.1 + 0.05 * i for i in range(12)], 150.0, 600.0)
    clocks = [1730.0] * 8 + [1980.0] * 12
    assert fit_power(managed + narrow, 700.0, clocks).coef_full_clock == {}
    assert fit_power(managed + wide, 700.0, clocks).coef_full_clock["u_gemm"] == pytest.approx(600.0, rel=0.01)
