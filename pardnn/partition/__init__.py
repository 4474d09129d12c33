"""ParDNN Step 1 (thesis §4.1.1): slicing.py, mapping.py (with fenwick.py and
links.py), refine.py (with switching.py and volume.py); pardnn.py runs them and is
the placer behind `--algorithm pardnn`. See docs/algorithm.md."""
