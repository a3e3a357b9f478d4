"""Computations over steps and results: a step's anatomy and explanation, the regression
gate, comparisons and statistics, verification."""
