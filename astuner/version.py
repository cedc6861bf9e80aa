"""astuner's version (pyproject.toml's), for `astuner --version` and `astuner.__version__`."""

__version__ = "0.1.0"
