"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned text, right-aligned numbers, one space-padded column each."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [all(_is_num(r[i]) for r in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) or v is None


def _cell(v: object) -> str:
    if v is None or (isinstance(v, float) and v != v):  # nan: not known (a price the catalog lacks)
        return "-"
    if isinstance(v, float):
        # four significant figures; from 9,999.5 up (which they would print as 1e+04) whole numbers
        return f"{v:,.4g}" if abs(v) < 9999.5 else f"{v:,.0f}"
    return str(v)
