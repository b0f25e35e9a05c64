"""The team-scale deployment files are checked by the tools that will read them.

- docker-compose.yml: `docker-compose config -q` (the real parser, when the binary is installed),
  then the services, ports, healthchecks and dependencies the stack relies on;
- dagster_home/compose/dagster.yaml: Dagster's own instance-config validation, the config of every
  class it names, and the pool limits as a real (SQLite-backed) instance computes them;
- dagster_home/dagster.yaml: the local default, validated the same way;
- dagster_home/k8s/dagster.yaml (one pod per run) with dagster-k8s's launcher schema, configs/cluster.yaml
  (S3 as the shared storage) with the pipeline's, configs/run_config/multiprocess.yaml with the jobs'.
No Docker engine, Postgres or MinIO is needed; the whole module runs in a few seconds.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
COMPOSE_HOME = REPO / "dagster_home" / "compose"
LOCAL_INSTANCE_YAML = REPO / "dagster_home" / "dagster.yaml"

DAGSTER_SERVICES = ("dagster-webserver", "dagster-daemon")
# What the compose services put in the environment; the instance config reads these.
COMPOSE_ENV = {
    "DAGSTER_POSTGRES_USER": "dagster",
    "DAGSTER_POSTGRES_PASSWORD": "dagster",
    "DAGSTER_POSTGRES_DB": "dagster",
    "DAGSTER_POSTGRES_HOST": "postgres",
    "DAGSTER_POSTGRES_PORT": "5432",
    "AWS_ENDPOINT_URL": "http://minio:9000",
}


@pytest.fixture(scope="module")
def compose() -> dict:
    # PyYAML resolves the anchors and `<<` merges the file uses, as compose does.
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture
def compose_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in COMPOSE_ENV.items():
        monkeypatch.setenv(key, value)


# --- docker-compose.yml ------------------------------------------------------------------------


def _compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def test_compose_file_passes_docker_compose_config() -> None:
    command = _compose_command()
    if command is None:
        pytest.skip(
            "neither `docker-compose` nor the `docker compose` plugin is installed "
            "(Debian: apt-get install docker-compose); the YAML-level checks below still run"
        )
    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # Warnings (unset variables without a default, deprecated keys) count as failures too.
    assert "WARN" not in result.stderr.upper(), result.stderr


def test_compose_services_and_healthchecks(compose: dict) -> None:
    services = compose["services"]
    assert {"postgres", "minio", "minio-init", "dagster-init", *DAGSTER_SERVICES} <= set(services)

    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert "ports" not in postgres, "Postgres is only for the stack's own services"

    minio = services["minio"]
    assert "minio/minio" in minio["image"]
    assert minio["command"][:2] == ["server", "/data"] and "--console-address" in minio["command"]
    assert minio["healthcheck"]["test"]
    assert "127.0.0.1:9000:9000" in minio["ports"] and "127.0.0.1:9001:9001" in minio["ports"]
    assert any(v.endswith(":/data") for v in minio["volumes"])

    init = services["minio-init"]
    assert "minio/mc" in init["image"]
    script = " ".join(init["command"])
    for bucket in ("platform-data", "platform-dvc"):
        assert f"mc mb --ignore-existing local/{bucket}" in script
    assert init["depends_on"]["minio"]["condition"] == "service_healthy"

    webserver = services["dagster-webserver"]
    entry = " ".join(webserver["entrypoint"])
    assert entry.startswith("dagster-webserver") and "-h 0.0.0.0" in entry and "-p 3000" in entry
    assert webserver["ports"] == ["127.0.0.1:3000:3000"], "the UI is published on localhost only"
    assert "/server_info" in " ".join(webserver["healthcheck"]["test"])

    daemon = services["dagster-daemon"]
    assert " ".join(daemon["entrypoint"]).startswith("dagster-daemon run")
    assert daemon["healthcheck"]["test"] == ["CMD", "dagster-daemon", "liveness-check"]


def test_dagster_services_share_image_env_and_wait_for_dependencies(compose: dict) -> None:
    services = compose["services"]
    for name in (*DAGSTER_SERVICES, "dagster-init"):
        service = services[name]
        assert service["build"] == {"context": ".", "dockerfile": "Dockerfile"}, name
        env = service["environment"]
        assert env["DAGSTER_HOME"] == "/opt/dagster/dagster_home"
        assert env["PLATFORM_CONFIG"] == "${PLATFORM_CONFIG:-/opt/platform/configs/sample.yaml}"
        assert env["AWS_ENDPOINT_URL"] == "http://minio:9000"
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
        # Everything dagster.yaml reads from the environment is provided.
        assert set(COMPOSE_ENV) <= set(env), name
        conditions = {dep: spec["condition"] for dep, spec in service["depends_on"].items()}
        assert conditions["postgres"] == "service_healthy"
        assert conditions["minio"] == "service_healthy"
        assert conditions["minio-init"] == "service_completed_successfully"
        if name != "dagster-init":
            assert conditions["dagster-init"] == "service_completed_successfully"
        # The workspace file the commands name is the one the Dockerfile copies into DAGSTER_HOME.
        command = " ".join(service.get("entrypoint", []) + service.get("command", []))
        if name != "dagster-init":
            assert "-w /opt/dagster/dagster_home/workspace.yaml" in command


def test_credentials_are_overridable_defaults(compose: dict) -> None:
    """Secrets appear only as ${VAR:-local-dev-default}, never as bare literals."""
    secret_keys = re.compile(r"(PASSWORD|SECRET|ACCESS_KEY|_USER)$")
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if secret_keys.search(key):
                assert re.fullmatch(r"\$\{[A-Z_]+:-[^}]*\}", str(value)), f"{name}.{key}={value!r}"


def test_pool_limits_are_set_on_startup(compose: dict) -> None:
    script = " ".join(compose["services"]["dagster-init"]["command"])
    assert "dagster instance migrate" in script
    assert "dagster instance concurrency set gpu 1" in script
    assert "dagster instance concurrency set dvc 1" in script


def test_dockerfile_and_dockerignore() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.M)
    torch_at = text.index("--index-url https://download.pytorch.org/whl/cpu")
    project_at = text.index('pip install -c /tmp/torch-constraint.txt ".${EXTRAS:+[$EXTRAS]}"')  # ., or .[k8s]
    assert torch_at < project_at, "the CPU torch wheel must be installed before the project"
    assert "TORCH_VERSION=2.13.0" in text
    assert "python -m venv /opt/dvc-venv" in text and '"dvc[s3]' in text
    assert "ln -s /opt/dvc-venv/bin/dvc /usr/local/bin/dvc" in text
    assert re.search(r"apt-get install .*\bgit\b", text)
    assert "WORKDIR /opt/platform" in text
    for copied in ("dagster_home/compose/dagster.yaml", "dagster_home/compose/workspace.yaml"):
        assert copied in text and (REPO / copied).is_file()

    ignored = (REPO / ".dockerignore").read_text().split()
    for pattern in (".venv*", "data/", ".git", "dagster_home/*"):
        assert pattern in ignored
    assert "!dagster_home/compose/" in ignored


# --- dagster_home/compose -----------------------------------------------------------------------


def _validate_instance_yaml(base_dir: Path) -> dict:
    """Dagster's own loader: schema, selector and concurrency cross-checks; connects to nothing."""
    from dagster._core.instance.config import dagster_instance_config

    config, custom_class = dagster_instance_config(str(base_dir), config_filename="dagster.yaml")
    assert custom_class is None
    return dict(config)


