"""Acquire: reading an image, archive, wheel or folder into files on disk.

Every source (:mod:`recon.acquire.sources`) yields the same Image of Layers of
Entries; :mod:`~recon.acquire.layers` squashes the layers top first,
:mod:`~recon.acquire.locate` finds the package the image's own Python imports,
:mod:`~recon.acquire.blobcache` keeps verified blobs, and
:mod:`~recon.acquire.writer` writes trees beneath descriptors. The snapshot
stage (:mod:`recon.snapshots`) drives them.
"""
