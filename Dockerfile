# The image docker-compose.yaml runs: Airflow 3 with the servebench library, and what the local
# default sweep (include/sweeps/local.yaml) serves with -- llama-server and the project's GGUFs,
# the CPU stacks venv for `transformers serve` and vLLM's CPU build -- so `docker compose up` can
# run the demo. GPU builds of the engines (vLLM, SGLang, TGI, TensorRT-LLM) are not here: they run
# in their own images on the hosts a provision kind (ec2, kubernetes) acquires
# (docs/provisioning.md).
#
# Four stages, the same scripts `make setup` runs:
#   llama   llama-server + llama-quantize from the llama-cpp-python sdist (portable: AVX2, not
#           this build machine's CPU; AMX kernels off, scripts/build_llama_cpp.sh says why)
#   models  the stacks venv (CPU torch, transformers) and the GGUFs converted from the
#           committed checkpoint (include/models/adder-3m), each launched once by the script
#   vllm    vLLM's CPU build venv (requirements-vllm.txt, every package pinned) and beside
#           it llm-compressor's (requirements-quant.txt, pinned too), which makes the
#           checkpoints of the sweeps' recipe variants at run time (servebench.quantize)
#   final   apache/airflow + requirements.txt + the servebench package + all of the above
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11

FROM ${PYTHON_IMAGE} AS llama
RUN apt-get update && apt-get install -y --no-install-recommends cmake g++ make \
 && rm -rf /var/lib/apt/lists/*
COPY scripts/build_llama_cpp.sh /src/scripts/
ENV SERVEBENCH_CACHE=/opt/llama LLAMA_CPP_BUILD_TAG=portable LLAMA_CPP_NATIVE=OFF
RUN /src/scripts/build_llama_cpp.sh \
 && ln -s /opt/llama/llama.cpp-*-portable /opt/llama/current

FROM ${PYTHON_IMAGE} AS models
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/servebench
# the venv scripts `make setup` runs; torch's CPU build comes from TORCH_INDEX_URL (default in
# scripts/setup_venv.sh: PyTorch's CPU index; --build-arg TORCH_INDEX_URL=<mirror> overrides it)
ARG TORCH_INDEX_URL
COPY requirements-stacks.txt ./
COPY scripts/setup_venv.sh scripts/setup_stacks_venv.sh scripts/
RUN scripts/setup_stacks_venv.sh
COPY --from=llama /opt/llama /opt/llama
COPY include/models include/models
COPY scripts/build_local_model.py scripts/
RUN .venv-stacks/bin/python scripts/build_local_model.py \
      --llama-bin /opt/llama/current/build/bin --out build/models

FROM ${PYTHON_IMAGE} AS vllm
WORKDIR /opt/servebench
ARG TORCH_INDEX_URL
COPY requirements-vllm.txt requirements-quant.txt ./
COPY scripts/setup_venv.sh scripts/setup_vllm_venv.sh scripts/setup_quant_venv.sh scripts/
RUN scripts/setup_vllm_venv.sh
RUN scripts/setup_quant_venv.sh

FROM ${AIRFLOW_IMAGE}
USER root
# llama-server's OpenMP runtime; vLLM's CPU kernels link libnuma, and torch.compile (vLLM's
# warm-up) builds C++ with g++
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 libnuma1 g++ \
 && rm -rf /var/lib/apt/lists/*
COPY --from=llama --chown=airflow:root /opt/llama /opt/llama
COPY --from=models --chown=airflow:root /opt/servebench/.venv-stacks /opt/servebench/.venv-stacks
COPY --from=models --chown=airflow:root /opt/servebench/build/models /opt/servebench/build/models
COPY --from=vllm --chown=airflow:root /opt/servebench/.venv-vllm /opt/servebench/.venv-vllm
COPY --from=vllm --chown=airflow:root /opt/servebench/.venv-quant /opt/servebench/.venv-quant
USER airflow
# requirements-quant.txt: its pins are part of every recipe's hash (servebench.quantize)
COPY --chown=airflow:root requirements.txt requirements-quant.txt pyproject.toml /opt/servebench/
COPY --chown=airflow:root include /opt/servebench/include
RUN pip install --no-cache-dir -r /opt/servebench/requirements.txt \
 && pip install --no-cache-dir --no-deps -e /opt/servebench
# the suite's commit, for the runs' provenance (the image has no .git):
#   docker build --build-arg SUITE_GIT_SHA="$(git rev-parse HEAD)" .
ARG SUITE_GIT_SHA=unknown
ENV SERVEBENCH_PROJECT_ROOT=/opt/servebench \
    SERVEBENCH_SUITE_GIT_SHA=${SUITE_GIT_SHA} \
    SERVEBENCH_LLAMA_BIN=/opt/llama/current/build/bin \
    SERVEBENCH_STACKS_VENV=/opt/servebench/.venv-stacks \
    SERVEBENCH_VLLM_VENV=/opt/servebench/.venv-vllm \
    SERVEBENCH_QUANT_VENV=/opt/servebench/.venv-quant
