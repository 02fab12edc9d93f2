"""Interoperability with other tree formats (PageIndex JSON, ChatIndex export).

May import: the facades and everything below them.
"""
