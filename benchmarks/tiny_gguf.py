"""A random-weight llama-architecture GGUF with the Qwen2 tokenizer, for CPU-path checks of a llama.cpp build
on machines that cannot fetch the embedded model (RESULTS: "The embedded model on every x86-64 CPU").

    python benchmarks/tiny_gguf.py LLAMA_CPP/gguf-py LLAMA_CPP/models/ggml-vocab-qwen2.gguf tiny-f32.gguf
    llama-quantize tiny-f32.gguf tiny-q4km.gguf Q4_K_M

LLAMA_CPP is the llama.cpp tree vendored in the llama-cpp-python sdist (its gguf-py writes the file, its
vocabulary-only GGUF gives the tokenizer). Hidden size 512, 2 layers, ~161 M parameters with the vocabulary.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

EMBED, FFN, HEADS, KV_HEADS, LAYERS = 512, 1536, 8, 2, 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf_py", help="llama.cpp's gguf-py folder")
    parser.add_argument("vocab", help="a vocabulary-only GGUF (models/ggml-vocab-qwen2.gguf)")
    parser.add_argument("out", help="the F32 GGUF to write")
    args = parser.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf  # the writer of the llama.cpp tree being checked, not a PyPI release

    reader = gguf.GGUFReader(args.vocab)
    writer = gguf.GGUFWriter(args.out, "llama")
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            kind = field.types[0]
            sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    n_vocab = len(reader.get_field("tokenizer.ggml.tokens").contents())
    head_dim = EMBED // HEADS
    writer.add_context_length(2048)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_file_type(0)
    rng = np.random.default_rng(0)

    def weight(name: str, rows: int, cols: int) -> None:
        writer.add_tensor(name, (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32))

    weight("token_embd.weight", n_vocab, EMBED)
    writer.add_tensor("output_norm.weight", np.ones(EMBED, np.float32))
    weight("output.weight", n_vocab, EMBED)
    for i in range(LAYERS):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(EMBED, np.float32))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(EMBED, np.float32))
        weight(p + "attn_q.weight", EMBED, EMBED)
        weight(p + "attn_k.weight", KV_HEADS * head_dim, EMBED)
        weight(p + "attn_v.weight", KV_HEADS * head_dim, EMBED)
        weight(p + "attn_output.weight", EMBED, EMBED)
        weight(p + "ffn_gate.weight", FFN, EMBED)
        weight(p + "ffn_up.weight", FFN, EMBED)
        weight(p + "ffn_down.weight", EMBED, FFN)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out} ({n_vocab} tokens)")


if __name__ == "__main__":
    main()
