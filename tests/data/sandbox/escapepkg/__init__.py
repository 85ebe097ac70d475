"""Escape attempts for the OS-sandbox tests of ``recon run`` (never imported by recon)."""
