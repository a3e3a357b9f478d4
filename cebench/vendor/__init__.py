"""Vendored systems under test (unmodified third-party code)."""
