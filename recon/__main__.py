"""``python -m recon``: the same command as ``recon``."""

from .cli import main

main()
