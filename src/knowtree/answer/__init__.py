"""Answering: how a question is answered over nodes already built — the walk with its evidence
checks, one-call tree search, collections, conversation memories (tree navigator and agent),
score-guided navigation, answers over retrieved evidence, knowledge-base matching.

Gets nodes, a client, callbacks and retrieval results; never KnowTree, Tree, Memory or the store.
May import: construct (tree-structure helpers), retrieve, ingest, llm, prompts, config, text, types, errors.
"""
