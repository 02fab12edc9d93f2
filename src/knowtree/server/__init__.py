"""knowtree's HTTP API, MCP server and web tree browser (`pip install "knowtree[server]"`).

`knowtree.server.app.create_app(kt, config)` builds the ASGI app; `knowtree serve` runs it.
"""
