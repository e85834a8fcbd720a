"""`make promote`: the INT8 model that passed every gate on this commit -> a GTO version and a stage (git tags).

Refuses, with one line and a non-zero exit and no tag, unless the checkout is a committed git repository
with a clean work tree, `dvc status` is clean (the outputs are the ones `dvc.lock` names) and every gate
passes on the committed metrics. An INT8 IR already registered is not registered again: the command says
which version has it, finishes a promotion an interruption left without its stage tag, and exits 0.
With `--push` it first fetches the remote's tags and then pushes the version tag and the stage tag in
one atomic `git push`, so a cancelled CI job leaves either both on the remote or neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from qgate import registry, report
from qgate.artifacts import fixed_model
from qgate.cli import run_tool
from qgate.errors import QgateError
from qgate.gates import GATED_STAGES, Metrics, Verdict, autofix_family, judge_all
from qgate.params import Params, load_params
from qgate.task_metrics import recorded


def main(params_path: str, push: bool = False) -> int:
    """Check, then register and stage (or confirm) this commit's INT8 model; 0 when it is registered."""
    params, repo = load_params(params_path), Path.cwd()
    cfg = params.promote
    head = _head(repo)
    if push:
        registry.git(repo, "fetch", "--quiet", "--tags", cfg.remote)
    _require_clean(repo)
    metrics = Metrics(params)
    verdicts = judge_all(params, metrics)
    _require_passed(verdicts)
    summary = verdict_fields(params, metrics, verdicts, head)
    existing = registry.versions(repo, cfg.name)
    version = next((v for v in existing if v.fields.get("ir_sha256") == summary["ir_sha256"]), None)
    if version is None:
        number = registry.next_version(existing, summary["model_sha256"], cfg.bump, cfg.bump_new_model)
        registry.gto(repo, "register", cfg.name, head, "--version", number, "--message",
                     tag_message(f"qgate registers {cfg.name} {number}", summary))
        version = next(v for v in registry.versions(repo, cfg.name) if v.text == number)
        print(f"registered {version.tag} at {head[:12]} (INT8 IR {summary['ir_sha256'][:12]})")
    else:
        print(f"{cfg.name}: INT8 IR {summary['ir_sha256'][:12]} is registered already as {version.tag} "
              f"(commit {version.commit[:12]}); no new version")
    stage_tag = _assign(repo, params, version, summary)
    if push:
        registry.git(repo, "push", "--atomic", "--quiet", cfg.remote, f"refs/tags/{version.tag}",
                     f"refs/tags/{stage_tag}")
        print(f"pushed {version.tag} and {stage_tag} to {cfg.remote}")
    try:  # the report names the version (report files are not committed); the tags stand whatever happens here
        report.write_report(metrics, verdicts, Path(params_path))
    except Exception as exc:  # noqa: BLE001 - one line, as `qgate.judge` does for a report problem
        print(f"warning: report not rewritten ({type(exc).__name__}: {exc}); the tags above stand", file=sys.stderr)
    return 0


def _head(repo: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD^{commit}"], cwd=repo, capture_output=True,
                          text=True)
    if done.returncode:
        inside = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=repo, capture_output=True).returncode == 0
        raise QgateError(f"{repo}: " + ("the git repository has no commit yet; commit the pipeline's outputs first"
                                        if inside else "not a git repository; promote registers git tags, so run "
                                        "it in the project's clone"))
    return done.stdout.strip()


