"""Baseline placers the thesis and the literature compare ParDNN with."""
