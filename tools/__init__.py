"""Benchmarks and measuring scripts, each run from the repository root as
`python -m tools.NAME` (docs/benchmarks.md gives the commands behind every table)."""
