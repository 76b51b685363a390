"""Post the Markdown digest to Slack (slack_sdk.WebClient), its charts in the thread, or write
it to a file.

Block Kit kept simple: one header block, then mrkdwn sections of at most 3000 characters (Slack's
section text limit), at most 50 blocks per message (more go to the thread). Slack's mrkdwn is not
Markdown, so ``to_mrkdwn`` converts headings, bold and links, and wraps pipe tables in code
blocks so their padded columns stay aligned. The token is only handed to WebClient, whose debug
logging redacts the Authorization header; it is never logged or put in the message.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

log = logging.getLogger(__name__)

RATE_LIMIT_RETRIES = 3  # 429s honoured (Retry-After) before the post gives up

SECTION_LIMIT = 3000
HEADER_LIMIT = 150
BLOCKS_PER_MESSAGE = 50
FENCE = "```"

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
# a file beside the digest (a chart) means nothing in Slack: the charts go into the thread
_LOCAL_LINK = re.compile(r" ?\(\[chart\]\((?![a-z]+://)[^)\s]+\)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inline(line: str) -> str:
    line = _LOCAL_LINK.sub("", line)
    line = _IMAGE.sub(lambda m: f"{m.group(1)} (chart in the thread)", line)
    line = _escape(line)
    line = _LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1)}>", line)
    line = _BOLD.sub(r"*\1*", line)
    heading = re.match(r"#{1,6}\s+(.*)", line)
    if heading:
        return f"*{heading.group(1).strip()}*"
    if line.startswith(("- ", "* ")):
        return "• " + line[2:]
    return line


def to_mrkdwn(markdown: str) -> str:
    """Markdown (as rendered by notify.digest) -> Slack mrkdwn."""
    out: list[str] = []
    in_table = in_code = False
    for line in markdown.splitlines():
        if line.strip().startswith(FENCE):
            in_code = not in_code
            out.append(FENCE)
            continue
        if in_code:
            out.append(_escape(line))
            continue
        is_table = line.lstrip().startswith("|")
        if is_table != in_table:
            out.append(FENCE)
            in_table = is_table
        out.append(_escape(line) if is_table else _inline(line))
    if in_table or in_code:
        out.append(FENCE)
    return "\n".join(out)


def _hard_wrap(lines: list[str], width: int) -> list[str]:
    out: list[str] = []
    for line in lines:
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return out


def split_sections(text: str, limit: int = SECTION_LIMIT) -> list[str]:
    """Split on line boundaries into chunks <= limit; code blocks are closed and reopened."""
    chunks: list[str] = []
    cur: list[str] = []
    size = 0
    in_fence = False

    def flush() -> None:
        nonlocal cur, size
        body = "\n".join(cur + ([FENCE] if in_fence else [])).strip("\n")
        if body.strip() and body.strip() != f"{FENCE}\n{FENCE}":
            chunks.append(body)
        cur = [FENCE] if in_fence else []
        size = len(FENCE) if in_fence else 0

    for line in _hard_wrap(text.splitlines(), limit - 2 * (len(FENCE) + 1)):
        toggles = line.strip() == FENCE
        open_after = in_fence != toggles
        need = size + (1 if cur else 0) + len(line) + (len(FENCE) + 1 if open_after else 0)
        if cur and need > limit:
            flush()
        size += (1 if cur else 0) + len(line)
        cur.append(line)
        in_fence = open_after
    flush()
    return chunks


def build_blocks(markdown: str) -> tuple[str, list[dict]]:
    """(fallback text, blocks): the first '# ' heading becomes the header block."""
    lines = markdown.strip().splitlines()
    title = "servebench digest"
    if lines and lines[0].startswith("# "):
        title = lines.pop(0)[2:].strip() or title
    title = title[:HEADER_LIMIT]
    blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": title}}]
    for chunk in split_sections(to_mrkdwn("\n".join(lines))):
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": chunk}})
    return title, blocks


def post_digest(
    markdown: str, *, token: str | None, channel: str, base_url: str | None = None,
    files: list[tuple[str, str, bytes]] = (),
) -> str | None:
    """Post to ``channel``, then upload ``files`` ((title, filename, bytes): the charts) into
    the message's thread with files_upload_v2; returns the message ts, or None (nothing
    posted) without a token. 429s are retried after their Retry-After; a digest longer than
    one message continues in the thread, never cut."""
    if not token:
        log.info("no Slack token configured; digest not posted")
        return None
    kwargs = {"base_url": base_url.rstrip("/") + "/"} if base_url else {}
    client = WebClient(token=token, **kwargs)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES))
    title, blocks = build_blocks(markdown)
    first_ts: str | None = None
    channel_id = channel
    for start in range(0, len(blocks), BLOCKS_PER_MESSAGE):
        resp = client.chat_postMessage(
            channel=channel,
            text=title,
            blocks=blocks[start : start + BLOCKS_PER_MESSAGE],
            thread_ts=first_ts,
            unfurl_links=False,
        )
        first_ts = first_ts or resp["ts"]
        channel_id = resp.get("channel") or channel  # uploads need the id, not "#name"
    if files:
        client.files_upload_v2(
            file_uploads=[{"title": t, "filename": name, "content": data}
                          for t, name, data in files],
            channel=channel_id, thread_ts=first_ts,
        )
    log.info("posted digest to %s (ts=%s, %d blocks, %d charts)", channel, first_ts,
             len(blocks), len(files))
    return first_ts


def write_digest(markdown: str, path: str | Path) -> Path:
    """Write the digest to a file (the no-token default); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(markdown, encoding="utf-8")
    log.info("wrote digest to %s", p)
    return p
