"""The files the gated stages read that no stage makes (your weights and data): found, pulled, or named as missing.

`python -m qgate.inputs` (`make inputs`, and the first thing `make gate` does) walks the stages the gates read
(qgate.gates.GATED_STAGES) and everything upstream of them. A dependency that a pipeline stage makes (the demo's
data and model, the IRs) is the pipeline's business. Any other dependency missing from the checkout is pulled
from the DVC remote when a `.dvc` file tracks it; when it cannot be had, one line names the missing paths, their
params keys and what to set up, before any stage runs (a missing model must never turn into a retrain or a
traceback ten minutes in).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from qgate.cli import run_tool
from qgate.errors import QgateError
from qgate.gates import GATED_STAGES
from qgate.params import load_params

log = logging.getLogger(__name__)
HOW_TO = "docs/ci.md"
# Repository secrets the workflow hands over -> the default remote's option they set, by URL scheme. Key files
# (GCS service-account JSON, an SSH private key) arrive as text and are written to .dvc/tmp, mode 0600.
CREDENTIALS = {
    "s3": {"AWS_ACCESS_KEY_ID": "access_key_id", "AWS_SECRET_ACCESS_KEY": "secret_access_key",
           "AWS_SESSION_TOKEN": "session_token"},
    "azure": {"AZURE_STORAGE_CONNECTION_STRING": "connection_string"},
    "gs": {"GOOGLE_APPLICATION_CREDENTIALS_JSON": "credentialpath"},
    "ssh": {"DVC_SSH_PRIVATE_KEY": "keyfile"},
}
KEY_FILES = {"credentialpath", "keyfile"}


@dataclass(frozen=True)
class Input:
    """A file or folder a gated stage reads and no pipeline stage makes; `tracked_by`: its .dvc file, if any."""

    path: Path
    tracked_by: str | None


def external_inputs(repo, stage_names: tuple[str, ...]) -> list[Input]:
    """The dependencies of the named stages and their upstream stages that no pipeline stage makes."""
    import networkx as nx
    from dvc.dependency.param import ParamsDependency

    index = repo.index
    named = [stage for stage in index.stages if getattr(stage, "name", None) in stage_names]
    unknown = sorted(set(stage_names) - {stage.name for stage in named})
    if unknown:
        raise QgateError(f"dvc.yaml: no stage named {', '.join(unknown)}")
    upstream = set(named).union(*(nx.descendants(index.graph, stage) for stage in named))
    made = [Path(out.fs_path) for stage in upstream if stage.cmd for out in stage.outs]
    sources = {Path(out.fs_path): stage.relpath for stage in index.stages if not stage.cmd for out in stage.outs}
    found: dict[Path, Input] = {}
    for stage in upstream:
        for dep in stage.deps:
            path = Path(dep.fs_path)
            if not isinstance(dep, ParamsDependency) and not _under(path, made):
                source = next((dvc_file for out, dvc_file in sources.items() if _under(path, [out])), None)
                found.setdefault(path, Input(path, source))
    return sorted(found.values(), key=lambda item: str(item.path))


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _outermost(paths: list[Path]) -> list[Path]:
    """`paths` without those inside another of them (data/own, not also data/own/data.yaml)."""
    return [path for path in paths if not any(path != other and path.is_relative_to(other) for other in paths)]


def describe(paths: list[Path], root: Path, keys: dict[Path, str]) -> str:
    """'models/own/detector.pt (model.weights), data/own (model.data_dir)': paths as a user wrote them."""
    def one(path: Path) -> str:
        shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        return f"{shown} ({keys[path]})" if path in keys else shown
    return ", ".join(one(path) for path in paths)


def model_keys(params_path: str, root: Path) -> dict[Path, str]:
    """The files `model:` names, by absolute path -> their params key."""
    model = load_params(params_path).model
    named = {"model.weights": model.weights, "model.dataset": model.dataset, "model.data_dir": model.data_dir}
    return {(root / value).resolve(): key for key, value in named.items()}


def drop_empty_secrets() -> None:
    """Unset the CREDENTIALS variables that are empty: an unset repository secret reaches a step as "", which
    adlfs takes for a (blank) connection string and azure-identity for a client id."""
    for variable in [name for options in CREDENTIALS.values() for name in options]:
        if not os.environ.get(variable, "x").strip():
            del os.environ[variable]


def default_remote(repo) -> tuple[str, str] | None:
    """(name, url) of the DVC remote `dvc pull` uses; None when none is configured."""
    name = repo.config["core"].get("remote")
    return (name, repo.config["remote"].get(name, {}).get("url", "?")) if name else None


def remote_text(repo) -> str | None:
    """"the DVC remote 'name' (url)" of the default remote; None when none is configured."""
    remote = default_remote(repo)
    return f"the DVC remote '{remote[0]}' ({remote[1]})" if remote else None


def store_credentials(repo, environ: dict[str, str]) -> list[str]:
    """Set the default remote's credentials from non-empty `environ` variables (CREDENTIALS) in .dvc/config.local,
    which git ignores, so every later DVC command of the job has them; the variables used."""
    name, url = default_remote(repo) or ("", "")
    options = CREDENTIALS.get(url.split("://")[0] if "://" in url else "", {})
    used = [variable for variable in options if environ.get(variable, "").strip()]
    if not used:
        return []
    with repo.config.edit("local") as local:
        remote = local.setdefault("remote", {}).setdefault(name, {})
        for variable in used:
            option = options[variable]
            remote[option] = _key_file(repo, option, environ[variable]) if option in KEY_FILES else environ[variable]
    return used


def _key_file(repo, option: str, text: str) -> str:
    path = Path(repo.tmp_dir) / f"remote_{option}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(text if text.endswith("\n") else text + "\n")  # ssh keys need their final newline
    return str(path)


def pull(repo, missing: list[Input], named: str) -> None:
    """Pull the .dvc files that track `missing`; an error naming them when the remote cannot give them all."""
    from dvc.exceptions import CheckoutError, DvcException

    remote = remote_text(repo)
    if remote is None:
        raise QgateError(f"{named}: tracked by DVC but not in this checkout, and no DVC remote is configured: "
                         f"`dvc remote add -d NAME URL`, commit .dvc/config and `dvc push` ({HOW_TO})")
    said = ""
    logging.disable(logging.WARNING)  # DVC's warnings (cache hashes, links) would bury the one line below
    try:
        repo.pull(targets=sorted({item.tracked_by for item in missing}))
    except CheckoutError:
        pass  # "not in the remote": the line below says it with the paths and the fix
    except ImportError as exc:  # "s3 is supported, but requires 'dvc-s3' to be installed"
        raise QgateError(f"{named}: {remote} needs a DVC plugin: {exc}; add it to requirements.txt ({HOW_TO})")
    except DvcException as exc:  # a refused credential, an unreachable host: DVC's words name the fix
        lines = [line.strip() for line in str(exc).splitlines() if line.strip() and "error.dvc.org" not in line]
        said = f" (DVC: {lines[0]})" if lines else ""
    finally:
        logging.disable(logging.NOTSET)
    if any(not item.path.exists() for item in missing):
        raise QgateError(f"{named}: not in this checkout and not in {remote}{said}: `dvc push` them from the "
                         f"machine that added them, or set the remote's credentials as secrets ({HOW_TO})")
    log.info("pulled from %s: %s", remote, named)


def main(params_path: str, stages: tuple[str, ...] = GATED_STAGES) -> int:
    """Check and fetch the inputs of `stages`; 0 when every one is in the checkout afterwards."""
    from dvc.repo import Repo

    root = Path.cwd().resolve()
    keys = model_keys(params_path, root)
    drop_empty_secrets()
    with Repo(str(root)) as repo:
        used = store_credentials(repo, dict(os.environ))
        if used:
            log.info("DVC remote credentials from %s (in .dvc/config.local, which git ignores)", ", ".join(used))
        inputs = external_inputs(repo, stages)
        missing = [item for item in inputs if not item.path.exists()]
        untracked = [item.path for item in missing if item.tracked_by is None]
        if untracked:
            raise QgateError(f"{describe(untracked, root, keys)}: not in this checkout and not tracked by DVC: "
                             f"`dvc add` it, commit the .dvc file, set a DVC remote and `dvc push` ({HOW_TO})")
        if missing:
            pull(repo, missing, describe(_outermost([item.path for item in missing]), root, keys))
    yours = [item.path for item in inputs if item.tracked_by or item.path in keys]
    log.info("inputs: every file the gated stages read is here%s",
             f": {describe(yours, root, keys)}" if yours else " or made by the pipeline (the demo)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    sys.exit(run_tool(main, __doc__.splitlines()[0]))
