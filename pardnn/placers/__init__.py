"""Placers behind `--algorithm`, listed in registry.py: ParDNN's Step 1 and its
refinement within memory (pardnn/), the baselines (baselines/), hierarchical placement
over hosts (hierarchical.py) and data-parallel replicas (replicas.py)."""
