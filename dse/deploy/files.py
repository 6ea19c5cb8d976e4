"""A design's launch files, whole: :func:`launch_files` (file name -> contents) for an engine,
:func:`write_deploy` to put them in a folder in one swap, and the `dse deploy` command line that
wrote them."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from dse import interrupt
from dse.atomic import remove_stale
from dse.deploy.design import SRC, Design
from dse.deploy.engines import (
    backend_of,
    check_launchable,
    dynamo_args,
    engine_flags,
    router_admits,
    sglang_args,
    trtllm_args,
    trtllm_options,
    vllm_args,
)
from dse.deploy.readme import readme
from dse.deploy.scripts import (
    PORT,
    dynamo_graph,
    http_router_script,
    instances_of,
    launch_script,
    router_script,
)
from dse.errors import InputError

_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?:(?:[a-zA-Z0-9-]+\.[a-zA-Z0-9.-]+|localhost|[a-zA-Z0-9-]+:[0-9]+)(?::[0-9]+)?/)?{_PATH}(?:/{_PATH})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
"""A container image reference as the registries' grammar has it (distribution/reference,
``reference.go``): an optional host (a dot or a port in it, or ``localhost``), lower-case path
components, an optional tag and digest."""


def deploy_command(
    name: str,
    engine: str,
    *,
    out: Path | None = None,
    trial: int | None = None,
    storage: str | None = None,
    image: str | None = None,
) -> str:
    """The `dse deploy` command line that writes these files: the study as it was named (a path
    stays a path), and the flags that chose the run and the trial."""
    words = ["dse", "deploy", str(name)]
    if out is not None and out != Path("runs"):
        words += ["--out", str(out)]
    if storage:
        from dse.study.storage import redact

        words += ["--storage", redact(storage)]
    words += ["--engine", engine]
    if trial is not None:
        words += ["--trial", str(trial)]
    if image:
        words += ["--image", image]
    return " ".join(shlex.quote(w) for w in words)


def launch_files(
    design: Design,
    engine: str,
    flags: dict[str, dict[str, str]] | None = None,
    *,
    command: str | None = None,
    image: str | None = None,
) -> dict[str, str]:
    """File name -> contents of the deployment of ``design`` on ``engine``; ``command`` is the
    command line the README says wrote them (default: `dse deploy STUDY --engine ENGINE`);
    ``image`` the container of every service of Dynamo's graph (default: NVIDIA's runtime image of
    the workers' backend, ``engine_flags.toml``)."""
    flags = flags or engine_flags()
    disagg = any(p.role == "prefill" for p in design.pools)
    check_launchable(design, engine)
    if image is not None and engine != "dynamo":
        why = "is the container of Dynamo's graph.yaml: only --engine dynamo takes it"
        raise InputError(SRC, "--image", why, image)
    if image is not None and (not image.strip() or any(c.isspace() for c in image)):
        raise InputError(SRC, "--image", "must be one container image reference, without spaces", image)
    if image is not None and IMAGE_REFERENCE.fullmatch(image) is None:  # (control characters and
        # upper-case repositories had reached graph.yaml)
        rule = "must be a container image reference: [host[:port]/]lower-case/path[:tag][@digest]"
        raise InputError(SRC, "--image", rule, image)
    other = next((p for p in design.pools if p.vendor != "nvidia"), None)
    if engine == "dynamo" and image is None and other is not None:
        # NVIDIA's Dynamo runtime images are CUDA builds (ai-dynamo/dynamo:container/Dockerfile.vllm,
        # Dockerfile.sglang: ARG BASE_IMAGE="nvcr.io/nvidia/cuda-dl-base")
        default = flags["dynamo"][f"image_{backend_of(design, engine)}"]
        why = (
            f"must name an image built for {other.hardware} GPUs ({other.vendor}), which the {other.name} "
            f"pool runs on: the default, {default}, is NVIDIA's CUDA build"
        )
        raise InputError(SRC, "--image", why)
    files: dict[str, str] = {}
    for k, pool in enumerate(design.pools):
        mode = pool.role if disagg else None
        if engine == "sglang":
            cmd = sglang_args(pool, design, flags["sglang"], mode)
        elif engine == "vllm":
            cmd = vllm_args(pool, design, flags["vllm"])
        elif engine == "trtllm":
            cmd = trtllm_args(pool, design, flags["trtllm"], f"{pool.name}.yaml")
            files[f"{pool.name}.yaml"] = _yaml(trtllm_options(pool, design, flags["trtllm"]))
        else:
            cmd, options = dynamo_args(pool, design, flags, mode)
            files.update({name: _yaml(o) for name, o in options.items()})
        unwired = f"dynamo.{backend_of(design, engine)}" if engine == "dynamo" else ""
        unwired = "" if unwired == "dynamo.sglang" else unwired
        files[f"{pool.name}.sh"] = launch_script(pool, design, cmd, unwired, k)
    if engine == "dynamo":
        files["frontend.sh"] = launch_script(
            None, design, [*flags["dynamo"]["frontend"].split(), flags["dynamo"]["http_port"], str(PORT)]
        )
        container = image or flags["dynamo"][f"image_{backend_of(design, engine)}"]
        files["graph.yaml"] = _yaml(dynamo_graph(design, files, flags, container))
    router = None
    if engine == "sglang":
        router = router_script(design, flags["sglang"], router_admits(design, engine))
    elif engine in ("vllm", "trtllm"):
        router = http_router_script(design, flags["vllm_router"], engine, router_admits(design, engine))
    if router is not None:
        files["router.sh"] = router
    files["instances.json"] = json.dumps(instances_of(design), indent=2) + "\n"
    files["README.md"] = readme(
        design, engine, flags, command or deploy_command(design.study, engine, image=image), image=image
    )
    return files


