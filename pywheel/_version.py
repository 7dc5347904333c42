"""The single source of pywheel's version: setuptools reads it (pyproject.toml,
dynamic version) and pywheel.__version__ re-exports it."""

__version__ = "0.1.0"
