"""Data preprocessing: music, text and images.

Submodules are imported explicitly; each names the `pip install` extra it needs
(docs/guides/preprocessing.md).
"""
