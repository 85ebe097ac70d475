"""recon's version, in a module of its own so that what records it (snapshot manifests,
chain files, hot-fix bundles) need not import the package's front door."""

__version__ = "0.1.0"
