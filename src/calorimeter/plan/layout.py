"""Rank layout of a cell: the pipeline stage and node of every global rank, and the nodes a group of ranks spans.

One definition of the layout the engine builds (DeepSpeed's and Megatron's topologies: the pipeline dimension is
outermost, so stage = rank // (world_size / pp)) and the launcher places (ranks fill nodes in blocks of
``gpus_per_node``). Placement (:mod:`calorimeter.plan.placement`), the workload model (:mod:`calorimeter.plan.work`)
and the per-rank table of a record (:func:`calorimeter.analysis.cell.rank_table`) all read it from here, in the
style of torchtitan's ``ParallelDims``: degrees in, ranks and groups out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calorimeter.plan.cell import Cell


@dataclass(frozen=True)
class Layout:
    """Where the ranks of a cell sit.

    Attributes:
        world_size: ranks of the cell.
        pp: pipeline stages.
        gpus_per_node: ranks per node.
    """

    world_size: int
    pp: int
    gpus_per_node: int

    @classmethod
    def of(cls, cell: Cell) -> Layout:
        """The layout of a cell."""
        return cls(cell.world_size, cell.pp, cell.gpus_per_node)

    @property
    def ranks_per_stage(self) -> int:
        """Ranks of one pipeline stage (tp x dp)."""
        return max(self.world_size // max(self.pp, 1), 1)

    def stage(self, rank: int) -> int:
        """Pipeline stage of a global rank."""
        return rank // self.ranks_per_stage

    def node(self, rank: int) -> int:
        """Node index of a global rank."""
        return rank // max(self.gpus_per_node, 1)

    def node_stage_groups(self, node: int) -> dict[int, list[int]]:
        """Local ranks of one node per stage."""
        groups: dict[int, list[int]] = {}
        for local in range(self.gpus_per_node):
            groups.setdefault(self.stage(node * self.gpus_per_node + local), []).append(local)
        return groups

    def group_nodes(self, size: int, stride: int) -> int:
        """Nodes spanned by a group of ``size`` ranks ``stride`` apart."""
        return group_nodes(size, stride, self.gpus_per_node)


def group_nodes(size: int, stride: int, gpus_per_node: int) -> int:
    """Nodes spanned by a group of ``size`` ranks ``stride`` apart, ranks filling nodes in order."""
    if size <= 1:
        return 1
    span = (size - 1) * stride + 1
    if stride >= gpus_per_node:
        return size
    return max(1, math.ceil(span / gpus_per_node))
