"""Knowledge-base (AutoKB) construction: chunks, clusters, themes, subtrees, solutions, compliance."""
