"""The divergence table's rows: each layer's local SQNR drop, where its error came from, and rule-based advice."""

from __future__ import annotations

from qgate.divergence import SQNR_CAP_DB, LayerFacts


def layer_rows(inputs_of: dict, int8_ops: dict[str, LayerFacts], keys: list, stats: dict, quantizers: dict,
               concat_ratio: float) -> list[dict]:
    """One row per layer in topological order with local drop, quantization facts and advice.

    `inputs_of`: the (name, port) outputs each FP32 op reads; `int8_ops`: what the runtime says of each INT8 op.
    """
    by_name = {q.name: q for q in quantizers.values()}
    computed = {key: stats[key].row() for key in keys}
    rows, row_of = [], {}
    for index, key in enumerate(keys):
        name, port = key
        row = {"index": index, "name": name, "port": port, "type": int8_ops[name].type, **computed[key]}
        sources = [k for k in inputs_of.get(name, []) if k in computed or k[0] not in int8_ops]
        worst = min(sources, key=lambda k: computed[k]["sqnr_db"] if k in computed else 1e9, default=None)
        inherited = computed[worst]["sqnr_db"] if worst in computed else 100.0
        row["local_drop_db"] = round(inherited - row["sqnr_db"], 3)
        row["inherits_error"] = int(inherited < SQNR_CAP_DB)
        row["worst_input"] = worst[0] if worst in computed else ""
        facts = int8_ops[name]
        fqs = [by_name[fq] for fq in facts.input_quantizers if fq in by_name]
        row["inputs_quantized"] = int(bool(fqs))
        row["weights_int8"] = int(facts.weights_int8)
        worst_fq = max(fqs, key=lambda q: q.row()["clip_fraction"], default=None)
        row["input_quantizer"] = worst_fq.name if worst_fq else ""
        row.update({k: round(worst_fq.row()[k], 6) if worst_fq else "" for k in
                    ("clip_fraction", "clip_error_share", "round_error_share")})
        row["inputs"] = " ".join(dict.fromkeys(k[0] for k in sources if k in computed))
        row["introduces_error"] = int(row["inputs_quantized"] or row["weights_int8"])
        # a float op carries the error of the quantized op up its worst inputs (inputs come first in graph order)
        inherited_from = row_of.get(row["worst_input"], {}).get("error_from", "")
        row["error_from"] = name if row["introduces_error"] else inherited_from
        input_ranges = [computed[k]["fp32_max"] - computed[k]["fp32_min"] for k in sources if k in computed]
        row["advice"] = advice(row, input_ranges, concat_ratio)
        rows.append(row)
        row_of[name] = row
    return rows


def divergent(rows: list[dict], local_drop_db: float, sqnr_db: float) -> list[dict]:
    """The layers that break the signal, in graph order: each introduces quantization error (quantized inputs or
    int8 weights), loses more than `local_drop_db` of SQNR against its worst input, and ends below `sqnr_db`.

    A local drop alone is not enough: an early stride-2 conv of a custom YOLOv8n lost 11.9 dB (36.1 -> 24.2 dB),
    a normal INT8 loss that leaves the signal intact, and was named ahead of a range fault deeper in the backbone
    that left its layer at 1.6 dB. Layers whose inputs are still exact (the network input) are skipped: there
    quantization merely begins, and any drop from an error-free input is large. Float ops are skipped too: they
    cannot introduce quantization error, only amplify what they inherit (a subtraction of close values in the
    box decode lost 17.5 dB on the COCO reference; `advice` names where that error came from). Which of several
    matters most to the detections is the sensitivity stage's answer (`lead_divergent_layer`).
    """
    return [r for r in rows if r["inherits_error"] and r["introduces_error"] and r["local_drop_db"] > local_drop_db
            and r["sqnr_db"] < sqnr_db]


def advice(row: dict, input_ranges: list[float], concat_ratio: float) -> str:
    """Rule-based hints (docs/diagnosis.md: 'Reading the divergence table'); empty means nothing flagged, not 'fine'."""
    hints = []
    if not row["introduces_error"] and row["inherits_error"] and row["local_drop_db"] > 0:
        hints.append(f"float op: amplifies the error it inherits from {row['worst_input']} (introduced at "
                     f"{row['error_from'] or 'an input'}); look there, not here")
    if row["nan_inf"]:
        hints.append("NaN/Inf in INT8: keep this layer in float and check the FakeQuantize ranges feeding it")
    if row["clip_error_share"] != "" and row["local_drop_db"] > 0:
        if row["clip_error_share"] > 0.5:
            hints.append(f"clipping-dominated ({row['clip_fraction']:.2%} of inputs clipped): use a wider range "
                         "estimator (e.g. MINMAX) or keep in float")
        elif row["round_error_share"] > 0.5 and row["fp32_max"] - row["fp32_min"] > 0:
            hints.append("rounding-dominated: the range is wide for most values (outliers?); try per-channel "
                         "activations or keep in float")
    positive = [r for r in input_ranges if r > 0]
    if row["type"] == "Concat" and len(positive) > 1 and max(positive) / min(positive) > concat_ratio:
        hints.append(f"concat of inputs whose ranges differ {max(positive) / min(positive):.0f}x: one shared "
                     "scale wastes the small inputs' bits")
    if not row["introduces_error"] and row["local_drop_db"] <= 0 and row["sqnr_db"] < 30:
        hints.append(f"kept in float but inherits error from {row['worst_input'] or 'its inputs'}")
    return "; ".join(hints)
