"""Interoperability with other tree formats (PageIndex JSON)."""
