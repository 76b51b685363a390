"""A hosted OpenAI-compatible API: nothing is launched, the provisioner treats it as static.

Configured by ``VariantSpec.endpoint`` (:class:`~servebench.config.EndpointSpec`):

* where: an Airflow connection (``conn_id``; host = base URL incl. ``/v1``, password = API
  key), else ``base_url`` plus the key from the environment variable ``api_key_env``. Keys are
  resolved when the endpoint is used, never stored in the spec, settings or provenance.
* ``model`` of the variant is the provider's model name and must come back in responses.
* ``dialect``: ``openai`` sends only fields of the OpenAI Chat Completions schema
  (openai-python ``CompletionCreateParams``: ``max_completion_tokens``, ``temperature``,
  ``top_p``, ``seed``, ``stream_options.include_usage``). top_k / min_p / repetition_penalty
  do not exist there, and output length cannot be forced (no ``ignore_eos``/``min_tokens``;
  ``logit_bias`` against EOS needs the provider's tokenizer ids and is not relied on).
  ``vllm`` is for providers that front vLLM/SGLang and accept their extras: exact length
  via ``ignore_eos`` + ``min_tokens``, and top_k, min_p, repetition_penalty.

Prefix-cache hits come per request as ``usage.prompt_tokens_details.cached_tokens``
(:func:`~servebench.stacks.adapter.cached_prompt_tokens`); there is no ``/metrics``.
"""

from __future__ import annotations

import os

from servebench.config import EndpointSpec, SamplingSpec, VariantSpec
from servebench.endpoint import Endpoint, connection, locate
from servebench.settings import Settings
from servebench.stacks.adapter import (
    ContainerLaunch,
    LaunchSpec,
    StackAdapter,
    chat_request,
    register_stack,
    vllm_style_sampling,
)

EXACT_LENGTH_PROBLEM = (
    "field endpoint.dialect 'openai': openai_api cannot force exact output length (the OpenAI "
    "schema has no ignore_eos/min_tokens); use dialect 'vllm' only if the provider honours "
    "ignore_eos/min_tokens"
)


@register_stack
class OpenAIApiStack(StackAdapter):
    name = "openai_api"
    engine = "openai-api"
    chat_path = "/chat/completions"  # base URLs end in /v1, as openai-python's do
    can_force_length = False  # only with endpoint.dialect 'vllm' (forces_length)
    natural_length_reason = ("the OpenAI schema has no ignore_eos/min_tokens; dialect 'vllm' "
                             "for a provider that honours them")

    def forces_length(self, variant: VariantSpec) -> bool:
        return variant.endpoint is not None and variant.endpoint.dialect == "vllm"

    def check(self, variant: VariantSpec, settings: Settings) -> list[str]:
        ep = variant.endpoint
        if ep is None:
            return ["field endpoint: openai_api needs endpoint (base_url or conn_id) to call"]
        problems = []
        if not variant.prefix_caching:
            problems.append("field prefix_caching: openai_api cannot turn a provider's prompt "
                            "caching off")
        if ep.conn_id:
            from airflow.sdk.exceptions import AirflowNotFoundException

            try:
                connection(ep.conn_id)
            except AirflowNotFoundException as exc:
                problems.append(f"field endpoint.conn_id {ep.conn_id!r}: openai_api cannot read "
                                f"the Airflow connection ({type(exc).__name__}: {exc})")
        elif ep.api_key_env and not os.environ.get(ep.api_key_env):
            problems.append(f"field endpoint.api_key_env: openai_api needs the environment "
                            f"variable {ep.api_key_env} set")
        return problems

    @staticmethod
    def _openai_problems(sampling: SamplingSpec) -> list[str]:
        out = []
        for field_name, neutral in (("top_k", 0), ("min_p", 0.0), ("repetition_penalty", 1.0)):
            if getattr(sampling, field_name) != neutral:
                out.append(f"field sampling.{field_name}: openai_api dialect 'openai' cannot "
                           f"carry it (only {neutral!r} is comparable)")
        return out

    def static_endpoint(self, variant: VariantSpec, settings: Settings) -> Endpoint:
        ep: EndpointSpec | None = variant.endpoint
        if ep is None:
            raise ValueError("openai_api: field endpoint is not set")
        try:
            base_url, headers = locate(ep)
        except ValueError as exc:
            raise ValueError(f"openai_api: {exc}") from exc
        return Endpoint(base_url, variant.model, self.chat_path, headers=headers)

    def local_launch(
        self, variant: VariantSpec, *, host: str, port: int, settings: Settings
    ) -> LaunchSpec:
        raise RuntimeError(
            f"openai_api variant {variant.name!r} is a hosted endpoint: nothing to launch; "
            "provision it as a static endpoint (StackAdapter.static_endpoint)"
        )

    def container_launch(
        self, variant: VariantSpec, *, port: int, settings: Settings
    ) -> ContainerLaunch:
        raise RuntimeError(
            f"openai_api variant {variant.name!r} is a hosted endpoint: nothing to launch; "
            "provision it as a static endpoint (StackAdapter.static_endpoint)"
        )

    def chat_body(
        self,
        *,
        served_model: str,
        messages: list[dict],
        sampling: SamplingSpec,
        max_tokens: int,
        force_length: bool,
        variant: VariantSpec,
    ) -> dict:
        dialect = variant.endpoint.dialect if variant.endpoint else "openai"
        if dialect == "openai":
            problems = self._openai_problems(sampling)
            if force_length:
                problems.append(EXACT_LENGTH_PROBLEM)
            if problems:
                raise ValueError("; ".join(problems))
            # max_tokens is deprecated in the OpenAI API and rejected by its reasoning models
            return chat_request(served_model=served_model, messages=messages, sampling=sampling,
                                max_tokens=max_tokens, length_field="max_completion_tokens")
        body = chat_request(served_model=served_model, messages=messages, sampling=sampling,
                            max_tokens=max_tokens)
        body.update(vllm_style_sampling(sampling, max_tokens=max_tokens,
                                        force_length=force_length, top_k_disabled=-1))
        return body
