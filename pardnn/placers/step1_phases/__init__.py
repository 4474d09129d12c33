"""The phases of ParDNN's Step 1 (thesis §4.1.1), run by pardnn.placers.step1:
slicing.py (Algorithm 1), mapping.py (initial merging and LALB, with fenwick.py and
cut_edges.py), refinement.py (cluster swapping in swapping.py, node switching in
switching.py, communication moves in volume.py, the pipeline candidate in
affinity.py). Refinement within memory after Step 2's repair is a pipeline stage
(pardnn.pipeline.refine_memory). See docs/algorithm.md."""
