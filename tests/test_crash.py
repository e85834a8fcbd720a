"""Stages killed with SIGKILL mid-run (no handler runs): nothing left running, nothing the next run trips over, and
the next run's result is a clean run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_project, stage, write_params

WAIT_S = 120
AGENTS_EXIT_S = 150


def _start(name: str, project: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", f"stages.{name}", "--params", "params.yaml"], cwd=project,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait_for(found, what: str, process: subprocess.Popen):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        assert process.poll() is None, f"the stage ended before {what}"
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {WAIT_S} s")


def _descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid` (children, theirs, ...): pid -> its command name."""
    parents, names = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":  # a zombie has ended; only its parent has not read its status yet
            parents[int(entry.name)], names[int(entry.name)] = int(fields[1]), _command(entry)
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found[child] = names[child]
                frontier.append(child)
    return found


def _command(process: Path) -> str:
    """What `ps` shows for a process (Ray renames its workers 'ray::IDLE', 'ray::DashboardAgent')."""
    try:
        return (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _still_running(pids: dict[int, str], within_s: float) -> dict[int, str]:
    """Those of `pids` still alive (and not zombies) after up to `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        alive = {pid: name for pid, name in pids.items()
                 if Path(f"/proc/{pid}/stat").exists() and " Z " not in _stat(pid)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _stat(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return " Z "  # gone while we looked


def _instance_up(processes: dict[int, str]) -> bool:
    """A private Ray instance has started its raylet, both of its agents and a worker."""
    commands = [command.lower() for command in processes.values()]
    return (any("raylet" in c for c in commands) and sum("agent" in c for c in commands) >= 2
            and any("worker" in c for c in commands))


def _killed(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


def test_a_killed_benchmark_leaves_no_benchmark_app_running_and_the_next_run_completes(tmp_path, quantized_project,
                                                                                      tiny_weights):
    """benchmark_app is started tied to its stage (parent-death signal): SIGKILL of the stage, which runs no
    handler, ends it too, where before it went on writing into reports/benchmark after make had exited."""
    # runs of a minute: a benchmark_app that outlived its stage would still be running when the check looks
    project = copy_project(quantized_project, tmp_path, tiny_weights, benchmark__repeats=2, benchmark__seconds=60,
                           benchmark__max_seconds=240)
    running = _start("benchmark", project)
    _wait_for(lambda: any("benchmark_app -m" in c for c in _descendants(running.pid).values()), "benchmark_app",
              running)
    # into its silent minute of measuring: killed while still printing its start-up steps, an untied benchmark_app
    # would die of the closed pipe instead, and this test would prove nothing
    time.sleep(3)
    measuring = _descendants(running.pid)
    _killed(running)
    assert _still_running(measuring, within_s=5) == {}, measuring

    write_params(project, tiny_weights, project / "data" / "data.yaml", benchmark__repeats=2, benchmark__seconds=1,
                 benchmark__max_seconds=4)
    again = stage("benchmark", project)
    assert again.returncode == 0, again.stderr
    metrics = json.loads((project / "metrics/benchmark.json").read_text())
    assert metrics["pairs"] >= 2 and metrics["speedup_fps_ci_low"] <= metrics["speedup_fps"]
    assert list(project.rglob("*.tmp")) == []


def test_a_killed_export_leaves_a_staging_folder_that_the_next_run_removes_and_exports_the_same_ir(
        tmp_path, exported_project, tiny_weights):
    """The export stages the IR (and a copy of the weights) in `models/.export.<pid>.*.tmp`: a SIGKILL leaves it, the
    next run removes it because its process is gone, and writes the IR a clean run wrote, byte for byte."""
    write_params(tmp_path, tiny_weights, exported_project / "data" / "data.yaml")
    running = _start("export", tmp_path)
    staging = _wait_for(lambda: list((tmp_path / "models").glob(".export.*.tmp/weights.pt")), "staged weights",
                        running)
    _killed(running)
    assert staging[0].parent.is_dir()  # killed mid-write: the debris the next run must not trip over

    again = stage("export", tmp_path)
    assert again.returncode == 0, again.stderr
    assert not staging[0].parent.exists() and list(tmp_path.rglob("*.tmp")) == []
    record, clean = (json.loads((project / "metrics/export_record.json").read_text())
                     for project in (tmp_path, exported_project))
    assert (record["model_sha256"], record["ir_bin_sha256"]) == (clean["model_sha256"], clean["ir_bin_sha256"])


@pytest.mark.cluster
def test_a_killed_stage_on_a_private_ray_instance_takes_the_instance_along(tmp_path, quantized_project, tiny_weights):
    """A stage with `compute.executor: ray` and no address starts its own Ray instance (GCS, raylet, workers): Ray
    ties them to the stage, so SIGKILL of the stage ends them, the next run completes, and Ray's agents end on
    their own (the only test that kills a Ray instance's driver; ~80 s, mostly the agents' exit)."""
    project = copy_project(quantized_project, tmp_path, tiny_weights, compute__executor="ray", compute__workers=1,
                           compute__shard_images=2)
    (project / "metrics/baseline.json").unlink()
    running = _start("baseline", project)
    _wait_for(lambda: _instance_up(_descendants(running.pid)), "a Ray instance with its agents and a worker",
              running)
    started = _descendants(running.pid)
    _killed(running)
    agents = {pid: command for pid, command in started.items() if "agent" in command.lower()}
    assert _still_running({pid: c for pid, c in started.items() if pid not in agents}, within_s=30) == {}, started

    again = stage("baseline", project)  # a new private instance while the old one's agents may still be ending
    assert again.returncode == 0, again.stderr[-3000:]
    clean = json.loads((quantized_project / "metrics/baseline.json").read_text())
    assert json.loads((project / "metrics/baseline.json").read_text())["map50_95"] == clean["map50_95"]
    # Ray's per-node agents notice their raylet is gone within 2 s, then report to the dead GCS before exiting
    # (60-80 s measured on the no-avx_vnni EPYC): Ray's own limit, waited for here, not worked around
    assert _still_running(agents, within_s=AGENTS_EXIT_S) == {}, agents


def _without_timings(metrics: dict) -> dict:
    return {key: value for key, value in metrics.items() if "seconds" not in key}


# (stage, the metrics file it writes last, the log line of its long step, params for a short run on the tiny model);
# int8_eval runs the tiny model in about a second, mostly start-up: too short to kill part way on purpose
KILLED_PART_WAY = [("quantize", "metrics/quantize.json", "[2/3] quantize: the nncf quantizer", {}),
                   ("sensitivity", "metrics/sensitivity.json", "[1/2] sensitivity:",
                    {"sensitivity__images": 2, "sensitivity__conf": 0.0})]


@pytest.mark.parametrize("name, output, step, overrides", KILLED_PART_WAY, ids=[case[0] for case in KILLED_PART_WAY])
def test_a_stage_killed_part_way_claims_nothing_and_its_next_run_writes_a_clean_run_s_result(
        tmp_path, quantized_project, tiny_weights, name, output, step, overrides):
    """Killed in its long step (calibration, the group scores), the stage leaves no metrics file claiming success
    and no staging file, and its next run writes what a clean run wrote (timings aside)."""
    project = copy_project(quantized_project, tmp_path, tiny_weights, **overrides)
    clean = stage(name, project)
    assert clean.returncode == 0, clean.stderr[-3000:]
    expected = _without_timings(json.loads((project / output).read_text()))
    (project / output).unlink()

    running = subprocess.Popen([sys.executable, "-m", f"stages.{name}", "--params", "params.yaml"], cwd=project,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    assert any(step in line for line in running.stderr), f"{name} never logged {step!r}"
    _killed(running)
    running.stderr.close()
    assert not (project / output).exists()

    again = stage(name, project)
    assert again.returncode == 0, again.stderr[-3000:]
    assert list(project.rglob("*.tmp")) == []
    assert _without_timings(json.loads((project / output).read_text())) == expected
