"""Print a committed set's cells as a Markdown table from its summary table (summary.csv), for the set's README:
the numbers a README shows come from the tables, never typed by hand.

Usage: python bench/set_table.py results/reference/<set>/<sweep> [--by recompute pp repeat]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

COLUMNS = (  # header, how a row's value is written
    ("layout", lambda r: r["parallel_label"]),
    ("recompute", lambda r: r["recompute"]),
    ("repetition", lambda r: str(r["repeat"])),
    ("tokens/s per GPU", lambda r: f"{r['tokens_per_s_per_gpu']:,.0f}"),
    ("MFU", lambda r: f"{100 * r['mfu_full']:.1f}%"),
    ("mean SM clock (MHz)", lambda r: f"{r['sm_clock_avg_mhz']:.0f}"),
    ("GPU temperature, mean / peak (degC)", lambda r: f"{r['temp_avg_c']:.1f} / {r['temp_peak_c']:.0f}"),
    ("mean power (W)", lambda r: f"{r['power_avg_w']:.0f}"),
    ("share at the power cap", lambda r: f"{100 * r['throttle_sw_power_cap_frac']:.0f}%"),
    ("warm-up end", lambda r: f"{r['warmup_reason']} ({r['warmup_s']:.0f} s; last slope "
                              f"{r['warmup_final_slope_c_per_min']:+.1f} degC/min)"),
    ("measured window: largest drift (its slope)", lambda r: f"{r['temp_drift_c']:.2f} degC "
                                                             f"({r['temp_slope_c_per_min']:+.1f} degC/min): "
                                                             f"{'steady' if r['thermally_steady'] else 'not steady'}"),
)


def table(sweep_dir: Path, by: list[str]) -> str:
    """The Markdown table of the set's measured cells, sorted by ``by``."""
    s = pd.read_csv(sweep_dir / "summary.csv")
    s = s[s["status"] == "ok"].sort_values(by)
    cols = COLUMNS if s["model"].nunique() < 2 else (("model", lambda r: r["model"]), *COLUMNS)  # several: named
    lines = ["| " + " | ".join(h for h, _ in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(f(r) for _, f in cols) + " |" for _, r in s.iterrows()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--by", nargs="+", default=["recompute", "pp", "repeat"])
    args = ap.parse_args()
    print(table(args.sweep_dir, args.by))


if __name__ == "__main__":
    main()
