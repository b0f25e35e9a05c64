#!/usr/bin/env bash
# Creates the environments on a fresh machine; safe to re-run (it only installs what is missing).
#   .venv      the project with its test extra (dagster, pyarrow, duckdb, datasets, torch, ...)
#   .venv-dvc  DVC as a separate tool: its hydra-core pins antlr4 4.9, which breaks Dagster's
#              asset selection (needs 4.13), so the project calls the `dvc` CLI from here.
# Debian's tesseract-ocr (OCR of scanned PDF pages) is installed when missing, if apt-get runs as root.
# Set PYTHON to choose the interpreter (3.11+). PLATFORM_SYSTEM_DEPS=1 also installs the Debian
# packages some tests use (docker-compose to validate the compose file, chromium for UI tests,
# redis-server for the shared LSH index);
# without them those tests skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# Tesseract OCRs PDF pages without a text layer (the sample has one): the main job needs it, so it is
# installed whenever apt-get can (as root); without it ingest says once that OCR is off and the
# OCR tests skip with that reason.
if ! command -v tesseract >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      tesseract-ocr tesseract-ocr-eng >/dev/null
  else
    echo "note: tesseract-ocr is not installed (needs apt-get as root): PDF pages without text stay empty" >&2
  fi
fi

if [ "${PLATFORM_SYSTEM_DEPS:-0}" = 1 ] && command -v apt-get >/dev/null; then
  missing=()
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v chromium >/dev/null || missing+=(chromium)
  command -v redis-server >/dev/null || missing+=(redis-server)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first and pinned: this resolves to the CPU wheel (2.13.0); left to the resolver, an unpinned
# torch pulls a multi-GB CUDA build. Elsewhere add --index-url https://download.pytorch.org/whl/cpu.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q "torch==2.13.0"
# PLATFORM_BENCH_PEERS=1 adds the benchmark peers (datatrove, trafilatura, rensa, ...), so that CI
# also runs the benchmark smoke tests; they are never runtime dependencies.
extras="test"
[ "${PLATFORM_BENCH_PEERS:-0}" = 1 ] && extras="test,bench"
.venv/bin/pip install -q -e ".[$extras]"
# litdata (remote_loader_litdata's peer) without its requirements: they pull torchvision, which
# replaces the CPU torch above with a CUDA build, and obstore, whose S3 client fails against moto
if [ "${PLATFORM_BENCH_PEERS:-0}" = 1 ]; then
  .venv/bin/pip install -q --no-deps "litdata==0.2.76" "lightning-utilities==0.15.3"
fi

if [ ! -x .venv-dvc/bin/dvc ]; then
  "$PY" -m venv .venv-dvc
  .venv-dvc/bin/pip install -q "dvc[s3]==3.67.1"
fi
echo "environments ready: .venv (project), .venv-dvc (dvc $(.venv-dvc/bin/dvc --version))"
