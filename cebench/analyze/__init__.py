"""Computations over steps and results: predictions, fits, explanations, checks, verification."""
