"""The placement pipeline: load.py turns a PROFILE argument into a CostGraph; place.py
runs a placer, the memory repair and the judge, and builds the report."""
