"""Recording, pushing and pulling a directory as a DVC-versioned dataset, through the `dvc` CLI.

DVC is called as a program, never imported: it lives in its own virtualenv (its hydra dependency
pins antlr4 4.9, Dagster's asset selection needs 4.13). A directory is recorded in one of two ways:
- it is an output of a `dvc.yaml` stage: `dvc commit -f <stage>` writes its hash into `dvc.lock`
  (the asset built it; DVC need not re-run the command), so `dvc repro` and Dagster agree on one
  artefact, and `dvc pull` on a fresh clone restores it from the committed `dvc.lock`;
- otherwise `dvc add <dir>` writes `<dir>.dvc` next to it.
DVC's repository lock does not wait: two DVC commands on one repository at once fail, so callers run
one at a time (the asset is in a Dagster pool of size 1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from platform_assets.versioning.settings import DvcRemote


class DvcError(RuntimeError):
    """A DVC or git command failed; the message holds the command and DVC's own error.

    `transient`: the command talks to the remote (push, pull, status --cloud), so a network fault or
    an interrupted transfer may be the cause and running it again may succeed (the dataset_version
    asset's retry policy does); a failed `commit` or `add` is about the workspace and is not retried."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class DatasetVersion:
    md5: str
    """DVC's hash of the directory (`<md5 of its file listing>.dir`): the dataset's identity."""
    path: str
    """The directory, relative to the DVC repository."""
    files: int
    bytes: int
    recorded_in: str
    """`dvc.lock` (a stage output) or the `.dvc` file written by `dvc add`."""
    stage: str | None
    git_revision: str | None
    """HEAD of the repository when recorded (None outside git)."""
    git_dirty: bool | None
    """Whether tracked files (e.g. dvc.lock) differ from HEAD: commit them to pin this version."""
    remote: str | None = None
    pushed: bool = False

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def find_dvc(executable: str | None, repo_root: Path) -> str:
    """The DVC program: the configured one, $PLATFORM_DVC, the repo's `.venv-dvc`, or PATH."""
    candidates = [executable, os.environ.get("PLATFORM_DVC"), str(repo_root / ".venv-dvc" / "bin" / "dvc")]
    project_venv = Path(__file__).resolve().parents[2] / ".venv-dvc" / "bin" / "dvc"
    candidates += [str(project_venv), shutil.which("dvc")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise DvcError("no `dvc` executable: run scripts/setup.sh (it creates .venv-dvc), set $PLATFORM_DVC, "
                   "or versioning.dvc_executable in the pipeline config")


class DvcRepo:
    def __init__(self, root: str | os.PathLike[str], executable: str | None = None):
        self.root = Path(root).resolve()
        self.dvc = find_dvc(executable, self.root)

    def _run(self, program: str, *args: str, check: bool = True,
             talks_to_remote: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
        proc = subprocess.run([program, *args], cwd=self.root, env=env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            name = Path(program).name
            raise DvcError(f"`{name} {' '.join(args)}` failed in {self.root} (exit {proc.returncode}):\n"
                           f"{(proc.stderr or proc.stdout).strip()}", transient=talks_to_remote)
        return proc

    def dvc_cmd(self, *args: str, talks_to_remote: bool = False) -> str:
        """`talks_to_remote`: the command transfers to or from the remote (its failure may be transient)."""
        return self._run(self.dvc, *args, talks_to_remote=talks_to_remote).stdout

    # -- repository ----------------------------------------------------------------------------
    def is_git(self) -> bool:
        return self._run("git", "rev-parse", "--is-inside-work-tree", check=False).returncode == 0

    def is_git_root(self) -> bool:
        top = self._run("git", "rev-parse", "--show-toplevel", check=False)
        return top.returncode == 0 and Path(top.stdout.strip()).resolve() == self.root.resolve()

    def without_git(self) -> bool:
        """Initialised with `dvc init --no-scm` (its .dvc/config says `no_scm = True`)."""
        config = self.root / ".dvc" / "config"
        return config.is_file() and re.search(r"^\s*no_scm\s*=\s*true\s*$", config.read_text(), re.I | re.M) is not None

    def ensure_initialized(self) -> None:
        if (self.root / ".dvc").is_dir():
            return
        # A directory inside another repository's work tree but not its top level (a second storage
        # root under the checkout's git-ignored data/, e.g. configs/sft_example.yaml's) is a DVC repo of
        # its own without git: `dvc init` there refuses ("not a git repository root"), and `dvc add`
        # under git-ignored data/ refuses to write a git-ignored .dvc file.
        self.dvc_cmd("init", "--quiet", *([] if self.is_git_root() else ["--no-scm"]))
        self.dvc_cmd("config", "core.analytics", "false")

    def configure_remote(self, remote: DvcRemote, base_dir: Path) -> str:
        """Make `remote` the default remote in `.dvc/config.local`; local paths made absolute
        against `base_dir` (the pipeline config's folder) and created."""
        url = remote.url
        if "://" not in url:
            path = Path(os.path.expanduser(url))
            path = path if path.is_absolute() else (base_dir / path).resolve()
            path.mkdir(parents=True, exist_ok=True)
            url = str(path)
        self.dvc_cmd("remote", "add", "--local", "--force", "--default", remote.name, url)
        if remote.endpoint_url:
            self.dvc_cmd("remote", "modify", "--local", remote.name, "endpointurl", remote.endpoint_url)
        return url

    def git_state(self) -> tuple[str | None, bool | None]:
        # a DVC repository without git (see ensure_initialized) pins versions in no git revision, even
        # inside another repository's work tree
        if not self.is_git() or self.without_git():
            return None, None
        head = self._run("git", "rev-parse", "HEAD", check=False)
        rev = head.stdout.strip() if head.returncode == 0 else None
        dirty = self._run("git", "status", "--porcelain", "--untracked-files=no", check=False).stdout.strip() != ""
        return rev, dirty

    # -- versioning ----------------------------------------------------------------------------
    def stage_owning(self, rel_path: str) -> str | None:
        """The dvc.yaml stage that lists `rel_path` among its outputs, if any."""
        dvc_yaml = self.root / "dvc.yaml"
        if not dvc_yaml.is_file():
            return None
        stages = (yaml.safe_load(dvc_yaml.read_text()) or {}).get("stages", {})
        for name, stage in stages.items():
            for out in stage.get("outs", []):
                path = next(iter(out)) if isinstance(out, dict) else out
                if Path(path) == Path(rel_path):
                    return name
        return None

    def relative(self, directory: str | os.PathLike[str]) -> str:
        path = Path(directory).resolve()
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            raise DvcError(f"{path} is not inside the DVC repository {self.root}: DVC versions files in its "
                           "workspace (set storage.root inside it, or versioning.dvc_repo around it)") from None

    def record(self, directory: str | os.PathLike[str]) -> DatasetVersion:
        """Record the directory's current content as a version (commit its stage, or `dvc add` it)."""
        rel = self.relative(directory)
        if not (self.root / rel).is_dir():
            raise DvcError(f"nothing to version: {self.root / rel} is not a directory")
        self.ensure_initialized()
        stage = self.stage_owning(rel)
        if stage is not None:
            self.dvc_cmd("commit", "--force", stage)
            recorded_in = "dvc.lock"
            outs = yaml.safe_load((self.root / "dvc.lock").read_text())["stages"][stage]["outs"]
            out = next(o for o in outs if Path(o["path"]) == Path(rel))
        else:
            self.dvc_cmd("add", rel)
            recorded_in = f"{rel}.dvc"
            out = yaml.safe_load((self.root / recorded_in).read_text())["outs"][0]
        rev, dirty = self.git_state()
        return DatasetVersion(md5=out["md5"], path=rel, files=int(out.get("nfiles", 1)), bytes=int(out["size"]),
                              recorded_in=recorded_in, stage=stage, git_revision=rev, git_dirty=dirty)

    def push(self, version: DatasetVersion, remote: str | None = None) -> DatasetVersion:
        target = version.stage or version.recorded_in
        self.dvc_cmd("push", "--quiet", *(["--remote", remote] if remote else []), target, talks_to_remote=True)
        return DatasetVersion(**{**version.as_dict(), "remote": remote, "pushed": True})

    def missing_in_remote(self, version: DatasetVersion, remote: str | None = None) -> list[str]:
        """What `dvc status --cloud` says the remote lacks for this version (empty: fully pushed)."""
        target = version.stage or version.recorded_in
        out = self.dvc_cmd("status", "--cloud", "--json", *(["--remote", remote] if remote else []), target,
                           talks_to_remote=True)
        status = json.loads(out or "{}")
        return sorted(f"{path}: {state}" for path, state in status.items())

    def pull(self, target: str, remote: str | None = None) -> None:
        """`target`: a stage name or a `.dvc` file (what `DatasetVersion.stage`/`recorded_in` hold)."""
        self.dvc_cmd("pull", "--quiet", "--force", *(["--remote", remote] if remote else []), target,
                     talks_to_remote=True)
