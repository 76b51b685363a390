"""The Hugging Face Hub: this machine's cache of it (``hub_cache_dir``), and what the Hub says
of a variant's model before anything is paid for.

A gated model (Llama, Gemma, many Mistral releases) downloads only with a token: a server
launched without one exits at once on a paid GPU. The plan asks the Hub API
(``settings.hub_endpoint``, https://huggingface.co by default) whether each hub id a
provisioned variant serves is gated, and refuses the plan when it is and the target passes no
token to the server. A model the Hub does not know (a typo, or a private one) is said too,
where the target passes no token. A Hub that cannot be asked -- an air-gapped worker, an
outage, ``hub_endpoint`` set empty -- is logged and the plan goes on: the check saves a night,
it never costs one.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
# owner/name, as the Hub names repositories (a local path or a GGUF file is none)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache_dir() -> Path:
    """This machine's Hugging Face cache folder ($HF_HOME, else ~/.cache/huggingface): what
    the containers mount for weights (a provisioned host maps it to its own folder)."""
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))


def is_hub_id(model: str) -> bool:
    """Whether ``model`` names a Hub repository rather than a file or directory here."""
    return bool(HUB_ID.match(model)) and not model.endswith(".gguf") and not Path(model).exists()


@functools.lru_cache(maxsize=256)
def hub_gating(model: str, endpoint: str) -> str | None:
    """``"gated"`` (with the Hub's mode, e.g. ``"gated (manual)"``), ``"open"``, ``"missing"``
    (no such public repository), or None when the Hub could not be asked (logged)."""
    from huggingface_hub import HfApi

    # HTTPError: the Hub's answers (HfHubHTTPError) and its HTTP client's transport errors
    from huggingface_hub.errors import HTTPError, RepositoryNotFoundError

    try:
        info = HfApi(endpoint=endpoint).model_info(model, timeout=TIMEOUT_S, token=False)
    except RepositoryNotFoundError:
        return "missing"
    except (HTTPError, OSError) as exc:
        log.warning("not checking whether %s is gated: the Hub at %s cannot be asked: %s",
                    model, endpoint, exc)
        return None
    return f"gated ({info.gated})" if info.gated else "open"


def gated_model_problems(model: str, *, token_field: str, has_token: bool,
                         endpoint: str | None) -> list[str]:
    """The plan's problems with serving hub model ``model`` from a provisioned target whose
    token setting is ``token_field`` (set: ``has_token``)."""
    if not endpoint or not is_hub_id(model):
        return []
    gating = hub_gating(model, endpoint.rstrip("/"))
    if gating == "missing" and has_token:  # private, perhaps: the server's token may read it
        log.info("%s: not public on the Hub at %s; the target's token may reach it", model,
                 endpoint)
    elif gating == "missing":
        return [f"field model {model!r}: no such public model on the Hub at {endpoint}, and "
                f"no token is passed ({token_field}) for a private one"]
    if gating and gating.startswith("gated") and not has_token:
        return [f"field {token_field}: model {model!r} is {gating} on the Hub; without a "
                "token the server cannot download it and exits at launch"]
    return []
