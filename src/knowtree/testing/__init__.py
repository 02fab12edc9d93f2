"""Shipped fake models for tests (`FunctionModel`, `KeywordModel`, ...): deterministic, no weights.

Not imported by `import knowtree`; the `test:` model prefix loads it on demand.
"""
