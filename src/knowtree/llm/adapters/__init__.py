"""One module per provider, each a `knowtree.llm.base.Model`: `local` (llama-cpp-python in a model process),
`openai_compat` (OpenAI and compatible servers), `anthropic_model`; `model_files` fetches and checks
the embedded model's weights. SDKs are imported lazily. Imports only `knowtree.llm.base` and the
bottom layer (errors, config, types)."""
