"""Every scorer on its edge cases, the load-time reference hook, and the LLM judge against a
tiny OpenAI-compatible server on 127.0.0.1."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from servebench.evals import judge as judge_mod
from servebench.evals.judge import (
    JudgeError,
    JudgeVerdictError,
    judge_config,
    parse_verdict,
)
from servebench.evals.scorers import (
    get_scorer,
    is_correct,
    known_scorers,
    pass_threshold,
    register_scorer,
    score_answer,
    strip_json_fence,
    validate_reference,
)


def score(name, answer, reference):
    return get_scorer(name)(answer, reference)


def test_registry_lists_every_scorer():
    assert {"exact", "normalized_exact", "numeric", "contains", "regex", "token_f1",
            "json_schema", "judge"} <= set(known_scorers())
    with pytest.raises(KeyError, match="unknown scorer 'nope'"):
        get_scorer("nope")
    assert validate_reference("nope", "x").startswith("unknown scorer 'nope'")


def test_is_correct_uses_the_entry_threshold():
    assert pass_threshold("token_f1") == 1.0
    assert is_correct("exact", 1.0) and not is_correct("exact", 0.999)
    assert not is_correct("token_f1", 0.8)
    assert not is_correct("exact", float("nan"))
    register_scorer("_lenient_test", pass_threshold=0.5)(lambda a, r: 0.5)
    assert is_correct("_lenient_test", 0.5) and not is_correct("_lenient_test", 0.49)
    with pytest.raises(ValueError, match="pass_threshold"):
        register_scorer("_bad", pass_threshold=0.0)


# ------------------------------------------------------------------ exact / normalized / contains

@pytest.mark.parametrize("name,answer,reference,want", [
    ("exact", "  26\n", "26", 1.0),
    ("exact", "26.", "26", 0.0),
    ("exact", "", "26", 0.0),
    ("exact", "", "", 1.0),
    ("exact", "café", "café", 1.0),
    ("normalized_exact", "The  Answer!", "the answer", 1.0),
    ("normalized_exact", "", "x", 0.0),
    ("contains", "I think it is Paris, France.", "paris", 1.0),
    ("contains", "London", "paris", 0.0),
])
def test_simple_scorers(name, answer, reference, want):
    assert score(name, answer, reference) == want


# ------------------------------------------------------------------ numeric

@pytest.mark.parametrize("answer,reference,want", [
    ("The answer is 42.", "42", 1.0),
    ("-3", "-3", 1.0),
    ("42.0000001", "42", 1.0),          # default relative tolerance 1e-6
    ("42.1", "42", 0.0),
    ("no number here", "42", 0.0),
    ("", "42", 0.0),
    ("pi is 3.15", "3.14±0.01", 1.0),   # absolute tolerance, inclusive
    ("pi is 3.13", "3.14 ± 0.01", 1.0),
    ("pi is 3.16", "3.14±0.01", 0.0),
    ("3.149", "3.14+-0.01", 1.0),
    ("100", "100+/-0", 1.0),
    ("101", "100±0", 0.0),
    ("-2.5", "-2.5±0.1", 1.0),
])
def test_numeric(answer, reference, want):
    assert score("numeric", answer, reference) == want


@pytest.mark.parametrize("reference", ["forty-two", "3.14±", "3.14±-0.1", "3.14±x", "nan", "inf"])
def test_numeric_bad_reference_rejected_at_load(reference):
    message = validate_reference("numeric", reference)
    assert message and "numeric reference" in message


def test_numeric_good_references_pass_the_hook():
    assert validate_reference("numeric", "42") is None
    assert validate_reference("numeric", "3.14±0.01") is None


# ------------------------------------------------------------------ regex

@pytest.mark.parametrize("answer,reference,want", [
    ("  B \n", "[A-D]", 1.0),               # stripped answer
    ("B) because", "[A-D]", 0.0),           # fullmatch, not search
    ("answer: 42", r"answer:\s*\d+", 1.0),
    ("YES", "(?i)yes", 1.0),
    ("yes", "yes|no", 1.0),
    ("", "", 1.0),
    ("", ".+", 0.0),
    ("naïve", "naïve", 1.0),
    ("line one\nline two", "(?s)line one.*two", 1.0),
])
def test_regex(answer, reference, want):
    assert score("regex", answer, reference) == want


def test_invalid_regex_rejected_at_load():
    message = validate_reference("regex", "([A-D]")
    assert message and "does not compile" in message
    assert validate_reference("regex", r"\d+") is None


# ------------------------------------------------------------------ token F1

def test_token_f1_partial_and_exact():
    # tokens: [paris, france] vs [paris] -> P=1/2, R=1 -> F1=2/3
    assert score("token_f1", "Paris, France", "Paris") == pytest.approx(2 / 3)
    assert score("token_f1", "The Eiffel Tower!", "eiffel tower") == 1.0  # articles, punct, case
    assert score("token_f1", "London", "Paris") == 0.0
    assert score("token_f1", "x b b", "b b c") == pytest.approx(2 / 3)  # multiset overlap


def test_token_f1_edge_cases():
    assert score("token_f1", "", "Paris") == 0.0
    assert score("token_f1", "   ", "") == 1.0       # both empty
    assert score("token_f1", "the", "a") == 1.0      # both empty after dropping articles
    assert score("token_f1", "Straße «München»", "STRASSE münchen") == 1.0  # casefold, Unicode punct
    assert score("token_f1", "ｐａｒｉｓ", "paris") == 1.0  # NFKC full-width


def test_token_f1_counts_correct_only_at_one():
    result = score_answer("token_f1", "Paris, France", "Paris")
    assert result.score == pytest.approx(2 / 3) and not result.correct and result.error is None
    assert score_answer("token_f1", "paris", "Paris").correct


# ------------------------------------------------------------------ JSON Schema

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
})


@pytest.mark.parametrize("answer,want", [
    ('{"name": "Ada", "age": 36}', 1.0),
    ('  \n{"name": "Ada", "age": 36}\n ', 1.0),
    ('```json\n{"name": "Ada", "age": 36}\n```', 1.0),
    ('```JSON\n{"name": "Ada", "age": 36}\n```\n', 1.0),
    ('```\n{"name": "Ada", "age": 36}\n```', 1.0),
    ('```json {"name": "Ada", "age": 36}```', 1.0),
    ('{"name": "Zoë", "age": 1}', 1.0),
    ('{"name": "Ada", "age": -1}', 0.0),         # violates minimum
    ('{"name": "Ada"}', 0.0),                     # missing required
    ('{"name": "Ada", "age": 36, "x": 1}', 0.0),  # additionalProperties
    ('Here you go: {"name": "Ada", "age": 36}', 0.0),  # prose around JSON is not allowed
    ('{"name": "Ada", "age": 36', 0.0),           # truncated
    ("", 0.0),
])
def test_json_schema(answer, want):
    assert score("json_schema", answer, SCHEMA) == want


def test_strip_json_fence_leaves_unfenced_text():
    assert strip_json_fence('  {"a": 1} ') == '{"a": 1}'
    assert strip_json_fence("```json\n[1, 2]\n```") == "[1, 2]"


@pytest.mark.parametrize("reference,needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "object or a boolean"),
    ('{"type": "no-such-type"}', "not a valid JSON Schema"),
    ('{"minimum": "zero"}', "not a valid JSON Schema"),
])
def test_invalid_schema_rejected_at_load(reference, needle):
    message = validate_reference("json_schema", reference)
    assert message and needle in message


def test_boolean_schema_is_valid():
    assert validate_reference("json_schema", "true") is None
    assert score("json_schema", "[1]", "true") == 1.0
    assert score("json_schema", "[1]", "false") == 0.0


# ------------------------------------------------------------------ LLM judge

class _JudgeServer:
    """Speaks POST /v1/chat/completions (non-streaming); replies with ``self.reply``."""

    def __init__(self):
        self.reply, self.status, self.requests = '{"correct": true}', 200, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body,
                                        "auth": self.headers.get("Authorization")})
                payload = {
                    "id": "cmpl-1", "object": "chat.completion", "created": 0,
                    "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": server.reply}}],
                } if server.status == 200 else {"error": {"message": "bad", "type": "x"}}
                data = json.dumps(payload).encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def _shared_judge_server():
    server = _JudgeServer()
    yield server
    server.close()


@pytest.fixture
def judge_server(_shared_judge_server, monkeypatch):
    server = _shared_judge_server
    server.reply, server.status, server.requests = '{"correct": true}', 200, []
    for var in (judge_mod.ENV_CONN_ID, judge_mod.ENV_SEED, judge_mod.ENV_MAX_TOKENS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(judge_mod.ENV_BASE_URL, server.base_url)
    monkeypatch.setenv(judge_mod.ENV_MODEL, "judge-model")
    monkeypatch.setenv(judge_mod.ENV_API_KEY, "sk-secret-123")
    return server


@pytest.fixture
def no_judge_env(monkeypatch):
    for var in (judge_mod.ENV_CONN_ID, judge_mod.ENV_BASE_URL, judge_mod.ENV_MODEL,
                judge_mod.ENV_API_KEY):
        monkeypatch.delenv(var, raising=False)


def test_judge_request_carries_reference_answer_and_greedy_settings(judge_server):
    assert score("judge", "It is Paris.", "Paris") == 1.0
    (req,) = judge_server.requests
    body = req["body"]
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == "Bearer sk-secret-123"
    assert body["model"] == "judge-model"
    assert body["temperature"] == 0 and body["seed"] == 0 and body["max_tokens"] == 16
    assert not body.get("stream")
    prompt = "\n".join(m["content"] for m in body["messages"])
    assert "<reference>\nParis\n</reference>" in prompt
    assert "<candidate>\nIt is Paris.\n</candidate>" in prompt


@pytest.mark.parametrize("reply,want", [
    ('{"correct": false}', 0.0),
    ('```json\n{"correct": true}\n```', 1.0),
    ("Incorrect", 0.0),
    (" correct \n", 1.0),
])
def test_judge_verdict_forms(judge_server, reply, want):
    judge_server.reply = reply
    assert score("judge", "x", "y") == want


@pytest.mark.parametrize("reply", [
    "Yes, the answer is correct.", '{"correct": "true"}', '{"verdict": true}', "", "true",
])
def test_malformed_verdict_raises_and_score_answer_records_it(judge_server, reply):
    judge_server.reply = reply
    with pytest.raises(JudgeVerdictError, match="malformed judge verdict"):
        score("judge", "x", "y")
    result = score_answer("judge", "x", "y")
    assert result.score == 0.0 and not result.correct
    assert "malformed judge verdict" in result.error


def test_judge_http_error_is_a_scorer_error_without_the_key(judge_server):
    judge_server.status = 400  # not retried by the SDK
    result = score_answer("judge", "x", "y")
    assert result.score == 0.0 and "HTTP 400" in result.error
    assert "sk-secret-123" not in result.error


def test_empty_answer_scores_zero_without_a_request(judge_server):
    assert score("judge", "  \n", "Paris") == 0.0
    assert judge_server.requests == []


def test_judge_hook_passes_when_configured_and_hides_the_key(judge_server):
    assert validate_reference("judge", "Paris") is None
    assert "judge reference is empty" in validate_reference("judge", "  ")
    assert "sk-secret-123" not in repr(judge_config())


def test_unconfigured_judge_rejected_at_load(no_judge_env):
    message = validate_reference("judge", "Paris")
    assert message and "not configured" in message
    assert judge_mod.ENV_BASE_URL in message and judge_mod.ENV_MODEL in message
    with pytest.raises(JudgeError, match="not configured"):
        score("judge", "Paris", "Paris")


def test_judge_config_from_connection_with_env_override(no_judge_env, monkeypatch):
    monkeypatch.setattr(judge_mod, "_connection",
                        lambda conn_id: ("https://judge.example/v1", "sk-conn", "conn-model"))
    monkeypatch.setenv(judge_mod.ENV_CONN_ID, "judge_default")
    cfg = judge_config()
    assert (cfg.base_url, cfg.model, cfg.api_key) == ("https://judge.example/v1", "conn-model",
                                                      "sk-conn")
    monkeypatch.setenv(judge_mod.ENV_MODEL, "env-model")
    assert judge_config().model == "env-model"


def test_unreadable_connection_rejected_at_load(no_judge_env, monkeypatch):
    def boom(conn_id):
        raise RuntimeError("password=sk-leak")

    monkeypatch.setattr(judge_mod, "_connection", boom)
    monkeypatch.setenv(judge_mod.ENV_CONN_ID, "missing_conn")
    message = validate_reference("judge", "Paris")
    assert "'missing_conn'" in message and "sk-leak" not in message


def test_parse_verdict_is_strict():
    assert parse_verdict('{"correct": true, "reason": "same city"}') is True
    for bad in (None, "maybe", "correct!", "[true]", '{"correct": 1}'):
        with pytest.raises(JudgeVerdictError):
            parse_verdict(bad)
