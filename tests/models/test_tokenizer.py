"""The shipped tokenizer: 4096 byte-level BPE tokens, EOS first, lossless on Python source."""

import pytest

from hwopt.models import checkpoint, corpus, tokenizer


@pytest.fixture(scope="module")
def tok():
    return tokenizer.load(checkpoint.WEIGHTS_DIR / "tokenizer.json")


def test_shipped_tokenizer_has_the_vocabulary_and_eos(tok):
    assert tok.get_vocab_size() == tokenizer.VOCAB_SIZE
    assert tok.token_to_id(corpus.EOS) == 0


def test_encoding_is_lossless_and_compresses_source(tok):
    source = "def f(x):\n    return {'é': x ** 2}  # ünïcode\n\n\nclass A:\n\tpass\n"
    ids = tok.encode(source).ids
    assert tok.decode(ids) == source
    text = corpus.read_validation(checkpoint.WEIGHTS_DIR / "validation.txt")[0]
    assert len(text) / len(tok.encode(text).ids) > 3  # characters per token


def test_encode_documents_puts_eos_after_each(tok):
    stream = tokenizer.encode_documents(tok, ["a = 1\n", "b = 2\n"])
    assert (stream == 0).nonzero().flatten().tolist() == [len(tok.encode("a = 1\n").ids), len(stream) - 1]


def test_a_file_that_is_not_a_tokenizer_is_refused(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        tokenizer.load(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer.json"):
        tokenizer.load(tmp_path / "tokenizer.json")