def _validate_class_config(section: dict) -> object:
    """Import the class a section names and process its config (env vars resolved) the way the
    instance does before constructing it; returns the class."""
    from dagster._config import process_config
    from dagster._serdes.config_class import class_from_code_pointer

    klass = class_from_code_pointer(section["module"], section["class"])
    result = process_config(klass.config_type(), section.get("config") or {})
    assert result.success, [error.message for error in result.errors]
    return klass


def test_compose_instance_config_is_valid(compose_env: None) -> None:
    config = _validate_instance_yaml(COMPOSE_HOME)

    pg = config["storage"]["postgres"]["postgres_db"]
    assert pg["username"] == {"env": "DAGSTER_POSTGRES_USER"}
    assert pg["password"] == {"env": "DAGSTER_POSTGRES_PASSWORD"}
    assert pg["hostname"] == {"env": "DAGSTER_POSTGRES_HOST"}
    assert pg["db_name"] == {"env": "DAGSTER_POSTGRES_DB"}

    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["run_launcher"]["class"] == "DefaultRunLauncher"
    assert config["compute_logs"]["class"] == "S3ComputeLogManager"
    assert config["compute_logs"]["config"]["endpoint_url"] == {"env": "AWS_ENDPOINT_URL"}
    assert config["compute_logs"]["config"]["bucket"] == "platform-data"
    for section in ("run_coordinator", "run_launcher", "compute_logs"):
        _validate_class_config(config[section])

    assert config["concurrency"]["runs"]["max_concurrent_runs"] >= 1
    assert config["telemetry"] == {"enabled": False}
    assert config["nux"] == {"enabled": False}


