"""What every layer of pardnn uses and that knows nothing of graphs or devices: the user
error (`errors`), sizes and times (`units`), JSON files (`jsonfile`), numba kernels with
their interpreted twins (`compiled`) and progress lines (`progress`).

One package, so that the pipeline's floors start here (docs/architecture.md)."""
