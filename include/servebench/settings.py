"""Where things live, from the environment (``SERVEBENCH_*``), with local defaults.

Secrets (Slack token, S3 keys, API keys) are never settings fields that get logged: they are
read where used, from an Airflow connection or the environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from servebench.defaults import DEFAULT_SWEEP

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LLAMA_CPP_VERSION = "0.3.36"  # llama-cpp-python sdist whose vendored llama.cpp we build
# its build flavour: AMX tile kernels compiled out (scripts/build_llama_cpp.sh says why)
LLAMA_CPP_BUILD_TAG = "noamx"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servebench"


class Settings(BaseSettings):
    """Runtime settings; every field can be set as ``SERVEBENCH_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="SERVEBENCH_", extra="ignore")

    project_root: Path = Field(PROJECT_ROOT, description="root that relative spec paths use")
    sweep: str = Field(DEFAULT_SWEEP, description="default sweep spec")
    results_uri: str = Field(
        str(PROJECT_ROOT / "data"), description="local folder or s3://bucket/prefix"
    )
    s3_endpoint_url: str | None = Field(None, description="S3-compatible endpoint (MinIO)")
    aws_conn_id: str = Field("aws_default", description="Airflow AWS connection for s3://")
    work_dir: Path = Field(
        PROJECT_ROOT / "build" / "runs", description="server logs and pid files per run"
    )
    cache: Path = Field(
        _cache_dir(), description="what the suite builds once and keeps across runs (llama.cpp, "
        "quantized/<recipe hash>: each recipe's checkpoint)")
    llama_bin: Path = Field(
        _cache_dir() / f"llama.cpp-{LLAMA_CPP_VERSION}-{LLAMA_CPP_BUILD_TAG}" / "build" / "bin",
        description="folder with llama-server and llama-quantize",
    )
    stacks_venv: Path = Field(
        PROJECT_ROOT / ".venv-stacks", description="venv with transformers serve (CPU torch)"
    )
    vllm_venv: Path = Field(
        PROJECT_ROOT / ".venv-vllm", description="venv whose vLLM the local provisioner runs: "
        "the CPU build `make setup` installs, or a GPU worker's with `pip install vllm`")
    quant_venv: Path = Field(
        PROJECT_ROOT / ".venv-quant", description="venv with llm-compressor (CPU torch), which "
        "makes a recipe variant's checkpoint (requirements-quant.txt, `make quant`)")
    slack_channel: str = Field("#servebench", description="channel for the digest")
    slack_conn_id: str = Field("slack_api_default", description="Airflow Slack connection")
    airflow_url: str | None = Field(
        None, description="Airflow UI base URL for the digest's and report's links "
                          "(runs, raised lines' pages; default: Airflow's [api] base_url)")
    hub_endpoint: str | None = Field(
        "https://huggingface.co", description="the Hugging Face Hub the plan asks whether a "
        "provisioned variant's model is gated (servebench.hub); empty: not asked")
    health_timeout_s: float = Field(300.0, gt=0)
    powercap_root: Path = Field(
        Path("/sys/class/powercap"), description="where this worker's RAPL counters are "
        "(servebench.energy): a container may mount the host's sysfs elsewhere")
    suite_git_sha: str | None = Field(
        None, description="the suite's commit where there is no .git (baked into the image)")
    annotations: str = Field(
        "include/trends/annotations.yaml",
        description="expected changes that reset trend baselines (servebench.trends)",
    )

    def resolve(self, path: str | Path) -> Path:
        """A spec path made absolute against the project root."""
        p = Path(path)
        return p if p.is_absolute() else self.project_root / p


def get_settings() -> Settings:
    return Settings()
