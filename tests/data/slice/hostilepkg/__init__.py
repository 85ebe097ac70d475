"""Hostile code for the containment tests of ``recon run`` (never imported by recon itself)."""
