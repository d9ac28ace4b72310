"""Artifact evaluation as a product: check a reproduction against committed reference records
(:mod:`calorimeter.reproduce.compare`, ``calorimeter compare``), write the study artifact's own file layout
(:mod:`calorimeter.reproduce.charllm`, ``calorimeter export --format charllm-ppt``)."""
