"""Shipped fake models for tests (`FunctionModel`, `KeywordModel`, ...): deterministic, no weights.

Not imported by `import knowtree`; the `test:` model prefix loads it on demand.
"""

from knowtree.testing.models import FunctionModel, KeywordModel, ScriptedModel, SlowKeywordModel

__all__ = ["FunctionModel", "KeywordModel", "ScriptedModel", "SlowKeywordModel"]
