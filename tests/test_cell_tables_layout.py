"""The per-cell tables' layout version follows their columns: a column added without a new CELL_TABLES_LAYOUT would
leave every cell tabled before it without the column (Snakemake does not rerun a job when imported code changes; the
cell_tables rule takes the layout as a parameter). Found on 2026-11-27: runs.host_cpus came out NaN for the older
cells of a sweep whose new cells had it."""

from __future__ import annotations

import hashlib

from conftest import ROOT

from calorimeter.analysis.cell import cell_tables
from calorimeter.records.paths import CELL_TABLES_LAYOUT, TABLE_NAMES

CELL = ROOT / "results/reference/hostbound-2026-11-27/h200x2-hostbound/cells/" \
    "llama3-8b-8l_h200-1x2_tp2-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb16-s2048_r2"
#: layout -> sha256 of the per-cell tables' column names (table: sorted columns), for the committed cell above
COLUMNS_SHA256 = {2: "dec3a600c9e93c426babcd5edece097c411e4f14fa47354f1fc96271ea5e548f",
                  3: "4bf8048fc5d1088e94e13d7a64275073479a33d3389db1477b860f601a7c6724",
                  4: "11759eecc8af3736e16687117b75a111262393a4eab34da4b1ef35fa5a4cabab",
                  5: "73389c7ad6b7688b16cad8a3622bbf03169947db24ebbc9cb05cfa7d8acd4f0f",
                  6: "9274875bfea1035707fef13546a8b010fd572d41699d6d225871c02b4bae358f",
                  7: "774a97ec859b1c2a9def8c956cb2de0a0a1545257661f225aed3a8c8177252a2",
                  # 8: the same columns; power_avg_w from the energy counter where power samples leave gaps
                  8: "774a97ec859b1c2a9def8c956cb2de0a0a1545257661f225aed3a8c8177252a2"}


def test_the_layout_version_names_the_columns_of_the_per_cell_tables() -> None:
    t = cell_tables(CELL)
    text = "\n".join(f"{n}: {','.join(sorted(getattr(t, n).columns))}" for n in TABLE_NAMES)
    got = hashlib.sha256(text.encode()).hexdigest()
    assert COLUMNS_SHA256.get(CELL_TABLES_LAYOUT) == got, (
        f"the per-cell tables' columns changed: bump CELL_TABLES_LAYOUT (records/paths.py) and record {got}")


def test_host_window_metrics_average_the_measured_window_and_take_the_most_stolen_node() -> None:
    import pandas as pd

    from calorimeter.analysis.cell import host_window_metrics

    rows = []
    for node, steal in ((0, 2.0), (1, 10.0)):
        for t in range(0, 21):
            # outside the window [5, 15] the values would move both averages: a window ignored is caught
            inside = 5 <= t <= 15
            rows.append({"node": node, "time_s": float(t), "metric": "cpu_steal_pct", "source": "all",
                         "value": steal if inside else 90.0})
            rows.append({"node": node, "time_s": float(t), "metric": "cpu_util_pct", "source": "all",
                         "value": (8.0 if node == 0 else 12.0) if inside else 90.0})
    got = host_window_metrics(pd.DataFrame(rows), 5.0, 15.0)
    assert got["host_steal_pct"] == 10.0
    assert got["host_cpu_util_pct"] == 10.0
    old = pd.DataFrame([r for r in rows if r["metric"] == "cpu_util_pct"])  # records without steal
    got = host_window_metrics(old, 5.0, 15.0)
    assert got["host_steal_pct"] != got["host_steal_pct"] and got["host_cpu_util_pct"] == 10.0
