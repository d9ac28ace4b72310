#!/usr/bin/env bash
# The node's GPU type as the reference configs name it (h100 or h200: a node asked for as one may have the other),
# from its first GPU's name:   G=$(bash bench/gpu/gpu_type.sh)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[12]00' | tr H h
