"""Kind ``command``: your own training command (torchtitan, Megatron-LM, NeMo, a script) measured like a cell.

:mod:`calorimeter.command.run` launches it on every rank under the node sampler; :mod:`calorimeter.command.steplog`
is the step-log protocol it writes (or the parsers of known trainers' console logs). See docs/command.md.
"""
