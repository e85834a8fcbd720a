"""What a quantizer group kept in float costs in speed: timed pairs (`benchmark_app` on OpenVINO) of the fixed model
and the same model with that one group back in INT8."""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

from qgate.artifacts import model_name
from qgate.intervals import Interval, ratio_interval
from qgate.groups import Group
from qgate.params import Params
from qgate.runtimes import Runtime, runtime_for
from qgate.speed_rounds import speed_round

PRICE_COLUMNS = ["group", "first_op", "ops", "speed_in_int8", "speed_in_int8_ci_low", "speed_in_int8_ci_high",
                 "measured_with_groups_float"]


@dataclass(frozen=True)
class Prices:
    """Per group: how many times faster the model runs with it back in INT8 (its price in speed), and the plain
    INT8 model's speed over the fixed one (what all of them cost together), both with intervals."""

    per_group: dict[int, Interval]
    plain_int8: Interval
    groups_float: int  # the fixed model's float groups when the prices were measured


def price_groups(params: Params, int8, fp32, groups: list[Group], chosen: list[int],
                 int8_path: Path) -> Prices:
    """`autofix.price_rounds` interleaved rounds of the fixed model (every `chosen` group float), of each
    one-group-less model and of the plain INT8 model (the runtime's timed run, `autofix.price_seconds` each)."""
    runtime = runtime_for(params)
    cfg = dataclasses.replace(params.benchmark, seconds=params.autofix.price_seconds)
    level = params.benchmark.ci_level
    with tempfile.TemporaryDirectory() as tmp:
        name = model_name(params, "int8")
        irs = {"fixed": _saved(runtime, runtime.revert(int8, fp32, groups, set(chosen)), Path(tmp) / "fixed" / name),
               "int8": int8_path}
        for group in chosen:
            irs[f"g{group}"] = _saved(runtime, runtime.revert(int8, fp32, groups, set(chosen) - {group}),
                                      Path(tmp) / f"g{group}" / name)
        speeds: dict[str, list[float]] = {}
        for _ in range(params.autofix.price_rounds):
            speed_round(runtime, irs, params.baseline.inference_precision, cfg, Path(tmp) / "reports",
                        params.model.imgsz, speeds, "autofix price")
    return Prices({g: ratio_interval(speeds[f"g{g}"], speeds["fixed"], level) for g in chosen},
                  ratio_interval(speeds["int8"], speeds["fixed"], level), len(chosen))


def _saved(runtime: Runtime, model, path: Path) -> Path:
    runtime.save(model, path)
    return path


def price_rows(prices: Prices, groups: list[Group], kept: list[int]) -> list[dict]:
    """reports/autofix_prices.csv: each kept-float group's price."""
    return [{"group": g, "first_op": groups[g].ops[0], "ops": len(groups[g].ops),
             **prices.per_group[g].fields("speed_in_int8", 3), "measured_with_groups_float": prices.groups_float}
            for g in kept]
