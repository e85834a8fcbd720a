"""Put the top-ranked quantizer groups back in float until the INT8 mAP50-95 drop the gates judge is within target."""

from __future__ import annotations

import csv
import logging
import shutil
import time
from pathlib import Path

from qgate.autofix_search import (Search, aimed_family, meets_target, plain_drop, plain_failures, plain_int8,
                                  step_columns)
from qgate.deployment_checks import at_conf_checks, shift_checks
from qgate.cli import run_stage
from qgate.executors import open_executor
from qgate.errors import QgateError
from qgate.group_prices import PRICE_COLUMNS, Prices, price_groups, price_rows
from qgate.io import atomic_dir, read_json, sha256_file, write_csv, write_json, write_text
from qgate.groups import ignored_names
from qgate.params import Params
from qgate.paste import paste_block
from qgate.artifacts import export_record, fixed_model, weights_file, fp32_model, int8_weights_sha256, require_int8_model, require_output
from qgate.runtimes import Runtime, runtime_for
from qgate.task_metrics import Scored
from qgate.tasks import task_for

log = logging.getLogger(__name__)


def main(params: Params) -> dict:
    """Search few groups of the sensitivity ranking that meet the target in float; write the fixed model and scope."""
    cfg = params.autofix
    for output in (cfg.metrics, cfg.steps, cfg.scope, cfg.prices):
        Path(output).unlink(missing_ok=True)
    record = export_record(params)
    int8_path = require_int8_model(params)
    int8_metrics = read_json(require_output(params.int8_eval.metrics, "int8_eval"))
    task = task_for(record).metrics
    family = aimed_family(task, int8_metrics, params)
    main = family.main
    baseline = int8_metrics[f"baseline_{main.key}"]
    runtime = runtime_for(params)
    start = time.perf_counter()
    drop = plain_drop(int8_metrics, family)
    failed = plain_failures(params, task, int8_metrics)
    needed = not meets_target(params, *drop) or bool(failed)
    if not needed:
        log.info("autofix: the plain INT8 model meets autofix.target_drop %.4f (%s drop %.4f [%.4f, %.4f], the "
                 "largest)%s; nothing to fix", cfg.target_drop, family.main.title, *drop,
                 " and the at-threshold gates" if task.deployment_analyses else "")
        _save_copy(runtime, int8_path, Path(cfg.out_dir))
        steps, names = [], []
        best = plain_int8(int8_metrics, family, within_target=1)
    else:
        order = ranking(params)
        fp32, int8 = runtime.read(fp32_model(params)), runtime.read(int8_path)
        groups = runtime.quantizer_groups(int8)
        detections = (read_json(require_output(params.baseline.detections, "baseline")),
                      read_json(require_output(params.int8_eval.detections, "int8_eval")))
        price = ((lambda kept: price_groups(params, int8, fp32, groups, kept, int8_path)) if cfg.price_rounds
                 else None)
        with open_executor(params.compute) as executor:
            search = Search(params, record, family, fp32, int8, groups, order, int8_metrics, detections, executor,
                            price)
            chosen, best = search.run()
        steps, names = search.steps, ignored_names(groups, set(chosen))
        revert_and_save(runtime, int8, fp32, groups, set(chosen), fixed_model(params))
    prices = search.prices if needed else None
    write_csv(cfg.steps, steps, step_columns(family, at_conf_checks(params, task)))
    write_csv(cfg.prices, price_rows(prices, groups, chosen) if prices else [], PRICE_COLUMNS)
    write_text(cfg.scope, scope_block(params, names, best, baseline, family))
    metrics = {
        "needed": int(needed),
        "reached": int(best["within_target"]),
        "target_drop": cfg.target_drop,
        "aimed_at": family.name,
        "groups_float": len(chosen) if needed else 0,
        "ops_float_added": len(names),
        "evaluations": len(steps),
        "stopped": search.stopped if needed else "",
        f"fixed_{main.key}": best[main.key],
        f"fixed_{family.second.key}": best[family.second.key],
        f"fixed_{main.stat('drop')}": best[main.stat("drop")],
        f"fixed_{main.stat('drop')}_ci_low": best["drop_ci_low"],
        f"fixed_{main.stat('drop')}_ci_high": best["drop_ci_high"],
        "fails": best["fails"],  # the deployment gates the suggestion fails, as measured ('' when none)
        **{f"fixed_{check.key}_drop": round(search.shift_drops[check.key].point, 5)
           for check in shift_checks(params, task.primary) if needed and check.key in search.shift_drops},
        "ci_level": params.int8_eval.ci_level,
        **_total_price(prices),
        "seconds": round(time.perf_counter() - start, 2),
        "model_sha256": record["model_sha256"],
        "int8_ir_bin_sha256": int8_weights_sha256(params),
        "fixed_ir_bin_sha256": sha256_file(weights_file(fixed_model(params))),
    }
    write_json(cfg.metrics, metrics)
    return metrics


