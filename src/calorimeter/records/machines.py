"""Which machine a cell ran on: the one definition, for tables, findings, projection, compare and figures.

Hostnames do not tell machines apart (cloud and containerised nodes often share one: every GPU node measured here is
called ``vm``), GPU UUIDs do. Two levels, one derived from the other:

* **the GPUs a cell ran on** (:func:`machine_id`): its GPUs' NVML UUIDs, sorted and joined; the runs table's
  ``machine`` column. Cells on the same GPUs get the same id, so comparisons pair cells within a machine and count
  machines as units (:func:`node_machines` names a node's per-GPU rows by it);
* **the physical machine** (:func:`physical_hosts`): the cells' GPU sets that share a GPU are one machine (a 1-GPU
  cell on GPU 0 and a 2-GPU cell on GPUs 0-1 ran on one host), named by hostname for the reader, or by its smallest
  GPU UUID where a stable key is needed (:func:`machine_keys`: the projection's host factors, compare's machine
  shares).

:func:`machine_label` shortens either for the reader.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd


def machine_id(uuids: Iterable[str | None]) -> str:
    """The GPUs a cell ran on: their NVML UUIDs, sorted and joined with ``|`` (empty without any UUID)."""
    return "|".join(sorted({str(u) for u in uuids if u is not None and str(u) not in ("", "nan", "None")}))


def machine_label(machine: str) -> str:
    """A short name of a machine id for the reader: the first 8 hex digits of each GPU UUID, joined with ``+``
    (``GPU-94daa689+GPU-bca86451``); a name already short is returned as it is."""
    return "+".join(u[:12] for u in str(machine).replace("+", "|").split("|") if u) or "unknown"


def node_machines(gpus: pd.DataFrame) -> pd.Series:
    """The machine of each per-GPU row, named for the reader: the node's GPUs by UUID (:func:`machine_id`,
    shortened by :func:`machine_label`), the hostname where the rows have no UUIDs (tables from before UUIDs were
    recorded)."""
    host = gpus["hostname"].astype(str)
    if "uuid" not in gpus.columns:
        return host
    key = gpus["cell_id"].astype(str) + "|" + gpus["node"].astype(str)
    ids = gpus.groupby(key)["uuid"].transform(lambda u: machine_id(u))
    return ids.map(machine_label).where(ids != "", host)


def physical_hosts(gpus: pd.DataFrame) -> pd.Series:
    """The physical machine of each per-GPU row: the cells' nodes that share a GPU (by NVML UUID) are one machine.

    Each connected set of (cell, node) GPU groups that share a UUID is one host, named by its hostname (with ``#2``,
    ``#3``, ... where one hostname covers several machines); rows without UUIDs fall back to the hostname."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    host = gpus["hostname"].astype(str)
    if "uuid" not in gpus.columns:
        return host
    has = gpus["uuid"].notna() & (gpus["uuid"].astype(str) != "")
    if not has.any():
        return host
    groups, g_ix = pd.factorize(gpus.loc[has, "cell_id"].astype(str) + "|" + gpus.loc[has, "node"].astype(str))
    uuids, u_ix = pd.factorize(gpus.loc[has, "uuid"].astype(str))
    n = len(g_ix) + len(u_ix)  # graph nodes: the (cell, node) groups, then the UUIDs; an edge per row
    graph = coo_matrix((np.ones(len(groups)), (groups, len(g_ix) + uuids)), shape=(n, n))
    machine = pd.Series(connected_components(graph, directed=False)[1][groups], index=has[has].index)
    nth = machine.groupby(host[has]).transform(lambda m: pd.factorize(m)[0])  # 0, 1, ... per hostname, by appearance
    return host.where(~has, host[has] + nth.map(lambda k: "" if k == 0 else f"#{k + 1}"))


def machine_keys(gpus: pd.DataFrame) -> dict[str, str]:
    """Cell id -> its physical machine (:func:`physical_hosts`) by a stable name: the smallest GPU UUID (first 12
    characters) of the connected set of GPUs it shares with other cells; the hostname where the cell's rows have no
    UUID; absent for cells without per-GPU rows."""
    if gpus.empty or "hostname" not in gpus.columns:
        return {}
    g = gpus.assign(node=gpus["node"] if "node" in gpus.columns else 0).reset_index(drop=True)
    host = physical_hosts(g)
    uuid = g["uuid"].fillna("").astype(str) if "uuid" in g.columns else pd.Series("", index=g.index)
    smallest = uuid[uuid != ""].groupby(host[uuid != ""]).min().str[:12]
    name = host.map(smallest).fillna(host)
    return {str(c): str(m) for c, m in name.groupby(g["cell_id"]).first().items()}


__all__ = ["machine_id", "machine_keys", "machine_label", "node_machines", "physical_hosts"]
