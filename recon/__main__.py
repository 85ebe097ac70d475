"""``python -m recon`` is the ``recon`` command."""

from .cli import main

main()