def _total_price(prices: Prices | None) -> dict:
    """How many times faster plain INT8 runs than the fixed model with the greedy's groups float (None: unpriced)."""
    plain = prices.plain_int8 if prices else None
    return {"int8_speed_over_fixed": plain and round(plain.point, 3),
            "int8_speed_over_fixed_ci_low": plain and round(plain.low, 3),
            "int8_speed_over_fixed_ci_high": plain and round(plain.high, 3),
            "priced_groups_float": prices.groups_float if prices else None}


def ranking(params: Params) -> list[int]:
    """Group indices from the sensitivity ranking, best first; an error when there is nothing to rank."""
    with open(require_output(params.sensitivity.csv, "sensitivity")) as handle:
        order = [int(row["group"]) for row in csv.DictReader(handle)]
    if not order:
        raise QgateError(f"{params.sensitivity.csv}: no ranked quantizer group (no INT8 detection error on the "
                         f"{params.sensitivity.images} ranking images); raise sensitivity.images or lower "
                         f"sensitivity.conf")
    return order


def revert_and_save(runtime: Runtime, int8, fp32, groups, selected: set[int], path: Path) -> None:
    """Save the INT8 model with `selected` groups in float to `path`, atomically (folder renamed into place)."""
    model = runtime.revert(int8, fp32, groups, selected)
    with atomic_dir(path.parent) as staging:
        runtime.save(model, staging / path.name)


def _save_copy(runtime: Runtime, source: Path, out_dir: Path) -> None:
    with atomic_dir(out_dir) as staging:
        for path in runtime.model_files(source):
            shutil.copy(path, staging / path.name)


def scope_block(params: Params, names: list[str], best: dict, baseline: float, family: Scored) -> str:
    """The `quantize.ignored_scope` block to paste into params.yaml: the current entries plus the new names."""
    scope = params.quantize.ignored_scope
    block = {"ignored_scope": {
        "names": list(dict.fromkeys([*scope.names, *names])), "patterns": list(scope.patterns),
        "types": list(scope.types),
        "subgraphs": [{"inputs": list(s.inputs), "outputs": list(s.outputs)} for s in scope.subgraphs]}}
    if best[family.main.key] is None:
        reached = "autofix evaluated nothing"
    else:
        level = params.int8_eval.ci_level
        reached = (f"autofix measured {family.main.title} {best[family.main.key]:.4f} (drop "
                   f"{best[family.main.stat('drop')]:.4f} from FP32 "
                   f"{baseline:.4f}; {level:.0%} interval [{best['drop_ci_low']:.4f}, {best['drop_ci_high']:.4f}], "
                   f"paired bootstrap over the val images) with {len(names)} more ops in float")
    clean = best[family.main.key] is not None and meets_target(params, best[family.main.stat("drop")],
                                                            best["drop_ci_low"], best["drop_ci_high"])
    within = "within" if clean else "NOT within"
    how = "judged on its interval, like the gate" if params.gates.confidence is not None else "judged on the point"
    fails = f"# It is not a fix: it fails {best['fails']}.\n" if best.get("fails") else ""
    header = (f"# Paste under `quantize:` in params.yaml (replacing its ignored_scope).\n# {reached}: {within} "
              f"autofix.target_drop {params.autofix.target_drop} ({how}).\n{fails}")
    if not names and best["within_target"]:
        header = f"# Nothing to add: the current quantize.ignored_scope already meets the target.\n# {reached}.\n"
    elif not names:
        header = (f"# Nothing to add: no group autofix tried in float gained beyond noise.\n# {reached}: {within} "
                  f"autofix.target_drop {params.autofix.target_drop} ({how}).\n{fails}")
    return paste_block(header, block)


if __name__ == "__main__":
    run_stage(main, __doc__)
