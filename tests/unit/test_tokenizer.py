"""A serving engine's own tokenizer over its tokenize dialect: SGLang's, against a loopback
stand-in shaped like SGLang's own handlers, cuts prompts of exact lengths."""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from servebench.config import FixedWorkload
from servebench.settings import PROJECT_ROOT
from servebench.stacks import get_stack
from servebench.tokenizer import (
    SGLANG_TOKENIZE,
    VLLM_TOKENIZE,
    FileTokenizer,
    ServerTokenizer,
    text_of_length,
)
from servebench.workloads import build_prompts
from tokenizers import Tokenizer as HFTokenizer

CHECKPOINT = PROJECT_ROOT / "include/models/adder-3m"
SERVED = "adder"
BOS = 1  # the checkpoint's <s>


class SglangStandIn:
    """SGLang's tokenizer routes as its HTTP server serves them (sgl-project/sglang,
    python/sglang/srt/entrypoints/http_server.py: ``openai_v1_tokenize`` on ``/v1/tokenize``
    and ``/tokenize``, ``openai_v1_detokenize`` on ``/v1/detokenize`` and ``/detokenize``),
    with the request and answer models of python/sglang/srt/entrypoints/openai/protocol.py
    (004c82e) and the handlers of entrypoints/openai/serving_tokenize.py (0351c1f):

    - TokenizeRequest: ``model`` (default), exactly one of ``prompt`` (str or list of str) and
      ``messages``, ``add_special_tokens`` (default true: the tokenizer's BOS is added);
      extra fields allowed. Answer: ``tokens``, ``count``, ``max_model_len``.
    - DetokenizeRequest: ``model`` (default), ``tokens`` (required), ``skip_special_tokens``
      (default true). Answer: ``text``.

    A request the models refuse gets FastAPI's 422. The tokenizer is the local checkpoint's;
    every request is kept (``requests``). A WSGI app on the standard library's loopback
    server, one request at a time."""

    def __init__(self) -> None:
        self.tok = HFTokenizer.from_file(str(CHECKPOINT / "tokenizer.json"))
        self.requests: list[tuple[str, dict]] = []
        self.httpd = make_server("127.0.0.1", 0, self.app, handler_class=_Quiet)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}"

    def app(self, environ: dict, start_response) -> list[bytes]:
        path = environ["PATH_INFO"]
        body = json.loads(environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])))
        self.requests.append((path, body))
        route = {"/v1/tokenize": self.tokenize, "/tokenize": self.tokenize,
                 "/v1/detokenize": self.detokenize, "/detokenize": self.detokenize}.get(path)
        status, payload = route(body) if route else (404, {"detail": "Not Found"})
        data = json.dumps(payload).encode()
        start_response(f"{status} {HTTPStatus(status).phrase}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def tokenize(self, body: dict) -> tuple[int, dict]:
        prompt = body.get("prompt")
        if (prompt is None) == (body.get("messages") is None):
            return 422, {"detail": "Exactly one of 'prompt' or 'messages' must be provided."}
        if not isinstance(prompt, str):
            return 422, {"detail": "this stand-in takes a single prompt"}
        ids = self.tok.encode(prompt, add_special_tokens=False).ids
        if body.get("add_special_tokens", True):
            ids = [BOS, *ids]
        return 200, {"tokens": ids, "count": len(ids), "max_model_len": 512}

    def detokenize(self, body: dict) -> tuple[int, dict]:
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return 422, {"detail": "field required: tokens (a list of integers)"}
        skip = body.get("skip_special_tokens", True)
        return 200, {"text": self.tok.decode(tokens, skip_special_tokens=skip)}


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def sglang():
    stand_in = SglangStandIn()
    thread = threading.Thread(target=stand_in.httpd.serve_forever, daemon=True)
    thread.start()
    yield stand_in
    stand_in.httpd.shutdown()
    stand_in.httpd.server_close()


def test_the_sglang_stack_speaks_sglangs_dialect():
    assert get_stack("sglang").tokenize_api is SGLANG_TOKENIZE


def test_sglangs_tokenizer_cuts_prompts_of_exact_lengths(sglang):
    """Prompts built through SGLang's endpoints have exactly the lengths asked, counted by the
    checkpoint's own tokenizer, and every request was one SGLang's models accept."""
    tokenizer = ServerTokenizer(sglang.base_url, SGLANG_TOKENIZE, model=SERVED)
    truth = FileTokenizer(CHECKPOINT)
    try:
        source = " ".join(f"{a}+{b}={a + b}" for a in range(40) for b in range(3))
        for n in (5, 17, 64):
            assert len(truth.encode(text_of_length(tokenizer, source, n))) == n
        workload = FixedWorkload(kind="fixed", name="f", input_tokens=48, output_tokens=8,
                                 num_requests=4)
        items = build_prompts(workload, tokenizer, seed=7, key="test:f")
    finally:
        tokenizer.close()
    assert len(items) == 4
    for item in items:
        [message] = item.messages
        assert len(truth.encode(message["content"])) == 48
    paths = {path for path, _ in sglang.requests}
    assert paths == {"/v1/tokenize", "/v1/detokenize"}
    for path, body in sglang.requests:
        assert body["model"] == SERVED
        if path == "/v1/tokenize":
            # no BOS: a prompt's length is its text's, as the server will count it
            assert set(body) == {"model", "prompt", "add_special_tokens"}
            assert body["add_special_tokens"] is False
        else:
            assert set(body) == {"model", "tokens"}


def test_another_engines_dialect_does_not_pass_for_sglangs(sglang):
    """The stand-in holds a client to SGLang's shapes: vLLM's dialect (SGLang serves its
    paths too) reads the detokenized text from ``prompt``, which SGLang's answer lacks."""
    tokenizer = ServerTokenizer(sglang.base_url, VLLM_TOKENIZE, model=SERVED)
    try:
        ids = tokenizer.encode("1+2=")
        with pytest.raises(KeyError, match="prompt"):
            tokenizer.decode(ids)
    finally:
        tokenizer.close()


class _ClosesOnce(BaseHTTPRequestHandler):
    """llama.cpp's tokenize route, except that the server's first request is met as a server
    closing an idle kept-alive connection meets it: the socket closes, no answer sent."""

    protocol_version = "HTTP/1.1"
    tok: ClassVar = HFTokenizer.from_file(str(CHECKPOINT / "tokenizer.json"))
    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(body["content"])
        if len(self.seen) == 1:
            self.close_connection = True
            return
        data = json.dumps({"tokens": self.tok.encode(body["content"],
                                                     add_special_tokens=False).ids}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_a_request_met_by_a_closing_connection_is_sent_once_more():
    """A server closing a kept-alive connection as a tokenize request goes out is not a failed
    workload: the request (which changes nothing) goes once more, on a new connection."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ClosesOnce)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    tokenizer = ServerTokenizer(f"http://127.0.0.1:{httpd.server_port}")
    try:
        ids = tokenizer.encode("12+34=46")
    finally:
        tokenizer.close()
        httpd.shutdown()
        httpd.server_close()
    assert ids == FileTokenizer(CHECKPOINT).encode("12+34=46")
    assert _ClosesOnce.seen == ["12+34=46", "12+34=46"]
