"""The placement pipeline, one stage a module: load.py turns a PROFILE argument into a
CostGraph; portfolio.py builds an algorithm's candidates (the placers of
pardnn.placers.registry); judge.py repairs each for memory and emulates it;
refine_memory.py refines the best within memory; place.py runs the stages and
report.py builds report.json; replicas.py estimates data parallelism across hosts."""
