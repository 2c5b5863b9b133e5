"""The per-type table of span-level reports (entities, extracted spans): precision, recall, F1 and support per type,
then the overall row, as every client prints it."""

from __future__ import annotations


def type_table(per_type: dict[str, dict], overall: dict) -> str:
    """`per_type`: type -> {"precision", "recall", "f1", "support"}; `overall`: the same four for all types."""
    lines = [f"{'type':<8} {'precision':>9} {'recall':>9} {'f1':>9} {'support':>8}"]
    for name, row in [*per_type.items(), ("overall", overall)]:
        lines.append(f"{name:<8} {row['precision']:>9.4f} {row['recall']:>9.4f} {row['f1']:>9.4f} {row['support']:>8}")
    return "\n".join(lines)
