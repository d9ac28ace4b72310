"""Figures: one module per figure family, each a function of the aggregated tables."""
