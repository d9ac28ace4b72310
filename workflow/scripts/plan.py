"""Snakemake script of rule plan: keep the expanded grid (planned and pruned cells with reasons) with the results."""

from calorimeter.records.atomic import write_json_atomic

sm = snakemake  # noqa: F821 - injected by Snakemake
write_json_atomic(sm.output[0], {"sweep": sm.wildcards.sweep, "cells": sm.params.plan})
