"""Pieces shared by every layer that import nothing else of the package (an append-only log)."""
