"""livethink: fast reasoning replies for livestream commerce."""

__version__ = "0.1.0"
