"""Safety: inputs are parsed as data, database passwords never leave the process, and outputs stay
inside the folder the user chose.

(a) No code path of the engine evaluates input: an AST scan of `dse/` and `formulations/` refuses
    eval, exec, compile, __import__, pickle, marshal, shelve, unsafe YAML and pickled numpy
    loads; a TOML value that looks like Python stays a string, and a flag that looks like an
    expression is refused rather than computed.
(b) A storage URL's password is absent from stdout, stderr, the run folder (spec, report,
    Parquet files and their key-value metadata) and the study's stored attributes, on a real
    PostgreSQL server, on success and on the error paths that print the URL.
(c) A study writes under `--out/<name>/` only: a name that is a path is refused, and a study
    path with `..` in it writes nothing outside `--out`.

Each test fails when its protection is removed (checked by hand: see the report of the change that
added this file); the scanner also proves on a snippet that it finds what it looks for.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import optuna
import polars as pl
import pytest
from conftest import REPO, dse_cmd

from dse.cli.main import main

TINY = REPO / "tests" / "data" / "tiny-study.toml"
SOURCE_DIRS = [REPO / "dse", REPO / "formulations"]

# ---------------------------------------------------------------------------------------------
# (a) inputs are data

FORBIDDEN_NAMES = {"eval", "exec", "compile", "__import__", "execfile", "input"}
FORBIDDEN_MODULES = {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
FORBIDDEN_ATTRS = {
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
    ("yaml", "load_all"),
    ("pd", "read_pickle"),
    ("pandas", "read_pickle"),
    ("torch", "load"),
    ("importlib", "import_module"),
    ("builtins", "eval"),
    ("builtins", "exec"),
}


def forbidden_uses(source: str, filename: str) -> list[str]:
    """Every call or import in ``source`` that could run input as code, as `file:line: what`."""
    found: list[str] = []
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [
                f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES
            ]
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if module in FORBIDDEN_MODULES:
                found.append(f"{where}: from {node.module} import ...")
            if module == "builtins" and any(a.name in FORBIDDEN_NAMES for a in node.names):
                found.append(f"{where}: from builtins import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_NAMES:
                found.append(f"{where}: {func.id}(...)")
            elif isinstance(func, ast.Attribute):
                owner = func.value.id if isinstance(func.value, ast.Name) else None
                if (owner, func.attr) in FORBIDDEN_ATTRS or owner in FORBIDDEN_MODULES:
                    found.append(f"{where}: {owner}.{func.attr}(...)")
                if func.attr == "load" and any(
                    k.arg == "allow_pickle"
                    and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in node.keywords
                ):
                    found.append(f"{where}: {owner}.load(allow_pickle=...)")
            elif (
                isinstance(func, ast.Call)
                and isinstance(func.func, ast.Name)
                and func.func.id == "getattr"
                and func.args
                and isinstance(func.args[0], ast.Name)
                and func.args[0].id in {"builtins", "__builtins__", "yaml", *FORBIDDEN_MODULES}
            ):
                found.append(
                    f"{where}: getattr({func.args[0].id}, ...)(...)"
                )  # getattr(builtins, "ev" + "al")
    return found


def _sources() -> Iterator[Path]:
    for folder in SOURCE_DIRS:
        yield from sorted(folder.rglob("*.py"))


def test_the_scanner_finds_what_it_looks_for() -> None:
    snippet = """
