"""The default embedder's fast path gives today's vectors bit for bit: words tokenized once and
cached, a repeated context tokenized and added up once, every text's rows summed in one pass."""

from __future__ import annotations

import importlib.util
import random
import sys

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None, reason="the [embed] extra (tokenizers) is not installed"
)

np = pytest.importorskip("numpy")

# characters that test the tokenizer's edges: whitespace Python splits at but BERT deletes (VT, FF,
# FS, NEL), other whitespace (NBSP, ideographic space, line separator), deleted characters (NUL,
# U+FFFD, zero-width space), accents and combining marks, CJK (split per character), a capital
# sigma, punctuation, characters out of the vocabulary ([UNK]: an emoji, a snowman)
ODD = "\x0b\x0c\x1c\x1f\x85\xa0\u3000\u2028\x00\ufffd\u200b\u0301éÉ中文Σ.,;-'()\U0001f600\u2603"
WORDS = ["the", "revenue", "Quarterly", "grew", "9", "2023", "über", "naïve", "[PAD]", "[UNK]", "x" * 120]


def _model() -> object:
    from knowtree.retrieve.embed import get_embedder

    return get_embedder("m2v-minilm")


def _reference(emb: object, texts: list[str]) -> np.ndarray:
    """The vectors as `Model2VecEmbedder.embed` computed them before the fast path: each text cut to
    max_tokens * 8 characters, tokenized alone, unknown tokens dropped, the first max_tokens kept,
    the mean of their float32 rows, L2-normalised."""
    from knowtree.retrieve.embedders.base import normalize

    tok, table, unk, limit = emb._tokenizer, emb._table, emb._unk, emb.max_tokens  # type: ignore[attr-defined]
    out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
    for row, text in enumerate(texts):
        ids = [i for i in tok.encode(text[: limit * 8], add_special_tokens=False).ids if i != unk][:limit]
        if ids:
            out[row] = table[ids].astype(np.float32).mean(axis=0)
    return normalize(out)


def _text(rng: random.Random, words: int) -> str:
    parts = []
    for _ in range(words):
        if rng.random() < 0.15:
            parts.append("".join(rng.choice(ODD) for _ in range(rng.randint(1, 3))))
        else:
            parts.append(rng.choice(WORDS))
        parts.append(rng.choice([" ", " ", " ", "\n", "\t", "  ", "\r\n", ""]))
    return "".join(parts)


def _corpus(seed: int) -> tuple[list[str], list[str]]:
    """Entries whose contexts repeat: short ones, ones longer than max_tokens tokens, ones longer
    than the character limit, empty ones; texts short, past max_tokens, empty."""
    rng = random.Random(seed)
    contexts = ["", "Report 2023 > Revenue", _text(rng, 20), _text(rng, 700), "a " * 1100, _text(rng, 3)]
    contexts.append("x" * 1998)  # joined with its newline: exactly the limit, no room for text
    contexts.append("y" * 1997)  # room for one character of text
    # a token per character: contexts of 300 and of 600 tokens (past max_tokens) in few characters
    contexts += ["中文," * 100, "." * 600]
    out_c, out_t = [], []
    for _ in range(300):
        out_c.append(rng.choice(contexts))
        dense = "".join(rng.choice("中.,a ") for _ in range(rng.randint(100, 1500)))
        out_t.append(
            rng.choice(["", _text(rng, rng.randint(1, 30)), _text(rng, rng.randint(300, 900)), dense])
        )
    return out_c, out_t


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_joined_vectors_equal_the_plain_vectors_of_the_joined_texts(seed: int) -> None:
    emb = _model()
    contexts, texts = _corpus(seed)
    joined = [(f"{c}\n{t}" if c else t)[:2000] for c, t in zip(contexts, texts, strict=True)]
    expected = _reference(emb, joined)
    got = emb.embed_joined(contexts, texts, 2000)  # type: ignore[attr-defined]
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(got, expected)  # bit for bit
    # the words are cached now: a second call (and the plain path) give the same vectors again
    assert np.array_equal(emb.embed_joined(contexts, texts, 2000), expected)  # type: ignore[attr-defined]
    assert np.array_equal(emb.embed(joined), expected)  # type: ignore[attr-defined]


