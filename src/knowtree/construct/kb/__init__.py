"""Knowledge-base (AutoKB) construction: chunks, clusters, themes, subtrees, solutions, compliance.

May import what construct/ may import.
"""
