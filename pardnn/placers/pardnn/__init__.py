"""ParDNN (thesis §4.1.1), the placer behind `--algorithm pardnn`. Step 1 is step1.py:
slicing.py, mapping.py (with fenwick.py and cut_edges.py), refinement.py (with
switching.py, volume.py and affinity.py). memory_refinement.py refines again within
memory after Step 2's repair (pardnn.repair). See docs/algorithm.md."""
