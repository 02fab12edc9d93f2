"""knowtree's HTTP API, MCP server and web tree browser (`pip install "knowtree[server]"`).

`knowtree.server.app.create_app(kt, config)` builds the ASGI app; `knowtree serve` runs it.
May import: adapters, interop, the facades and everything below them (never cli or knowtree_eval).
"""
