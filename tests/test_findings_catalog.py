"""Every check of the findings catalogue can reach every verdict: synthetic tables drive each measurable finding to
agrees, disagrees and cannot say (and, for claims with a size, partly), and the preconditions decide cannot say."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from calorimeter.findings import CATALOG_VERSION, COLUMNS, evaluate
from calorimeter.findings.catalog import FINDINGS
from calorimeter.findings.stats import AGREES, CANNOT_SAY, DISAGREES, PARTLY

REPS = 3
_RNG = np.random.default_rng(7)


def row(**kw) -> dict:
    """A measured runs row of Llama-3 8B on one H200 node: steady window, at the power cap below the clock
    ceiling; overridden by ``kw``."""
    base = dict(model="llama3-8b-8l", hardware="h200", nodes=1, gpus_per_node=2, world_size=2, tp=1, pp=1, dp=2,
                ep=1, cp=1, sequence_parallel=False, zero_stage=1, recompute="none", recompute_layers=None,
                overlap=False, micro_batch=1, global_batch=16, seq_len=8192, precision="bf16", pp_split="",
                placement="default", kind="train", status="ok", repeat=0, measured_steps=5, warmup_reason="steady",
                throttle_sw_power_cap_frac=1.0, sm_clock_avg_mhz=1700.0, sm_clock_peak_mhz=1980.0)
    base.update(kw)
    keys = ("model", "hardware", "nodes", "gpus_per_node", "tp", "pp", "dp", "ep", "sequence_parallel", "zero_stage",
            "recompute", "overlap", "micro_batch", "placement", "kind")
    cid = "_".join(str(base[k]) for k in keys)
    base.setdefault("config_id", cid)
    base["cell_id"] = f"{cid}_r{base['repeat']}"
    base.setdefault("measured_begin_s", 1000.0 * base["repeat"] + len(cid))
    return base


def noisy(x: float, rel: float = 0.003) -> float:
    return float(x * (1 + _RNG.normal(0, rel)))


def tables(rows: list[dict], gpus: list[dict] | None = None, kernels: list[dict] | None = None) -> dict:
    return {"runs": pd.DataFrame(rows), "gpus": pd.DataFrame(gpus or []), "kernels": pd.DataFrame(kernels or [])}


def reps(n: int = REPS) -> range:
    return range(n)


# ---------------------------------------------------------------------------------------------------------------
# one builder per finding: effect -> tables (``bad``: break the finding's precondition)


def overlap_temp(e: float, bad: bool = False) -> dict:
    return tables([row(zero_stage=3, overlap=ov, repeat=k, temp_peak_c=round(60 + e * ov + _RNG.normal(0, 0.3)),
                       warmup_reason="fixed" if bad else "steady") for ov in (False, True) for k in reps()])


def overlap_clock(e: float, bad: bool = False) -> dict:
    return tables([row(zero_stage=3, overlap=ov, repeat=k, sm_clock_avg_mhz=noisy(1700 + e * ov),
                       throttle_sw_power_cap_frac=0.1 if bad else 1.0) for ov in (False, True) for k in reps()])


def recompute_deep(e: float, bad: bool = False) -> dict:
    return tables([row(gpus_per_node=4, world_size=4, pp=4, dp=1, recompute=rc, repeat=k,
                       sm_clock_avg_mhz=1975.0 if bad else noisy(1700 + e * (rc == "full")))
                   for rc in ("none", "full") for k in reps()])


def recompute_dp(e: float, bad: bool = False) -> dict:
    return tables([row(zero_stage=3, recompute=rc, repeat=k,
                       sm_clock_avg_mhz=1975.0 if bad else noisy(1700 + e * (rc == "full")))
                   for rc in ("none", "full") for k in reps()])


def mb_power(e: float, bad: bool = False) -> dict:
    return tables([row(micro_batch=mb, repeat=k, power_peak_w=noisy(800 + e * math.log2(mb)),
                       warmup_reason="cap (200 steps or 60 s) before steady" if bad else "steady")
                   for mb in (1, 2, 4) for k in reps()])


def mb_temp(e: float, bad: bool = False) -> dict:
    return tables([row(micro_batch=mb, repeat=k, temp_peak_c=round(60 + e * math.log2(mb) + _RNG.normal(0, 0.3)),
                       warmup_reason="fixed" if bad else "steady") for mb in (1, 2, 4) for k in reps()])


def fsdp(r: float, bad: bool = False) -> dict:
    return tables([row(zero_stage=3, micro_batch=mb, repeat=k, tokens_per_s=noisy(1000 * (r if mb == 4 else 1)))
                   for mb in (1, 4) for k in reps(1 if bad else REPS)])


def pp_gain(f: float, bad: bool = False) -> dict:
    return tables([row(pp=2, dp=1, micro_batch=mb, repeat=k, tokens_per_s=noisy(1000 * f ** math.log2(mb)))
                   for mb in (1, 2, 4) for k in reps(1 if bad else REPS)])


def depth(e: float, bad: bool = False) -> dict:
    layouts = ((2, 1), (1, 2)) if bad else ((4, 1), (2, 2), (1, 4))
    return tables([row(gpus_per_node=4, world_size=4, tp=tp, pp=pp, dp=1, repeat=k,
                       sm_clock_avg_mhz=noisy(1800 + e * math.log2(pp))) for tp, pp in layouts for k in reps()])


def _sym_cells(temps: Callable[[int], tuple[float, float]], clocks: Callable[[int], tuple[float, float]],
               n: int = 4, **kw) -> dict:
    runs, gpus = [], []
    for k in range(n):
        r = row(repeat=k, **kw)
        runs.append(r)
        for i, (t, c) in enumerate(zip(temps(k), clocks(k), strict=True)):
            gpus.append(dict(cell_id=r["cell_id"], node=0, hostname="host0", gpu_index=i, temp_avg_c=noisy(t),
                             sm_clock_avg_mhz=noisy(c)))
    return tables(runs, gpus)


def asym(a: float, bad: bool = False) -> dict:
    if a < 0:  # no lasting offset: GPU 0 is hotter in the cell that chooses, GPU 1 in the others
        return _sym_cells(lambda k: (61.0, 60.0) if k == 0 else (60.0, 63.0), lambda k: (1700.0, 1700.0))
    return _sym_cells(lambda k: (60.0 * (1 + a), 60.0), lambda k: (1700.0, 1700.0),
                      warmup_reason="fixed" if bad else "steady")


def hot_clock(e: float, bad: bool = False) -> dict:
    return _sym_cells(lambda k: (66.0, 60.0), lambda k: (1700.0 + e, 1700.0),
                      throttle_sw_power_cap_frac=0.0 if bad else 1.0)


def _share_tables(model: str, comm_share: float, n: int, **kw) -> dict:
    runs, kern = [], []
    for k in range(n):
        r = row(model=model, repeat=k, **kw)
        runs.append(r)
        c = comm_share + _RNG.normal(0, 0.01)
        kern += [dict(cell_id=r["cell_id"], is_comm=True, sum_s=c), dict(cell_id=r["cell_id"], is_comm=False,
                                                                          sum_s=1 - c)]
    return tables(runs, kernels=kern)


def dense_share(s: float, bad: bool = False) -> dict:
    return _share_tables("llama3-8b-8l", 1 - s, 1 if bad else REPS)


def moe_share(s: float, bad: bool = False) -> dict:
    return _share_tables("mixtral-8x7b-4l", s, 1 if bad else REPS, tp=2, dp=1, ep=1)


def _clusters(metric: str, a_hw: str, a_factor: int, r: float, bad: bool) -> dict:
    rows = []
    for hw in ("h200", "h100"):
        nodes = (1 if bad else 2) * (a_factor if hw == a_hw else 1)
        for k in reps():
            rows.append(row(hardware=hw, nodes=nodes, gpus_per_node=8, world_size=8 * nodes, dp=8 * nodes, repeat=k,
                            exposed_comm_frac=0.3, **{metric: noisy(1000.0 * (r if hw == a_hw else 1.0))}))
    return tables(rows)


def scale_out(r: float, bad: bool = False) -> dict:
    return _clusters("tokens_per_s", "h100", 2, r, bad)


def energy(r: float, bad: bool = False) -> dict:
    return _clusters("energy_per_token_j", "h200", 1, r, bad)


def placement(r: float, bad: bool = False) -> dict:
    return tables([row(pp=2, dp=1, placement=pl, repeat=k, efficiency=noisy(100 * (r if pl != "default" else 1)))
                   for pl in ("default", "balanced" if bad else "thermal") for k in reps()])


def _lora(metric: str, value: Callable[[bool], float], bad: bool, cap_frac: float = 0.0) -> dict:
    return tables([row(gpus_per_node=1, world_size=1, dp=1, kind=kind, repeat=k, throttle_sw_power_cap_frac=cap_frac,
                       **{metric: noisy(value(kind == "lora"))}, warmup_reason="fixed" if bad else "steady")
                   for kind in ("train", "lora") for k in reps()])


def lora_power(r: float, bad: bool = False) -> dict:
    return _lora("power_avg_w", lambda lora: 600 * (r if lora else 1), bad)


def lora_temp(e: float, bad: bool = False) -> dict:
    return _lora("temp_avg_c", lambda lora: 60 + (e if lora else 0), bad)


def lora_eff(r: float, bad: bool = False) -> dict:
    return _lora("efficiency", lambda lora: 50 * (r if lora else 1), bad)


#: finding -> (builder, effect that agrees, effect that disagrees, effect that is partly or None)
SCENARIOS: dict[str, tuple[Callable[..., dict], float, float, float | None]] = {
    "overlap_raises_peak_temp": (overlap_temp, 4.0, -4.0, None),
    "overlap_raises_throttling": (overlap_clock, -60.0, 60.0, None),
    "recompute_less_throttling_deep_pp": (recompute_deep, 60.0, -60.0, None),
    "recompute_more_throttling_dp": (recompute_dp, -60.0, 60.0, None),
    "microbatch_raises_peak_power": (mb_power, 30.0, -30.0, None),
    "microbatch_raises_peak_temp": (mb_temp, 3.0, -3.0, None),
    "microbatch_speeds_up_fsdp": (fsdp, 3.5, 0.8, 2.2),
    "microbatch_no_gain_pp": (pp_gain, 0.95, 1.3, None),
    "deep_pp_throttles_more": (depth, -60.0, 60.0, None),
    "gpus_thermally_asymmetric": (asym, 0.08, -1.0, 0.40),
    "hot_gpus_clock_lower": (hot_clock, -60.0, 60.0, None),
    "dense_compute_share_over_half": (dense_share, 0.7, 0.3, None),
    "moe_tp_comm_share_over_half": (moe_share, 0.7, 0.3, None),
    "h100_scale_out_wins_compute_bound": (scale_out, 1.5, 0.7, None),
    "h200_energy_per_token": (energy, 0.8, 1.2, None),
    "thermal_aware_placement": (placement, 1.04, 0.95, 1.20),
    "lora_lower_power": (lora_power, 0.8, 1.2, None),
    "lora_lower_temp": (lora_temp, -5.0, 5.0, None),
    "lora_efficiency_10x": (lora_eff, 12.0, 0.5, 2.0),
}


def verdict_of(t: dict, finding: str) -> pd.Series:
    df = evaluate(t)
    assert list(df.columns) == list(COLUMNS) and (df["catalog_version"] == CATALOG_VERSION).all()
    assert not df["why"].str.contains("check failed").any(), df.loc[df["why"].str.contains("check failed"), "why"]
    return df.set_index("finding").loc[finding]


def test_every_measurable_finding_has_a_scenario() -> None:
    measurable = {f.id for f in FINDINGS if f.measurable}
    assert set(SCENARIOS) == measurable
    for f in FINDINGS:
        if not f.measurable:  # always cannot say, and says why and what it would take
            r = verdict_of(tables([row()]), f.id)
            assert r["verdict"] == CANNOT_SAY and r["why"] and r["needs"]


CASES = [(fid, v) for fid, (_, _, _, partly) in SCENARIOS.items()
         for v in (AGREES, DISAGREES, CANNOT_SAY) + ((PARTLY,) if partly is not None else ())]


@pytest.mark.parametrize(("finding", "expected"), CASES, ids=[f"{f}-{v.replace(' ', '_')}" for f, v in CASES])
def test_each_finding_reaches_each_verdict(finding: str, expected: str) -> None:
    build, agree, disagree, partly = SCENARIOS[finding]
    if expected == CANNOT_SAY:  # the same effect that agrees, with the finding's precondition (or repetitions) broken
        r = verdict_of(build(agree, bad=True), finding)
    else:
        r = verdict_of(build({AGREES: agree, DISAGREES: disagree, PARTLY: partly}[expected]), finding)
    assert r["verdict"] == expected, (r["value"], r["ci95_low"], r["ci95_high"], r["dof"], r["why"])
    if expected != CANNOT_SAY:
        assert r["dof"] >= 2 and r["experimental_unit"]
    else:
        assert r["why"] and r["needs"]


def test_reevaluation_lists_changed_verdicts_and_records_the_version(tmp_path) -> None:
    from calorimeter.analysis.reevaluate import main, reevaluate

    folder = tmp_path / "ref" / "sweep-a"
    (folder / "tables").mkdir(parents=True)
    overlap_temp(4.0, bad=True)["runs"].to_parquet(folder / "tables" / "runs.parquet")  # transient windows
    old = evaluate(overlap_temp(4.0)).drop(columns=["catalog_version"])  # as a version-1 table would have it
    old.to_csv(folder / "findings.csv", index=False)
    (ch,) = reevaluate(tmp_path / "ref", tmp_path / "config")
    assert ch.old_version == 1
    diff = ch.changed().set_index("finding")
    assert diff.loc["overlap_raises_peak_temp", "before"] == AGREES
    assert diff.loc["overlap_raises_peak_temp", "after"] == CANNOT_SAY and "steady" in diff.loc[
        "overlap_raises_peak_temp", "why"]
    main([str(tmp_path / "ref"), "--config-dir", str(tmp_path / "config"), "--write"])
    assert (pd.read_csv(folder / "findings.csv")["catalog_version"] == CATALOG_VERSION).all()
    assert reevaluate(tmp_path / "ref", tmp_path / "config")[0].changed().empty


@pytest.mark.parametrize("finding", ["lora_lower_power", "lora_lower_temp"])
def test_lora_power_and_temperature_are_not_judged_at_the_power_cap(finding: str) -> None:
    """Both sides at the cap read "no change" whatever the load asks for (the steady H200 sweep of 2026-11-25):
    cannot say, and why; the efficiency finding is judged there all the same."""
    build = {"lora_lower_power": lambda: _lora("power_avg_w", lambda lora: 690.0, False, cap_frac=1.0),
             "lora_lower_temp": lambda: _lora("temp_avg_c", lambda lora: 60.0, False, cap_frac=1.0)}[finding]
    r = verdict_of(build(), finding)
    assert r["verdict"] == CANNOT_SAY and "below the power cap" in r["why"], r["why"]
    assert verdict_of(_lora("efficiency", lambda lora: 50 * (2.0 if lora else 1), False, cap_frac=1.0),
                      "lora_efficiency_10x")["verdict"] == PARTLY


def test_energy_per_token_needs_communication_bound_jobs() -> None:
    t = energy(0.8)
    t["runs"]["exposed_comm_frac"] = 0.05  # compute-bound: the opposite regime of the claim
    r = verdict_of(t, "h200_energy_per_token")
    assert r["verdict"] == CANNOT_SAY and "communication-bound" in r["why"]


def test_asymmetry_tells_machines_apart_by_gpu_uuid_not_hostname() -> None:
    """Two lent machines, both named ``vm`` (the 2-GPU steady set of 2026-11-26 ran on two): on one GPU 0 runs 8%
    hotter, on the other GPU 1. Read as one host, the hot GPU chosen on the first cells is the wrong one on half
    the others and the offsets cancel; told apart by their GPUs' UUIDs, each machine keeps its own hot GPU."""
    runs, gpus = [], []
    for m, hot in ((0, 0), (1, 1)):
        for k in reps():
            r = row(repeat=k, warmup_reason="steady")
            r["cell_id"] += f"_m{m}"
            r["measured_begin_s"] += 10_000.0 * m
            runs.append(r)
            for i in (0, 1):
                gpus.append(dict(cell_id=r["cell_id"], node=0, hostname="vm", uuid=f"GPU-m{m}-{i}", gpu_index=i,
                                 temp_avg_c=noisy(64.8 if i == hot else 60.0), sm_clock_avg_mhz=1700.0))
    r = verdict_of(tables(runs, gpus), "gpus_thermally_asymmetric")
    assert r["verdict"] == AGREES and "2 host(s)" in r["experimental_unit"], (r["verdict"], r["why"])
    assert 7.0 < r["value"] < 9.0
    for g in gpus:
        g.pop("uuid")  # without UUIDs the hostname is all there is: one host, offsets of both signs
    r = verdict_of(tables(runs, gpus), "gpus_thermally_asymmetric")
    assert r["verdict"] != AGREES and "1 host(s)" in r["experimental_unit"], (r["verdict"], r["value"])
