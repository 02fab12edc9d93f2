"""Shipped fake models for tests (`FunctionModel`, `ScriptedModel`, `KeywordModel`): deterministic,
no weights. Not imported by `import knowtree`; model strings such as `keyword` load it on demand.

May import: llm, text, types, errors.
"""

from knowtree.testing.models import FunctionModel, KeywordModel, ScriptedModel, SlowKeywordModel

__all__ = ["FunctionModel", "KeywordModel", "ScriptedModel", "SlowKeywordModel"]
