"""The training job of one cell: models, data, the DeepSpeed engine and the per-rank loop.

``train_cell`` (in :mod:`calorimeter.train.loop`) is the entry point and ``run_train`` its cell kind. Importing this
package imports nothing: :mod:`calorimeter.train.errors` stays light for the launcher, and torch comes only with
the modules that need it (DeepSpeed only with :mod:`calorimeter.train.engine`).
"""