def test_plain_vectors_equal_the_reference_past_the_token_and_character_limits() -> None:
    emb = _model()
    rng = random.Random(9)
    texts = ["", " ", "[UNK] \U0001f600", "net revenue grew " * 2000, _text(rng, 3000), "Σ" * 5000]
    texts += [_text(rng, rng.randint(0, 60)) for _ in range(200)]
    expected = _reference(emb, texts)
    assert np.array_equal(emb.embed(texts), expected)  # type: ignore[attr-defined]
    for i in range(0, 12, 3):  # a few texts (a question) take the direct path: the same vectors
        assert np.array_equal(emb.embed(texts[i : i + 3]), expected[i : i + 3])  # type: ignore[attr-defined]


def test_word_tokens_are_the_tokenizers_ids() -> None:
    from knowtree.retrieve.embedders.wordtokens import WordTokens

    emb = _model()
    tok, unk = emb._tokenizer, emb._unk  # type: ignore[attr-defined]
    rng = random.Random(4)
    texts = [_text(rng, rng.randint(0, 80)) for _ in range(300)] + ["", "e\x85f a\x0bb", "x[PAD]y"]
    words = WordTokens(tok, unk)
    ids, counts = words.encode(texts)
    assert counts.sum() == len(ids)
    start = 0
    for text, n in zip(texts, counts, strict=True):
        want = [i for i in tok.encode(text, add_special_tokens=False).ids if i != unk]
        assert ids[start : start + n].tolist() == want, text
        start += n


def test_every_character_python_splits_at_separates_words_for_the_tokenizer_or_is_refused() -> None:
    """`str.split` and the tokenizer agree on every whitespace character but the few `_UNSPLIT`
    (those texts are tokenized whole)."""
    from knowtree.retrieve.embedders.wordtokens import _UNSPLIT

    tok = _model()._tokenizer  # type: ignore[attr-defined]
    for code in range(sys.maxunicode + 1):
        c = chr(code)
        if not c.isspace() or _UNSPLIT.match(c):
            continue
        whole = tok.encode(f"ab{c}cd", add_special_tokens=False).ids
        assert (
            whole
            == tok.encode("ab", add_special_tokens=False).ids + tok.encode("cd", add_special_tokens=False).ids
        ), hex(code)
    for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85":  # deleted by the normaliser: the words join
        assert _UNSPLIT.match(c)
        assert (
            tok.encode(f"ab{c}cd", add_special_tokens=False).ids
            == tok.encode("abcd", add_special_tokens=False).ids
        )


def test_sequential_sums_equal_one_sum_per_text() -> None:
    from knowtree.retrieve.embedders.seqsum import sequential_sums

    rng = np.random.default_rng(0)
    table = rng.standard_normal((500, 16)).astype(np.float16)
    counts = rng.integers(0, 700, 40)
    counts[3] = 0
    ids = rng.integers(0, 500, int(counts.sum()))
    offsets = np.cumsum(counts) - counts
    start = rng.standard_normal((40, 16)).astype(np.float32)
    started = rng.random(40) < 0.5
    got = sequential_sums(table, ids, offsets, counts, start, started)
    for i in range(40):
        rows = table[ids[offsets[i] : offsets[i] + counts[i]]].astype(np.float32)
        if started[i]:
            rows = np.vstack([start[i], rows])
        want = rows.sum(axis=0) if len(rows) else np.zeros(16, dtype=np.float32)
        assert np.array_equal(got[i], want), i


def test_entries_of_an_embedder_without_joined_embedding_are_embedded_as_joined_texts() -> None:
    from knowtree.retrieve.embed import HashEmbedder
    from knowtree.retrieve.indexwrite import embed_entries, embed_text, embed_texts

    emb = HashEmbedder(64)
    contexts, texts = ["", "A > B", "A > B"], ["one", "two", "three " * 500]
    want = embed_texts(emb, [embed_text(c, t) for c, t in zip(contexts, texts, strict=True)])
    assert np.array_equal(embed_entries(emb, contexts, texts), want)


