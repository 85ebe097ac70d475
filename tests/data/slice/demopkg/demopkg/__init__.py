"""A small package with the shapes the slicer must handle (test data for recon slice/run)."""

from .sub.helpers import scale as scale  # a re-export through the package
