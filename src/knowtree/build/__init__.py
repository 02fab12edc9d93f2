"""Tree construction: leaf extraction, branch synthesis, grouping, the build orchestration."""

from knowtree.build.builder import BuildResult, build_tree

__all__ = ["BuildResult", "build_tree"]
