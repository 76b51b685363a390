"""Where a night's digest and a release gate's verdict are announced, beside the copy that is
always kept in the result store. ``Notifier`` is the seam (Slack is the one built in); a
deployment without Slack credentials has none, and the store's copy is all there is.

One failure policy for every announcement (:func:`announce`): a notifier that fails is
logged with its traceback and said in what the task returns, never raised -- the results, the
digest file and a release gate's verdict stand without it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence

from slack_sdk.errors import SlackApiError, SlackClientError

from servebench.connections import slack_credentials
from servebench.errors import NotificationError
from servebench.notify.slack import post_digest
from servebench.settings import Settings

log = logging.getLogger(__name__)

Chart = tuple[str, str, bytes]  # (title, filename, png)


class Notifier(ABC):
    """A channel people read: ``post`` delivers a Markdown message (and its charts)."""

    name: str  # where it posts, for the log (``Slack #channel``)

    @abstractmethod
    def post(self, markdown: str, files: Sequence[Chart] = ()) -> str:
        """Deliver; where it went (``Slack #channel (ts=...)``). Raises NotificationError."""


class SlackNotifier(Notifier):
    """Slack Web API (slack-sdk): the message, then the charts in its thread."""

    def __init__(self, token: str, channel: str, base_url: str | None = None):
        self.token, self.channel, self.base_url = token, channel, base_url
        self.name = f"Slack {channel}"

    def post(self, markdown: str, files: Sequence[Chart] = ()) -> str:
        try:
            ts = post_digest(markdown, token=self.token, channel=self.channel,
                             base_url=self.base_url, files=list(files))
        except (SlackClientError, OSError) as exc:
            reason = exc.response.get("error") if isinstance(exc, SlackApiError) else str(exc)
            raise NotificationError(f"Slack {self.channel} failed: {reason}") from exc
        return f"Slack {self.channel} (ts={ts})"


def notifier_for(settings: Settings) -> Notifier | None:
    """The deployment's notifier: Slack where a token is configured ($SLACK_BOT_TOKEN or the
    Airflow Slack connection), else none."""
    token, base_url = slack_credentials(settings)
    if not token:
        log.info("no Slack token configured: announcements stay in the result store")
        return None
    return SlackNotifier(token, settings.slack_channel, base_url)


def announce(notifier: Notifier | None, what: str, markdown: str,
             files: Sequence[Chart] = ()) -> str:
    """Post ``what`` (``the digest``, ``the release gate's verdict``) through ``notifier``;
    what to append to where the message was kept: `` and <where>``, `` (<why it failed>)``,
    or nothing without a notifier."""
    if notifier is None:
        return ""
    try:
        return " and " + notifier.post(markdown, files)
    except NotificationError as exc:
        # the copy in the store stands
        log.exception("posting %s to %s failed", what, notifier.name)
        return f" ({exc})"
