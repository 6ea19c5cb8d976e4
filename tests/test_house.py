"""The house stays walkable: no function in the engine longer than 80 lines (a compiled numba
kernel, which cannot call helpers cheaply, is the exception), and no private names of Optuna
outside the one module that wraps them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 80


def _functions() -> list[tuple[str, int, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    for root in ("dse", "formulations"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    out.append((str(path.relative_to(REPO)), node.lineno, node))
    return out


def _compiled(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("njit" in ast.unparse(d) for d in node.decorator_list)


def test_no_function_is_longer_than_80_lines() -> None:
    long = [
        f"{path}:{line} {node.name} ({node.end_lineno - line + 1} lines)"  # type: ignore[operator]
        for path, line, node in _functions()
        if node.end_lineno - line + 1 > MAX_LINES and not _compiled(node)  # type: ignore[operator]
    ]
    assert long == []


def test_the_walk_sees_the_engine() -> None:
    names = {node.name for _, _, node in _functions()}
    assert {"place_best", "evaluate", "check", "forward_cost", "main"} <= names


PRIVATE_OPTUNA = re.compile(
    r"\._storage\b|\._trial_id\b|\._study_id\b|\._backend\b|optuna(\.\w+)*\._\w+|from optuna(\.\w+)*\._\w+"
)


def test_optunas_private_names_stay_in_their_one_wrapper() -> None:
    """Where Optuna has no public way, the one module dse.study.optuna_compat holds the access,
    with its reason; no other module of the engine names Optuna's private parts."""
    found = [
        f"{path.relative_to(REPO)}:{i}: {line.strip()}"
        for root in ("dse", "formulations")
        for path in sorted((REPO / root).rglob("*.py"))
        if path.name != "optuna_compat.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_OPTUNA.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []
    assert PRIVATE_OPTUNA.search("study._storage.get_trial(t)") and PRIVATE_OPTUNA.search(
        "from optuna.samplers._tpe import sampler"
    )