def test_entries_of_the_default_embedder_go_through_joined_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build's vectors tokenize each distinct context of a batch once."""
    from knowtree.retrieve.embedders.wordtokens import WordTokens
    from knowtree.retrieve.indexwrite import embed_entries, embed_text

    emb = _model()
    seen: list[list[str]] = []
    encode = WordTokens.encode

    def spy(self: WordTokens, texts: list[str]) -> object:
        seen.append(list(texts))
        return encode(self, texts)

    monkeypatch.setattr(WordTokens, "encode", spy)
    contexts = ["Report > Revenue"] * 50 + ["Report > Costs"] * 50
    texts = [f"item {i} grew" for i in range(100)]
    got = embed_entries(emb, contexts, texts)
    assert sorted(seen[0]) == ["Report > Costs", "Report > Revenue"]
    joined = [embed_text(c, t) for c, t in zip(contexts, texts, strict=True)]
    assert np.array_equal(got, _reference(emb, joined))
    # batches of entries grouped by context come back in the entries' order
    mixed = [contexts[i // 2 + (i % 2) * 50] for i in range(100)]
    joined = [embed_text(c, t) for c, t in zip(mixed, texts, strict=True)]
    assert np.array_equal(embed_entries(emb, mixed, texts, batch=30), _reference(emb, joined))


def _check_word_cache(words: object, tok: object, unk: int, seed: int, rounds: int, bad: list[str]) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        texts = [" ".join(f"w{rng.randint(0, 500)}x" for _ in range(5)) for _ in range(10)]
        try:
            ids, _ = words.encode(texts)  # type: ignore[attr-defined]
        except (KeyError, IndexError) as exc:
            bad.append(repr(exc))
            continue
        want = [i for t in texts for i in tok.encode(t, add_special_tokens=False).ids if i != unk]  # type: ignore[attr-defined]
        if ids.tolist() != want:
            bad.append("wrong ids")


def test_a_word_cache_that_overflows_starts_again_with_every_word_of_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from knowtree.retrieve.embedders import wordtokens

    monkeypatch.setattr(wordtokens, "MAX_WORDS", 40)  # each call has ~50 words: every call overflows
    emb = _model()
    tok, unk = emb._tokenizer, emb._unk  # type: ignore[attr-defined]
    bad: list[str] = []
    _check_word_cache(wordtokens.WordTokens(tok, unk), tok, unk, 0, 50, bad)
    assert bad == []


def test_threads_sharing_the_embedder_get_their_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """One embedder serves a server's threads: a cache restarted by one thread never drops the words
    another is looking up (without the lock this failed ~1 % of calls)."""
    import threading

    from knowtree.retrieve.embedders import wordtokens

    monkeypatch.setattr(wordtokens, "MAX_WORDS", 40)
    emb = _model()
    tok, unk = emb._tokenizer, emb._unk  # type: ignore[attr-defined]
    words = wordtokens.WordTokens(tok, unk)
    bad: list[str] = []
    threads = [
        threading.Thread(target=_check_word_cache, args=(words, tok, unk, seed, 200, bad))
        for seed in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_a_tokenizer_that_does_not_split_at_whitespace_first_embeds_every_text_whole() -> None:
    from knowtree.retrieve.embed import EMBEDDERS
    from knowtree.retrieve.embedders.wordtokens import WordTokens, splits_at_whitespace

    emb = EMBEDDERS["m2v-minilm"]()  # a fresh one: its settings are changed below
    assert splits_at_whitespace(emb._tokenizer)  # type: ignore[attr-defined]
    emb._by_word = False  # type: ignore[attr-defined]  # as for, e.g., a byte-level BPE tokenizer
    emb._words = WordTokens(emb._tokenizer, emb._unk, by_word=False)  # type: ignore[attr-defined]
    contexts, texts = _corpus(5)
    joined = [(f"{c}\n{t}" if c else t)[:2000] for c, t in zip(contexts, texts, strict=True)]
    assert np.array_equal(emb.embed_joined(contexts, texts, 2000), _reference(emb, joined))  # type: ignore[attr-defined]
