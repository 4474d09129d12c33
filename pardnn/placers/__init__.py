"""The placers, listed in registry.py with their roles in `--algorithm pardnn`'s
portfolio: ParDNN's Step 1 and stage partition (pardnn/), the baselines (baselines/)
and hierarchical placement over hosts (hierarchical.py). Each is a function of the
graph and the cluster; the pipeline repairs and judges what it returns."""
