"""Tokenizers used to build prompts of exact token lengths.

The serving engine's own tokenizer endpoints where the stack has them (llama.cpp, vLLM,
SGLang: :class:`TokenizeApi`, one per dialect), otherwise the checkpoint's ``tokenizer.json``
through Hugging Face ``tokenizers`` (no torch needed) where it really is on the worker: a local
model folder, or the Hugging Face cache (:func:`local_tokenizer_file`). Which one a variant
will use is decided at plan time (:func:`tokenizer_problem`), so a target without any fails
there, named, instead of every cell failing at run time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from servebench.hub import hub_cache_dir

log = logging.getLogger(__name__)

# Servers close a kept-alive connection after about 5 s idle (uvicorn's default, which vLLM and
# SGLang keep; cpp-httplib's, under llama-server), the same as httpx's own expiry, so a request
# sent on a connection as the server closes it meets "Server disconnected without sending a
# response". Idle connections are dropped sooner here, and a request that still meets a close
# is sent once more: tokenize and detokenize change nothing on the server.
KEEPALIVE_EXPIRY_S = 2.0


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


@dataclass(frozen=True)
class TokenizeApi:
    """A server's tokenize/detokenize endpoints in its own dialect (fields of the request and
    of the answer); ``send_model``: the request names the served model (vLLM, SGLang)."""

    tokenize_path: str
    detokenize_path: str
    text_field: str  # the text to tokenize
    special_field: str  # whether special tokens (BOS) are added: always False here
    detokenized_field: str  # the text in the detokenize answer
    send_model: bool = False


# llama.cpp tools/server: {"content", "add_special"} -> {"tokens"}; {"tokens"} -> {"content"}
LLAMA_CPP_TOKENIZE = TokenizeApi("/tokenize", "/detokenize", "content", "add_special", "content")
# vLLM entrypoints/serve/tokenize: {"model", "prompt", "add_special_tokens"} -> {"tokens"};
# {"model", "tokens"} -> {"prompt"}
VLLM_TOKENIZE = TokenizeApi("/tokenize", "/detokenize", "prompt", "add_special_tokens",
                            "prompt", send_model=True)
# SGLang entrypoints/openai/serving_tokenize: vLLM's request, {"text"} from /v1/detokenize
SGLANG_TOKENIZE = TokenizeApi("/v1/tokenize", "/v1/detokenize", "prompt", "add_special_tokens",
                              "text", send_model=True)


class ServerTokenizer:
    """A serving engine's own tokenizer, over its :class:`TokenizeApi`."""

    def __init__(self, base_url: str, api: TokenizeApi = LLAMA_CPP_TOKENIZE, *,
                 model: str | None = None, headers: dict | None = None, timeout_s: float = 30.0):
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s,
                                    limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S))
        self._api = api
        self._model = {"model": model} if api.send_model and model else {}

    def encode(self, text: str) -> list[int]:
        return self._post(self._api.tokenize_path, {
            **self._model, self._api.text_field: text, self._api.special_field: False})["tokens"]

    def decode(self, ids: list[int]) -> str:
        answer = self._post(self._api.detokenize_path, {**self._model, "tokens": ids})
        return answer[self._api.detokenized_field]

    def _post(self, path: str, body: dict) -> dict:
        try:
            resp = self._client.post(path, json=body)
        except httpx.RemoteProtocolError as exc:  # closed as it was sent: once more, anew
            log.info("%s: %s; sending it once more", path, exc)
            resp = self._client.post(path, json=body)
        resp.raise_for_status()
        return resp.json()

    def close(self) -> None:
        self._client.close()


def local_tokenizer_file(model: str, project_root: Path, revision: str | None = None
                         ) -> Path | None:
    """The ``tokenizer.json`` of ``model`` on this machine: a model folder (absolute or
    project-relative), else the Hugging Face cache's copy of the hub id (no download)."""
    folder = Path(model) if Path(model).is_absolute() else project_root / model
    if (folder / "tokenizer.json").is_file():
        return folder / "tokenizer.json"
    if folder.exists() or model.count("/") != 1:
        return None
    from huggingface_hub import try_to_load_from_cache

    # the cache this process's environment names now: huggingface_hub resolves its default
    # once, at its first import, which may predate the environment the plan runs in
    cache = os.environ.get("HF_HUB_CACHE") or str(hub_cache_dir() / "hub")
    cached = try_to_load_from_cache(model, "tokenizer.json", cache_dir=cache, revision=revision)
    return Path(cached) if isinstance(cached, str) else None


def tokenizer_problem(stack: str, api: TokenizeApi | None, model: str, project_root: Path,
                      revision: str | None = None) -> str | None:
    """Why prompts for ``model`` on ``stack`` could not be cut to exact lengths (None: the
    server's own tokenizer will, or the checkpoint's is on this machine)."""
    if api is not None or local_tokenizer_file(model, project_root, revision) is not None:
        return None
    return (f"no tokenizer to build prompts of exact lengths: {stack}'s server cannot both "
            f"tokenize and detokenize, and {model!r} is neither a folder with tokenizer.json "
            "nor a hub id in this worker's Hugging Face cache (set the variant's tokenizer to "
            "one, or put the model's there: `hf download REPO tokenizer.json`)")


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
