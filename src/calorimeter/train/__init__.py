"""The training job of one cell: models, data, the DeepSpeed engine and the per-rank loop.

``train_cell`` (in :mod:`calorimeter.train.loop`) is the entry point; importing this package does not import
DeepSpeed (only :mod:`calorimeter.train.engine` does).
"""

from calorimeter.train.errors import CellOOMError
from calorimeter.train.loop import train_cell

__all__ = ["CellOOMError", "train_cell"]
