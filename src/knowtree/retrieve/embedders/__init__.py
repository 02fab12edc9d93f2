"""Concrete offline embedders behind `knowtree.retrieve.embed.get_embedder` (one module per engine).

May import: numpy, the embedder engines (lazily), knowtree.errors.
"""
