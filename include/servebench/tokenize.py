"""Tokenizers used to build prompts of exact token lengths.

The server's own ``/tokenize`` endpoint where the stack has one (llama.cpp), otherwise the
checkpoint's ``tokenizer.json`` through Hugging Face ``tokenizers`` (no torch needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import httpx


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class FileTokenizer:
    """A checkpoint's ``tokenizer.json``; special tokens are not added."""

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer as HFTokenizer

        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        self._tok = HFTokenizer.from_file(str(path))

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


class ServerTokenizer:
    """llama.cpp's ``POST /tokenize`` and ``POST /detokenize``."""

    def __init__(self, base_url: str, *, path: str = "/tokenize", headers: dict | None = None,
                 timeout_s: float = 30.0):
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self._path = path

    def encode(self, text: str) -> list[int]:
        resp = self._client.post(self._path, json={"content": text, "add_special": False})
        resp.raise_for_status()
        return resp.json()["tokens"]

    def decode(self, ids: list[int]) -> str:
        resp = self._client.post("/detokenize", json={"tokens": ids})
        resp.raise_for_status()
        return resp.json()["content"]

    def close(self) -> None:
        self._client.close()


def text_of_length(tokenizer: Tokenizer, source: str, n_tokens: int) -> str:
    """A prefix of ``source`` that encodes to exactly ``n_tokens`` tokens.

    Decoding a token prefix and re-encoding can merge differently at the cut, so the cut is
    moved until the round trip is exact. Raises if ``source`` is too short or no cut fits.
    """
    ids = tokenizer.encode(source)
    if len(ids) < n_tokens + 8:
        raise ValueError(f"source text has {len(ids)} tokens, need more than {n_tokens}")
    for cut in range(n_tokens, n_tokens + 8):
        text = tokenizer.decode(ids[:cut])
        got = tokenizer.encode(text)
        if len(got) == n_tokens:
            return text
        if len(got) > n_tokens:
            # drop characters from the end until it fits exactly
            for end in range(len(text) - 1, 0, -1):
                if len(tokenizer.encode(text[:end])) == n_tokens:
                    return text[:end]
            break
    raise ValueError(f"no prefix of the source encodes to exactly {n_tokens} tokens")
