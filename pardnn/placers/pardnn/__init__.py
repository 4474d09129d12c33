"""ParDNN (thesis §4.1.1), the first candidate of `--algorithm pardnn`. Step 1 is
step1.py: slicing.py, mapping.py (with fenwick.py and cut_edges.py), refinement.py
(with switching.py, volume.py and affinity.py); stages.py is the stage partition
candidate. Refinement within memory after Step 2's repair is a pipeline stage
(pardnn.pipeline.refine_memory). See docs/algorithm.md."""
