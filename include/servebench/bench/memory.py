"""A unit's memory, as its ``units`` row records it: the weights' bytes, the KV cache's
capacity in tokens, the serving processes' peak resident and device memory, each with where
it came from or why it is missing (``servebench.memory`` says how each is measured).

Asked once per unit, after its golden set and before its server stops: the provisioner's
sample of the processes (``Provisioner.memory``), the engine's own reports (the stack
adapter's ``engine_memory`` over the server's HTTP answers and its log), and, where the engine
states no weights, the model files on this worker. The four figures are copied into each of
the unit's cells (``CELL_COLUMNS``), so the nightly series and the lever table see them.
"""

from __future__ import annotations

import logging

import httpx

from servebench.config import VariantSpec
from servebench.endpoint import Endpoint
from servebench.memory import files_bytes
from servebench.provision.interface import Provisioner
from servebench.settings import Settings
from servebench.stacks.adapter import StackAdapter

log = logging.getLogger(__name__)

# the four figures a unit's cells carry (the units row has each one's source too)
CELL_COLUMNS = ("weights_bytes", "kv_cache_tokens", "peak_rss_bytes",
                "peak_device_memory_bytes")


def _getter(endpoint: Endpoint):
    def get(path: str) -> str | None:
        try:
            response = httpx.get(endpoint.base_url + path, timeout=10.0,
                                 headers=endpoint.headers)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            log.warning("%s: no memory report from %s: %s", endpoint.name, path, exc)
            return None
        return response.text
    return get


def unit_memory(provisioner: Provisioner, adapter: StackAdapter, endpoint: Endpoint,
                variant: VariantSpec, settings: Settings) -> dict:
    """The ``units`` columns of ``endpoint``'s memory (its server still runs)."""
    sample = provisioner.memory(endpoint)
    engine = adapter.engine_memory(variant, _getter(endpoint), provisioner.server_log(endpoint))
    weights, weights_source = engine.weights_bytes, engine.weights_source
    if weights is None:
        weights = files_bytes(settings.resolve(variant.model))
        weights_source = f"the model files on disk ({variant.model})" if weights is not None \
            else (f"{variant.model} is no file or checkpoint folder on this worker, and "
                  f"{adapter.engine} stated no weights size")
    return {
        "weights_bytes": weights, "weights_source": weights_source,
        "kv_cache_tokens": engine.kv_cache_tokens, "kv_cache_source": engine.kv_cache_source,
        "peak_rss_bytes": sample.peak_rss_bytes, "peak_rss_source": sample.peak_rss_source,
        "peak_device_memory_bytes": sample.peak_device_memory_bytes,
        "peak_device_memory_source": sample.peak_device_memory_source,
    }


def cell_memory(unit: dict) -> dict:
    """The unit's figures its cells carry (none for a unit that never served)."""
    return {column: unit.get(column) for column in CELL_COLUMNS}
