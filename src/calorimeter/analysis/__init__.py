"""Analysis: tables aggregated from cell records."""
