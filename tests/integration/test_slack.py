"""post_digest against a local HTTP server that speaks Slack's chat.postMessage."""
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

from servebench.notify.slack import (
    SECTION_LIMIT,
    build_blocks,
    post_digest,
    split_sections,
    write_digest,
)

pytestmark = pytest.mark.integration
TOKEN = "xoxb-secret-test-token-123"


@pytest.fixture
def slack_server():
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            if self.headers.get("Content-Type", "").startswith("application/json"):
                body = json.loads(raw)
            else:
                body = {k: v[0] for k, v in parse_qs(raw).items()}
            calls.append({"path": self.path, "auth": self.headers.get("Authorization"),
                          "body": body})
            reply = json.dumps({"ok": True, "channel": "C1", "ts": f"1700000000.{len(calls):06d}"})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(reply.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api", calls
    finally:
        server.shutdown()
        server.server_close()


DIGEST = """# servebench digest: nightly (2025-03-01)

- **run**: `scheduled__2025-03-01T00:00:00+00:00`

## cpu (llama.cpp)

| variant | conc | TTFT p50 |
|---------|-----:|---------:|
| q8_0    |    1 |     12.3 |

## Invalid and failed cells

- **invalid** `cpu / q4 / chat / c=1`: finish_reason <eos> & stop
"""


def test_post_digest_sends_blocks_and_hides_token(slack_server, caplog):
    url, calls = slack_server
    caplog.set_level(logging.DEBUG)
    ts = post_digest(DIGEST, token=TOKEN, channel="#bench", base_url=url)
    assert ts == "1700000000.000001"
    assert len(calls) == 1
    call = calls[0]
    assert call["path"] == "/api/chat.postMessage"
    assert call["auth"] == f"Bearer {TOKEN}"  # the token travels only in the header
    body = call["body"]
    assert body["channel"] == "#bench"
    blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text",
                                                    "text": "servebench digest: nightly (2025-03-01)"}}
    sections = [b["text"]["text"] for b in blocks[1:]]
    assert all(b["type"] == "section" and b["text"]["type"] == "mrkdwn" for b in blocks[1:])
    text = "\n".join(sections)
    assert "*cpu (llama.cpp)*" in text and "```\n| variant" in text
    assert "&lt;eos&gt; &amp; stop" in text and "*invalid*" in text
    assert TOKEN not in json.dumps(body)
    assert TOKEN not in caplog.text


def test_long_digest_splits_into_sections(slack_server):
    url, calls = slack_server
    rows = "\n".join(f"| v{i:04d} | {i:4d} | {i * 1.5:8.1f} |" for i in range(400))
    md = "# big\n\n## t\n\n| variant | conc | TTFT |\n|---|---:|---:|\n" + rows + "\n"
    post_digest(md, token=TOKEN, channel="C1", base_url=url)
    blocks = calls[0]["body"]["blocks"]
    sections = [b["text"]["text"] for b in blocks[1:]]
    assert len(sections) >= 4  # ~12,000 characters of table
    assert all(len(s) <= SECTION_LIMIT for s in sections)
    # the table is cut into complete code blocks, no row lost or broken
    assert sections[0].startswith("*t*\n\n```")
    for s in sections:
        assert s.endswith("```") and s.count("```") == 2
    table_lines = [l for s in sections for l in s.splitlines() if l.startswith("| v0")]
    assert table_lines == rows.splitlines()


def test_no_token_posts_nothing(slack_server, tmp_path):
    url, calls = slack_server
    assert post_digest(DIGEST, token=None, channel="C1", base_url=url) is None
    assert calls == []
    p = write_digest(DIGEST, tmp_path / "out" / "digest.md")
    assert p.read_text() == DIGEST


def test_split_sections_unit():
    text = "\n".join(["x" * 50] * 200)
    parts = split_sections(text, limit=500)
    assert all(len(p) <= 500 for p in parts) and "\n".join(parts) == text
    title, blocks = build_blocks("no heading here")
    assert title == "servebench digest" and blocks[1]["text"]["text"] == "no heading here"
