# One image for dagster-webserver, dagster-daemon and the runs they launch (docker-compose.yml).
#   docker build -t platform-assets:local .
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG DAGSTER_POSTGRES_VERSION=0.29.27
ARG DVC_VERSION=3.67.1
# extras of the project to install: "k8s" for the run pods of dagster_home/k8s/dagster.yaml
#   docker build --build-arg EXTRAS=k8s -t registry.example/platform:1 .
ARG EXTRAS=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DAGSTER_HOME=/opt/dagster/dagster_home \
    PLATFORM_CONFIG=/opt/platform/configs/sample.yaml \
    PLATFORM_ASSETS_CACHE_DIR=/opt/platform-cache

# git: DVC shells out to it for `dvc add/push` bookkeeping. tesseract-ocr: OCR of PDF pages without
# a text layer (platform_assets/media/pdf.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends git tesseract-ocr tesseract-ocr-eng \
    && rm -rf /var/lib/apt/lists/*

# DVC in its own virtualenv: it pins antlr4-python3-runtime 4.9 (via hydra/omegaconf), which breaks
# Dagster's own antlr4 dependency, so it must never share the main environment. Only the `dvc`
# entry point is linked onto PATH; the venv's python stays off PATH.
RUN python -m venv /opt/dvc-venv \
    && /opt/dvc-venv/bin/pip install "dvc[s3]==${DVC_VERSION}" \
    && ln -s /opt/dvc-venv/bin/dvc /usr/local/bin/dvc \
    && dvc --version

# torch FIRST, from the CPU index: the PyPI wheel pulls ~3 GB of CUDA libraries the CPU image never
# uses. The constraint then makes `pip install .` fail rather than silently swap it for a CUDA build.
RUN pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu \
    && pip freeze | grep -i '^torch==' > /tmp/torch-constraint.txt

WORKDIR /opt/platform

# Dependencies in their own layer (rebuilt only when pyproject.toml changes): install the project
# from stub packages, then drop the stub. dagster-postgres is not a project dependency (the local
# instance is SQLite) but `storage: postgres` in the compose dagster.yaml imports it.
COPY pyproject.toml README.md ./
RUN mkdir -p platform_assets training \
    && touch platform_assets/__init__.py training/__init__.py \
    && pip install -c /tmp/torch-constraint.txt ".${EXTRAS:+[$EXTRAS]}" "dagster-postgres==${DAGSTER_POSTGRES_VERSION}" \
    && pip uninstall -y platform-assets \
    && rm -rf platform_assets training build ./*.egg-info

COPY . .
# Editable (no dependencies: they are all above): the package resolves to /opt/platform, so code
# that locates configs/ or dvc.yaml relative to the repo root finds them in the image too.
RUN pip install -c /tmp/torch-constraint.txt --no-deps -e . \
    && python -c "import dagster, dagster_postgres, dagster_aws, torch; print('torch', torch.__version__)"
# The cleaning steps' numba kernels (quality rules, language, normalize, guard, PII) compiled once, into
# the image: otherwise every run pod compiles them again (~8 CPU-s) before its first document. Both
# caches live in PLATFORM_ASSETS_CACHE_DIR (platform_assets/cache_dir.py): numba's in a folder named for
# the kernels' sources, and py3langid's model uncompressed (97 MB, world-readable), which every cleaning
# worker maps (~0.03 s) instead of decompressing its own copy (~0.4 s, ~100 MB each). The forkserver's
# preload module loads exactly what a cleaning worker needs.
RUN python -c "import platform_assets.cleaning.worker_preload"

# The instance for compose: Postgres storage, queued runs, pools, compute logs to MinIO.
COPY dagster_home/compose/dagster.yaml dagster_home/compose/workspace.yaml ${DAGSTER_HOME}/

EXPOSE 3000
CMD ["dagster-webserver", "-h", "0.0.0.0", "-p", "3000", "-w", "/opt/dagster/dagster_home/workspace.yaml"]