def _require_clean(repo: Path) -> None:
    dirty = registry.git(repo, "status", "--porcelain").splitlines()
    if dirty:
        raise QgateError(f"{repo}: the work tree is not clean ({len(dirty)} changed, e.g. '{dirty[0][3:]}'); commit "
                         "or stash: a version must name a commit that holds exactly the judged metrics")
    # the gated stages and what they need: a fork's model leaves the demo's stages stale, and that is fine
    done = subprocess.run([registry.tool("dvc"), "status", "--json", "--with-deps", *GATED_STAGES], cwd=repo,
                          capture_output=True, text=True)
    try:
        stale = json.loads(done.stdout or "null") if done.returncode == 0 else None
    except ValueError:
        stale = None
    if stale is None:
        raise QgateError(f"{repo}: `dvc status` failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    if stale:
        raise QgateError(f"{repo}: `dvc status` is not clean (stages {', '.join(sorted(stale))}): the outputs are "
                         "not the ones dvc.lock names; run `make gate` and commit, or `dvc pull` / `dvc checkout`")


def _require_passed(verdicts: list[Verdict]) -> None:
    failed = [v for v in verdicts if not v.passed]
    if failed:
        raise QgateError(f"{len(failed)} of {len(verdicts)} gates failed ({', '.join(v.gate for v in failed)}); "
                         f"nothing tagged. First: {failed[0].message.splitlines()[0]}")


def verdict_fields(params: Params, m: Metrics, verdicts: list[Verdict], head: str) -> dict[str, str]:
    """What a version's tag message records: the verdict, the shipped IR's accuracy and speed, and the hashes."""
    p, fix = params, params.autofix.metrics
    fixed = bool(m.value(fix, "needed"))
    ci = m.number(p.int8_eval.metrics, "ci_level")
    # the task's own metric (box mAP, a segment model's mask mAP); for autofix's IR, the one it aimed at
    main = (autofix_family(m) if fixed else recorded(p.export.record).primary).main
    if fixed:  # the shipped IR is autofix's: its own mAP and drop interval, and its benchmark
        int8_map, drop = m.number(fix, f"fixed_{main.key}"), m.number(fix, f"fixed_{main.stat('drop')}")
        low = m.number(fix, f"fixed_{main.stat('drop')}_ci_low")
        high = m.number(fix, f"fixed_{main.stat('drop')}_ci_high")
        speed = f"{m.number(p.benchmark.metrics, 'fixed_speedup_fps'):.3f}"
    else:
        int8_map, drop = m.number(p.int8_eval.metrics, main.key), m.number(p.int8_eval.metrics, main.stat("drop"))
        low = m.number(p.int8_eval.metrics, main.stat("drop_ci_low"))
        high = m.number(p.int8_eval.metrics, main.stat("drop_ci_high"))
        bench = p.benchmark.metrics
        speed = (f"{m.number(bench, 'speedup_fps'):.3f} [{m.number(bench, 'speedup_fps_ci_low'):.3f}, "
                 f"{m.number(bench, 'speedup_fps_ci_high'):.3f}] ({ci:.0%})")
    inconclusive = [v.gate for v in verdicts if v.state == "inconclusive"]
    return {
        "verdict": f"PASS, all {len(verdicts)} gates" + (f" (inconclusive: {', '.join(inconclusive)})"
                                                          if inconclusive else ""),
        "commit": head, "path": str(fixed_model(params).parent), "ir": "autofix" if fixed else "plain INT8",
        "ir_sha256": m.value(fix, "fixed_ir_bin_sha256"), "model_sha256": m.value(p.export.record, "model_sha256"),
        "weights": p.model.weights, "imgsz": str(p.model.imgsz),
        f"{main.key}_fp32": f"{m.number(p.baseline.metrics, main.key):.4f}", f"{main.key}_int8": f"{int8_map:.4f}",
        main.stat("drop"): f"{drop:.4f} [{low:.4f}, {high:.4f}] ({ci:.0%})", "speedup_fps": speed,
    }


def tag_message(title: str, summary: dict[str, str]) -> str:
    """A title line, then `key: value` lines (`qgate.registry.fields` reads them back)."""
    return title + "\n\n" + "\n".join(f"{key}: {value}" for key, value in summary.items()) + "\n"


def _assign(repo: Path, params: Params, version: registry.Version, summary: dict[str, str]) -> str:
    """Assign `promote.stage` to `version` unless it holds it already; the stage tag that names it."""
    cfg = params.promote
    if registry.in_stage(repo, cfg.name, cfg.stage) != version.text:
        held_before = any(commit == version.commit for _, commit in registry.stage_tags(repo, cfg.name, cfg.stage))
        registry.gto(repo, "assign", cfg.name, "--version", version.text, "--stage", cfg.stage, "--message",
                     tag_message(f"qgate assigns {cfg.name} {version.text} to {cfg.stage}", summary),
                     *(["--force"] if held_before else []))
        print(f"assigned {cfg.stage} to {version.tag}")
    else:
        print(f"{cfg.stage} is {version.tag} already")
    tag = next((tag for tag, commit in registry.stage_tags(repo, cfg.name, cfg.stage) if commit == version.commit),
               None)
    if tag is None:
        raise QgateError(f"{repo}: gto reports {cfg.stage} at {version.tag} but no {cfg.name}#{cfg.stage}#N tag "
                         "names its commit; check `gto history`")
    return tag


if __name__ == "__main__":
    sys.exit(run_tool(main, __doc__.splitlines()[0], {"push": "fetch tags from promote.remote first, then push "
                                                               "the version and stage tags there atomically"}))