def _yaml(data: Any, indent: int = 0) -> str:
    """YAML for plain dicts, lists, strings, numbers and booleans (JSON-style strings)."""
    pad = "  " * indent
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(v, dict | list) and v:
                out.append(f"{pad}{k}:\n{_yaml(v, indent + 1)}")
            else:
                out.append(f"{pad}{k}: {_scalar(v)}")
    else:
        for v in data:
            if isinstance(v, dict | list) and v:
                inner = _yaml(v, indent + 1).lstrip()
                out.append(f"{pad}- {inner}")
            else:
                out.append(f"{pad}- {_scalar(v)}")
    return "\n".join(out) + ("\n" if indent == 0 else "")


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if v in ({}, []):
        return json.dumps(v)
    return json.dumps(str(v))


def _remove(path: Path) -> None:
    """``path`` gone, a folder or a file (a file in the deployment folder's place had been left
    beside it as ``.deploy.<pid>.old.tmp``: ``rmtree`` removes folders only)."""
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_deploy(files: dict[str, str], folder: Path) -> list[Path]:
    """The files under ``folder``, replaced whole: written in a sibling folder first and swapped
    in, so an earlier deployment's files never mix with these and a failed write leaves the
    earlier one as it was. A Ctrl-C (or SIGTERM) that comes during the swap waits for it; the
    temporary folders a killed writer left beside ``folder`` go once they are
    :data:`~dse.atomic.STALE_TMP_S` old."""
    import os
    import shutil

    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(folder)
    fresh = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    old = folder.with_name(f".{folder.name}.{os.getpid()}.old.tmp")
    shutil.rmtree(fresh, ignore_errors=True)
    try:
        fresh.mkdir()
        for name, text in files.items():
            (fresh / name).write_text(text, encoding="utf-8")
            if name.endswith(".sh"):
                (fresh / name).chmod(0o755)
        with interrupt.deferred():  # both renames or neither, then the earlier one removed
            if folder.exists():
                folder.rename(old)
            try:
                fresh.rename(folder)
            except BaseException:
                if old.exists():
                    old.rename(folder)
                raise
            _remove(old)
    finally:
        with interrupt.deferred():
            shutil.rmtree(fresh, ignore_errors=True)
    return [folder / name for name in files]
