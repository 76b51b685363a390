"""docker-compose.yaml and the Dockerfile checked against each other and against what the code
reads (no Docker engine runs here, so `docker compose up` itself is not run): the services and
their health checks, every Airflow service waiting for the database, the broker and the
results bucket, connections as AIRFLOW_CONN_* that the Amazon provider parses to MinIO, the
SERVEBENCH_* settings the code has, the mounted folders where Airflow and servebench look,
and the llama-server and GGUFs the local sweep needs where the image puts them."""

import re
from pathlib import Path

import pytest
import yaml
from servebench.config import load_sweep
from servebench.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_SERVICES = ("airflow-init", "airflow-apiserver", "airflow-scheduler",
                    "airflow-dag-processor", "airflow-worker", "airflow-triggerer")


def _interpolate(value):
    """Compose's ``${VAR:-default}`` with the defaults (no .env) and ``$$`` as ``$``."""
    if isinstance(value, str):
        value = re.sub(r"(?<!\$)\$\{(\w+):-([^}]*)\}", lambda m: m.group(2), value)
        return value.replace("$$", "$")
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    return value


@pytest.fixture(scope="module")
def compose() -> dict:
    return _interpolate(yaml.safe_load((ROOT / "docker-compose.yaml").read_text()))


@pytest.fixture(scope="module")
def dockerfile() -> dict:
    """The final stage's ENV, and each stage's name -> its lines."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages, name = {}, None
    for line in text.splitlines():
        if line.startswith("FROM "):
            name = line.split(" AS ")[1].strip() if " AS " in line else "final"
            stages[name] = []
        elif name:
            stages[name].append(line.strip())
    env = {}
    for line in stages["final"]:
        if line.startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return {"stages": stages, "env": env}


def _env(compose: dict, service: str) -> dict:
    return compose["services"][service]["environment"]


def test_every_service_is_there_with_its_health_check(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "minio", "minio-init", *AIRFLOW_SERVICES}
    for name in ("postgres", "redis", "minio", "airflow-apiserver"):
        assert services[name]["healthcheck"]["test"], name
    assert "/api/v2/monitor/health" in " ".join(services["airflow-apiserver"]["healthcheck"]
                                                ["test"])


def test_airflow_waits_for_its_database_broker_and_the_results_bucket(compose):
    services = compose["services"]
    for name in AIRFLOW_SERVICES:
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["minio-init"]["condition"] == "service_completed_successfully", name
        if name != "airflow-init":
            assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
        assert services[name]["image"] == "servebench-airflow:latest" and \
            services[name]["build"]["context"] == "."
        # the image records the suite's commit (ARG SUITE_GIT_SHA -> SERVEBENCH_SUITE_GIT_SHA)
        assert "SUITE_GIT_SHA" in services[name]["build"]["args"]
    assert services["minio-init"]["depends_on"]["minio"]["condition"] == "service_healthy"
    # the worker registers with the API server it runs tasks through
    assert services["airflow-worker"]["depends_on"]["airflow-apiserver"]["condition"] == \
        "service_healthy"


def test_the_executor_database_and_broker_are_the_services(compose):
    env, pg = _env(compose, "airflow-scheduler"), _env(compose, "postgres")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    url = f"{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres/{pg['POSTGRES_DB']}"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"postgresql+psycopg2://{url}"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == f"db+postgresql://{url}"
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://") and \
        "@redis:6379" in env["AIRFLOW__CELERY__BROKER_URL"]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == \
        "http://airflow-apiserver:8080/execution/"
    assert "8080:8080" in compose["services"]["airflow-apiserver"]["ports"]
    assert _env(compose, "airflow-worker")["AIRFLOW__CELERY__BROKER_URL"] == \
        env["AIRFLOW__CELERY__BROKER_URL"]  # the worker's own block keeps the common one


def test_the_results_store_is_the_bucket_minio_init_makes_reached_through_the_connection(
        compose):
    from airflow.models import Connection
    from airflow.providers.amazon.aws.utils.connection_wrapper import (
        AwsConnectionWrapper,
    )

    env, minio = _env(compose, "airflow-worker"), _env(compose, "minio")
    bucket = re.search(r"mc mb --ignore-existing local/([\w.-]+)",
                       compose["services"]["minio-init"]["entrypoint"]).group(1)
    assert env["SERVEBENCH_RESULTS_URI"].startswith(f"s3://{bucket}/")
    # servebench.connections.open_store reads Settings.aws_conn_id through the Amazon provider
    conn_id = Settings.model_fields["aws_conn_id"].default
    conn = Connection.from_json(env[f"AIRFLOW_CONN_{conn_id.upper()}"], conn_id=conn_id)
    wrapper = AwsConnectionWrapper(conn)
    assert wrapper.endpoint_url == "http://minio:9000"
    assert (conn.login, conn.password) == (minio["MINIO_ROOT_USER"],
                                           minio["MINIO_ROOT_PASSWORD"])
    assert not any(k.startswith("AWS_") for k in env)  # credentials only in the connection


def test_every_servebench_setting_is_one_the_code_reads(compose, dockerfile, monkeypatch):
    env = {**dockerfile["env"], **_env(compose, "airflow-worker")}
    ours = {k: v for k, v in env.items() if k.startswith("SERVEBENCH_")}
    fields = {f"SERVEBENCH_{name.upper()}" for name in Settings.model_fields}
    assert set(ours) <= fields, set(ours) - fields
    for key, value in ours.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.results_uri == "s3://servebench/results"
    assert str(settings.project_root) == "/opt/servebench"
    assert str(settings.llama_bin) == "/opt/llama/current/build/bin"
    assert dockerfile["env"]["SERVEBENCH_SUITE_GIT_SHA"] == "${SUITE_GIT_SHA}"


def test_the_mounts_are_where_airflow_and_servebench_look(compose, dockerfile):
    env = _env(compose, "airflow-scheduler")
    mounts = dict(v.split(":", 1) for v in compose["x-airflow-common"]["volumes"])
    assert mounts["./dags"] == env["AIRFLOW__CORE__DAGS_FOLDER"]
    assert mounts["./plugins"] == env["AIRFLOW__CORE__PLUGINS_FOLDER"]
    assert mounts["./include"] == dockerfile["env"]["SERVEBENCH_PROJECT_ROOT"] + "/include"
    assert (ROOT / "plugins" / "servebench_plugin.py").is_file()


def test_the_image_serves_the_local_sweep(dockerfile):
    stages, env = dockerfile["stages"], dockerfile["env"]
    assert set(stages) == {"llama", "models", "vllm", "final"}
    llama = " ".join(stages["llama"])
    assert "scripts/build_llama_cpp.sh" in llama and "LLAMA_CPP_NATIVE=OFF" in llama
    assert "/opt/llama/current" in llama
    models = " ".join(stages["models"])
    assert "scripts/build_local_model.py" in models and "--out build/models" in models
    final = " ".join(stages["final"])
    root = env["SERVEBENCH_PROJECT_ROOT"]
    assert f"COPY --from=models --chown=airflow:root {root}/build/models {root}/build/models" \
        in final
    assert "COPY --from=llama" in final and env["SERVEBENCH_LLAMA_BIN"].startswith("/opt/llama/")
    assert f"COPY --from=models --chown=airflow:root {root}/.venv-stacks" in final
    assert env["SERVEBENCH_STACKS_VENV"] == f"{root}/.venv-stacks"
    # vLLM's CPU build, pinned, made where the final stage finds it at the same path
    assert "requirements-vllm.txt" in " ".join(stages["vllm"])
    assert f"COPY --from=vllm --chown=airflow:root {root}/.venv-vllm {root}/.venv-vllm" in final
    assert env["SERVEBENCH_VLLM_VENV"] == f"{root}/.venv-vllm"
    # llm-compressor, pinned, for the recipe variants; its pins are in every recipe's hash
    assert "scripts/setup_quant_venv.sh" in " ".join(stages["vllm"])
    assert f"COPY --from=vllm --chown=airflow:root {root}/.venv-quant {root}/.venv-quant" \
        in final and "requirements-quant.txt" in final
    assert env["SERVEBENCH_QUANT_VENV"] == f"{root}/.venv-quant"
    # every model the default sweep serves is one the image holds
    spec = load_sweep(ROOT / "include" / "sweeps" / "local.yaml")
    for target in spec.targets:
        for variant in target.variants:
            assert variant.model.startswith(("build/models/", "include/models/")), variant.model
    ggufs = {v.model for t in spec.targets for v in t.variants if v.model.endswith(".gguf")}
    script = (ROOT / "scripts" / "build_local_model.py").read_text()
    for gguf in ggufs:  # the conversion script writes adder-3m-<quant>.gguf
        quant = Path(gguf).stem.rsplit("-", 1)[1]
        assert quant == "f16" or f'"{quant}"' in script, gguf
