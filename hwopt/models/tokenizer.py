"""The course model's tokenizer: byte-level BPE (GPT-2's pre-tokenizer and byte alphabet), trained on the
train split with Hugging Face `tokenizers`; saved as tokenizer.json, which transformers and llama.cpp (GGUF
`gpt2` model, `gpt-2` pre-tokenizer) read too.

VOCAB_SIZE 4096: Python source is a small language (keywords, indentation runs, identifiers), so 4096 tokens
already give ~3.6 characters per token; a larger table would take a quarter of a 4 M-parameter draft model's
weights and be seen too rarely in a few million training tokens to learn.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from hwopt import arguments
from hwopt.models.corpus import EOS

__all__ = ["VOCAB_SIZE", "train", "load", "encode_documents"]

VOCAB_SIZE = 4096


def train(texts, vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE tokenizers.Tokenizer with vocab_size tokens (EOS is id 0) learnt from texts."""
    vocab_size = arguments.between("vocab_size", vocab_size, 300, 1 << 20, integer=True)
    _check_texts(texts)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _check_texts(texts) -> None:
    arguments.instance("texts", texts, (list, tuple))
    for i, text in enumerate(texts):
        arguments.instance(f"texts[{i}]", text, str)


def load(path: Path | str):
    """The tokenizers.Tokenizer saved at path (a tokenizer.json); ValueError naming the file if not one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"tokenizer: expected a tokenizer.json file at {str(path)!r}; it does not exist")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises its own Exception type for malformed JSON
        raise ValueError(f"tokenizer: {str(path)!r} is not a tokenizers JSON file ({error})") from None


def encode_documents(tokenizer, texts, eos_id: int | None = None) -> torch.Tensor:
    """One int64 stream: each text's tokens followed by the end-of-text token (eos_id, default the id of
    EOS: another model's tokenizer names its own)."""
    eos = tokenizer.token_to_id(EOS) if eos_id is None else arguments.count("eos_id", eos_id, "dimension",
                                                                             minimum=0)
    if eos is None:
        raise ValueError(f"tokenizer must have the special token {EOS!r} (or give eos_id)")
    _check_texts(texts)
    ids = []
    for encoding in tokenizer.encode_batch(list(texts), add_special_tokens=False):
        ids.extend(encoding.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.int64)