def test_compose_instance_pools_gpu_and_dvc_are_one(compose_env: None, tmp_path: Path) -> None:
    """The compose instance's run-queue and pool settings, applied by a real DagsterInstance.

    Postgres is swapped for SQLite (and S3 compute logs for the default) so nothing is contacted;
    every other section is the compose file's. A pool no one has set gets `default_limit` when a
    step first claims it; `dagster-init` sets gpu and dvc explicitly; both must come out at 1.
    """
    from dagster import DagsterInstance

    raw = yaml.safe_load((COMPOSE_HOME / "dagster.yaml").read_text())
    raw["storage"] = {"sqlite": {"base_dir": str(tmp_path)}}
    raw.pop("compute_logs")
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(raw))

    with DagsterInstance.from_config(str(tmp_path)) as instance:
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.default_pool_limit == 1
        assert (
            concurrency.run_queue_config.max_concurrent_runs
            == raw["concurrency"]["runs"]["max_concurrent_runs"]
        )
        storage = instance.event_log_storage
        assert storage.supports_global_concurrency_limits

        # A fresh database: the first step to claim `gpu` initialises it from default_limit.
        storage.initialize_concurrency_limit_to_default("gpu")
        assert storage.get_concurrency_info("gpu").slot_count == 1
        # What `dagster instance concurrency set <pool> 1` (dagster-init) does.
        for pool in ("gpu", "dvc"):
            storage.set_concurrency_slots(pool, 1)
            info = storage.get_concurrency_info(pool)
            assert (info.slot_count, info.limit) == (1, 1), pool


def test_compose_workspace_is_valid() -> None:
    from dagster._core.workspace.config_schema import process_workspace_config

    workspace = yaml.safe_load((COMPOSE_HOME / "workspace.yaml").read_text())
    result = process_workspace_config(workspace)
    assert result.success, [error.message for error in result.errors]
    (target,) = workspace["load_from"]
    assert target["python_module"]["module_name"] == "platform_assets.definitions"
    assert target["python_module"]["working_directory"] == "/opt/platform"


# --- dagster_home/dagster.yaml (local default) ---------------------------------------------------


def test_local_instance_config_is_valid() -> None:
    if not LOCAL_INSTANCE_YAML.is_file():
        pytest.skip(f"{LOCAL_INSTANCE_YAML.relative_to(REPO)} is not written yet")
    config = _validate_instance_yaml(LOCAL_INSTANCE_YAML.parent)
    # SQLite: either the explicit `storage: sqlite:` or Dagster's default (no storage section).
    storage = config.get("storage")
    assert storage is None or set(storage) == {"sqlite"}, storage
    assert "run_storage" not in config and "event_log_storage" not in config
    assert config.get("telemetry") == {"enabled": False}
    assert config.get("nux") == {"enabled": False}
    for section in ("run_coordinator", "run_launcher", "compute_logs"):
        if section in config:
            _validate_class_config(config[section])


# --- a cluster: dagster_home/k8s, configs/cluster.yaml, configs/run_config --------------------------

K8S_HOME = REPO / "dagster_home" / "k8s"


def test_k8s_instance_config_is_valid(compose_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dagster_k8s", reason="dagster-k8s is in the test extra")
    monkeypatch.setenv("PLATFORM_IMAGE", "registry.example/platform:1")
    monkeypatch.setenv("DAGSTER_K8S_NAMESPACE", "platform")
    config = _validate_instance_yaml(K8S_HOME)
    launcher = config["run_launcher"]
    assert _validate_class_config(launcher).__name__ == "K8sRunLauncher"
    assert launcher["config"]["job_image"] == {"env": "PLATFORM_IMAGE"}
    assert launcher["config"]["env_config_maps"] == ["platform-env"]
    resources = launcher["config"]["run_k8s_config"]["container_config"]["resources"]
    # a pod holds one source's ingest + cleaning under the pipeline's 2 GB budget
    assert resources["requests"]["cpu"] == "2" and resources["limits"]["memory"] == "4Gi"
    for section in ("run_coordinator", "compute_logs"):
        _validate_class_config(config[section])
    runs = config["concurrency"]["runs"]
    assert runs["tag_concurrency_limits"][0]["limit"] < runs["max_concurrent_runs"]


def test_cluster_pipeline_config_keeps_every_output_on_s3() -> None:
    from platform_assets.config import load_config

    cfg = load_config(str(REPO / "configs" / "cluster.yaml"))
    assert cfg.storage_root.startswith("s3://")
    assert all(src.path.startswith("s3://") for src in cfg.sources)
    assert cfg.io.workers is None and cfg.io.worker_count() >= 1


def test_multiprocess_run_config_is_valid_for_every_job() -> None:
    import dagster as dg

    from platform_assets.definitions import defs

    definitions = defs()
    run_config = yaml.safe_load((REPO / "configs" / "run_config" / "multiprocess.yaml").read_text())
    assert run_config["execution"]["config"]["multiprocess"]["max_concurrent"] == 2
    for job in ("per_source_job", "corpus_job", "release_job", "training_job"):
        dg.validate_run_config(definitions.resolve_job_def(job), run_config)
    bad = {"execution": {"config": {"multiprocess": {"max_concurrent": "two"}}}}
    with pytest.raises(dg.DagsterInvalidConfigError):
        dg.validate_run_config(definitions.resolve_job_def("corpus_job"), bad)
