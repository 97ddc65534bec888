"""Text extraction from document files and text normalisation."""

from __future__ import annotations

from rag_experiments.text.extract import SUPPORTED_EXTENSIONS, ExtractedText, extract_file
from rag_experiments.text.normalize import normalize_text

__all__ = ["SUPPORTED_EXTENSIONS", "ExtractedText", "extract_file", "normalize_text"]
