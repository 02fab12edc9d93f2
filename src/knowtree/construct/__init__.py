"""Tree construction: leaf extraction, branch synthesis, grouping, the build orchestration."""

from knowtree.construct.builder import BuildResult, build_tree

__all__ = ["BuildResult", "build_tree"]