import pickle
from marshal import loads
import yaml, numpy as np
eval("1 + 1")
exec("x = 1")
__import__("os")
yaml.load(text)
np.load(path, allow_pickle=True)
getattr(builtins, "eval")("1")
yaml.safe_load(text)
np.load(path)
re.compile("x")
getattr(series, "max")()
"""
    found = forbidden_uses(snippet, "snippet.py")
    assert len(found) == 8, found
    assert not any(f.split(":")[1] in ("12", "13", "14", "15") for f in found), found  # the safe calls


def test_engine_source_never_evaluates_or_unpickles() -> None:
    files = list(_sources())
    assert len(files) > 30  # the scan really covers the engine
    found = [hit for path in files for hit in forbidden_uses(path.read_text(), str(path.relative_to(REPO)))]
    assert found == [], "input could run as code:\n" + "\n".join(found)


def _cli(argv: list[str | Path]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_a_python_expression_in_a_data_file_stays_a_string(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSE_CATALOG_DIR", raising=False)
    marker = tmp_path / "pwned"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch() or 'x'"
    hw = (REPO / "hardware_catalog" / "b200.toml").read_text()
    catalog = tmp_path / "catalog"
    (catalog / "hardware").mkdir(parents=True)
    # (the name, free text; the vendor is one of a list since session 62, and such a value is refused)
    text = hw.replace('notes = "', f"notes = {json.dumps(payload)}\n# ", 1).replace(
        'name = "NVIDIA B200 (HGX/DGX B200)"', 'name = "{{7*7}} ${7*7} `id` $(id)"', 1
    )
    (catalog / "hardware" / "b200.toml").write_text(text)
    code, out, err = _cli(["--catalog-dir", catalog, "catalog", "show", "b200", "--json"])
    assert code == 0, err
    shown = json.loads(out)
    assert shown["notes"] == payload and shown["name"] == "{{7*7}} ${7*7} `id` $(id)"
    assert not marker.exists()
    vendor = hw.replace('vendor = "nvidia"', 'vendor = "{{7*7}} $(id)"', 1)
    (catalog / "hardware" / "b200.toml").write_text(vendor)
    code, out, err = _cli(["--catalog-dir", catalog, "catalog", "show", "b200", "--json"])
    assert code == 2 and "vendor = '{{7*7}} $(id)': must be one of amd, nvidia" in err

    # an expression where a number belongs is refused, not computed
    (catalog / "hardware" / "b200.toml").write_text(hw.replace("tdp_w = 1000", 'tdp_w = "999 + 1"'))
    code, _, err = _cli(["--catalog-dir", catalog, "catalog", "list", "hardware"])
    assert code == 2 and "tdp_w = '999 + 1': must be a number" in err

    study = tmp_path / TINY.name
    study.write_text(
        TINY.read_text().replace('description = "test study"', f"description = {json.dumps(payload)}")
    )
    code, out, err = _cli(["study", "show", study])
    assert code == 0, err
    assert json.loads(out)["description"] == payload and not marker.exists()

    place = "place --hardware b200 --rate 5 --ttft 2 --tpot 0.05".split()
    for argv in (
        ["predict", "--hardware", "b200", "--isl", "2**10"],
        [*place, "--isl", "__import__('os').getpid()"],
        [*place, "--returning-share", "0.5", "--prefix", "100", "--think", "0.5*2:30"],
    ):  # an expression is not computed: refused by argparse or by the rule of the flag
        code, _, err = _cli(argv)
        assert code == 2 and "Traceback" not in err, (argv, err)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# (b) passwords

PASSWORD = "Pw-" + uuid.uuid4().hex[:12]


def _with_password(url: str) -> str:
    """``url`` (``postgresql+psycopg2://user@host:port/db``) with a password; the throwaway server
    trusts 127.0.0.1, so any password connects."""
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{PASSWORD}@{host}"


def _study_copy(folder: Path, name: str, objectives: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = TINY.read_text().replace('name = "tiny-study"', f'name = "{name}"')
    if objectives:
        text += f"\n[objectives]\nnames = {objectives}\n"
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def _run(
    argv: list[str | Path], env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        dse_cmd(*[str(a) for a in argv]), capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.mark.e2e
def test_a_password_in_the_storage_url_is_never_written_or_printed(
    postgres_url: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    url = _with_password(postgres_url)
    name = f"safety-{uuid.uuid4().hex[:8]}"
    study = _study_copy(tmp_path / "studies", name)
    out = tmp_path / "runs"
    ran = _run(["study", "run", study, "--out", out, "--storage", url, "--trials", "2"], clean_env)
    assert ran.returncode == 0, ran.stderr
    assert PASSWORD not in ran.stdout + ran.stderr

    files = [p for p in (out / name).rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"spec.json", "report.md", "part-0.parquet"} <= names, names
    for path in files:  # every byte of the run folder: spec, report, figures, Parquet
        assert PASSWORD.encode() not in path.read_bytes(), path
    parquet = [p for p in files if p.suffix == ".parquet"]
    assert len(parquet) == 5
    for path in parquet:  # the key-value metadata, read back as a BI tool would
        meta = pl.read_parquet_metadata(path)
        assert "dse.study_spec" in meta and PASSWORD not in json.dumps(meta)
        kv = duckdb.sql(f"select key::varchar, value::varchar from parquet_kv_metadata('{path}')").fetchall()
        assert kv and PASSWORD not in repr(kv)
    stored = optuna.load_study(study_name=name, storage=postgres_url)
    attrs = json.dumps([stored.user_attrs, *(t.user_attrs for t in stored.trials)], default=str)
    assert "objectives" in attrs and PASSWORD not in attrs

    # error paths that print the storage: other objectives on the same study, a port nobody serves
    other = _study_copy(tmp_path / "other", name, objectives='["gpus"]')
    clash = _run(
        ["study", "run", other, "--out", tmp_path / "runs2", "--storage", url, "--trials", "1"], clean_env
    )
    host_port = postgres_url.rsplit("@", 1)[1].split("/", 1)[0]
    dead = url.replace(host_port, "127.0.0.1:1")
    refused = _run(
        ["study", "run", study, "--out", tmp_path / "runs3", "--storage", dead, "--trials", "1"], clean_env
    )
    # other objectives are bad input (2); a server that does not answer is a storage fault (1)
    for proc, what, code in ((clash, "objectives", 2), (refused, "the database server does not answer", 1)):
        assert proc.returncode == code, proc.stderr
        assert proc.stderr.count("\n") == 1 and what in proc.stderr, proc.stderr
        assert ":***@" in proc.stderr, proc.stderr  # the URL is shown, redacted
        assert PASSWORD not in proc.stdout + proc.stderr
    assert not (tmp_path / "runs3").exists()


def test_a_password_with_an_at_sign_is_not_leaked_by_the_driver_error(tmp_path: Path) -> None:
    url = "postgresql://bob:hunter@2secret@127.0.0.1:1/dse"
    code, out, err = _cli(["study", "run", TINY, "--out", tmp_path / "out", "--storage", url, "--no-export"])
    assert code == 2 and "2secret" not in out + err and "hunter" not in out + err, err


# ---------------------------------------------------------------------------------------------
# (c) output paths


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("name", ["../escape", "ABSOLUTE/escape-abs", "sub/escape"])
def test_a_study_name_that_is_a_path_is_refused(tmp_path: Path, name: str) -> None:
    name = name.replace("ABSOLUTE", str(tmp_path))  # an absolute path, inside the test's folder
    box = tmp_path / "box"
    study = box / "studies" / "escape.toml"
    study.parent.mkdir(parents=True)
    study.write_text(TINY.read_text().replace('name = "tiny-study"', f"name = {json.dumps(name)}"))
    out = box / "a" / "out"
    before = _tree(tmp_path)
    code, _, err = _cli(["study", "run", study, "--out", out, "--trials", "1", "--no-export"])
    assert code == 2 and f"name = {name!r}: must be a plain folder name" in err, err
    assert _tree(tmp_path) == before


def test_a_study_path_with_dots_writes_only_under_out(tmp_path: Path) -> None:
    studies = tmp_path / "studies"
    study = _study_copy(studies, "dots")
    out = tmp_path / "box" / "out"
    (tmp_path / "box" / "elsewhere").mkdir(parents=True)
    via_dots = tmp_path / "box" / "elsewhere" / ".." / ".." / "studies" / study.name
    before = _tree(tmp_path)
    code, _, err = _cli(["study", "run", via_dots, "--out", out, "--trials", "2"])
    assert code == 0, err
    new = _tree(tmp_path) - before
    assert new and all(p.startswith("box/out") for p in new), sorted(new)
    assert (out / "dots" / "report" / "report.md").exists()
    assert (out / "dots" / "exports" / "trials" / "study=dots" / "part-0.parquet").exists()


def test_a_study_named_dot_dot_stays_inside_out(tmp_path: Path) -> None:
    study = tmp_path / "studies" / "...toml"
    study.parent.mkdir()
    study.write_text(TINY.read_text().replace('name = "tiny-study"', 'name = ".."'))
    out = tmp_path / "box" / "out"
    out.mkdir(parents=True)
    code, _, err = _cli(["study", "run", study, "--out", out, "--trials", "1", "--no-export"])
    leaked = sorted(p for p in _tree(tmp_path / "box") if not p.startswith("out"))
    assert leaked == [] and code == 2, (leaked, code, err)
