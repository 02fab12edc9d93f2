"""The `knowtree` command line: a typer app split by command group (`app.py` is the entry point).

Imported only by the console script; nothing in the library imports it. May import anything.
"""
