"""cebench: what a cross-entropy-over-vocabulary implementation really costs.

Peak memory and step time of loss (and sampling) implementations over a vocabulary,
swept over batch, context, vocabulary, hidden size and chunk size.
"""
from importlib.metadata import PackageNotFoundError, version

from cebench.losses.contract import LossFn, SampleFn, variant

__all__ = ["LossFn", "SampleFn", "variant", "__version__"]

try:
    __version__ = version("cebench")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"
