"""Concrete offline embedders behind `knowtree.retrieve.embed.get_embedder` (one module per engine)."""
