"""Token ids of many texts, exactly as a BERT-style `tokenizers.Tokenizer` gives them, word by word.

A BERT normaliser works character by character (control characters dropped, whitespace made a
space, accents stripped, lower case) and its pre-tokenizer splits at whitespace before WordPiece
sees a word, so a text's tokens are the concatenation of its whitespace-separated words' tokens.
`WordTokens` tokenizes each distinct word once (the Rust tokenizer, one batch of the words not seen
before) and keeps it, so a corpus whose words repeat is tokenized at the cost of its vocabulary;
the ids of every text come back as one flat array, gathered with numpy.

Python's `str.split()` splits at the same characters as the tokenizer, except at a few control
characters the normaliser deletes (`_UNSPLIT`): a text holding one is tokenized whole.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: whitespace to `str.split` but deleted (not split at) by the BERT normaliser: VT, FF, FS..US, NEL
_UNSPLIT = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
#: words kept between calls, at most (the cache starts again beyond this)
MAX_WORDS = 200_000


def splits_at_whitespace(tokenizer: Any) -> bool:
    """Whether `tokenizer` tokenizes whitespace-separated words independently: a BERT normaliser (or
    none), a BERT or whitespace pre-tokenizer, WordPiece, nothing added after."""
    kinds = (type(tokenizer.normalizer).__name__, type(tokenizer.pre_tokenizer).__name__)
    return (
        kinds[0] in ("NoneType", "BertNormalizer")
        and kinds[1] in ("BertPreTokenizer", "WhitespaceSplit", "Whitespace")
        and type(tokenizer.model).__name__ == "WordPiece"
        and tokenizer.post_processor is None
    )


class WordTokens:
    """Token ids (special tokens off, the id `drop` removed) of texts through a cache of words."""

    def __init__(self, tokenizer: Any, drop: int, *, by_word: bool = True) -> None:
        import numpy as np

        self._tokenizer = tokenizer
        self._drop = drop
        self._by_word = by_word
        self._code: dict[str, int] = {}
        self._offset = np.zeros(0, dtype=np.int64)  # per word code: where its ids start in _ids
        self._length = np.zeros(0, dtype=np.int64)
        self._ids = np.zeros(0, dtype=np.int32)
        self._lock = threading.Lock()  # one embedder serves every thread of a process

    def _encode_whole(self, texts: Sequence[str]) -> list[np.ndarray]:
        import numpy as np

        out = []
        for enc in self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.int32)
            out.append(ids[ids != self._drop])
        return out

    def _learn(self, words: set[str], wanted: set[str]) -> None:
        """Tokenize and keep `words` (new ones); when the cache would outgrow `MAX_WORDS` it starts
        again with every word of the call (`wanted`), the ones known before included."""
        import numpy as np

        if len(self._code) + len(words) > MAX_WORDS:
            self._code.clear()
            self._offset = self._offset[:0]
            self._length = self._length[:0]
            self._ids = self._ids[:0]
            words = wanted
        new = list(words)
        encoded = self._encode_whole(new)
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        start = len(self._ids)
        self._offset = np.concatenate([self._offset, start + np.cumsum(lengths) - lengths])
        self._length = np.concatenate([self._length, lengths])
        self._ids = np.concatenate([self._ids, *encoded]).astype(np.int32, copy=False)
        base = len(self._code)
        self._code.update(zip(new, range(base, base + len(new)), strict=True))

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(every text's ids one after another, each text's number of ids)."""
        with self._lock:  # a word learned by one thread is never forgotten under another's lookup
            return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        whole = [i for i, t in enumerate(texts) if not self._by_word or _UNSPLIT.search(t)]
        split = [t.split() for t in texts] if self._by_word else [[] for _ in texts]
        for i in whole:
            split[i] = []
        words = list(chain.from_iterable(split))
        wanted = set(words)
        missing = wanted.difference(self._code)
        if missing:
            self._learn(missing, wanted)
        codes = np.fromiter(map(self._code.__getitem__, words), dtype=np.int64, count=len(words))
        lengths = self._length[codes]
        ends = np.cumsum(lengths)
        ids = self._ids[
            np.arange(int(ends[-1]) if len(ends) else 0)
            - np.repeat(ends - lengths - self._offset[codes], lengths)
        ]
        per_text_words = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
        word_end = np.cumsum(per_text_words)
        token_end = np.concatenate([[0], ends])[word_end]
        counts = np.diff(np.concatenate([[0], token_end]))
        if not whole:
            return ids, counts
        # texts tokenized whole: put their ids in place
        encoded = dict(zip(whole, self._encode_whole([texts[i] for i in whole]), strict=True))
        parts, start = [], 0
        for i in range(len(texts)):
            if i in encoded:
                counts[i] = len(encoded[i])
                parts.append(encoded[i])
            else:
                parts.append(ids[start : start + counts[i]])
                start += int(counts[i])
        return np.concatenate(parts).astype(np.int32, copy=False) if parts else ids, counts
