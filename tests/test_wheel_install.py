"""payorch installed from its built wheel runs without the source tree (docs/operations.md, "Going to
production"): the wheel is built from a copy of this checkout (with the development environment's
setuptools, no network), installed alone into a directory of its own, and `payorch check-config` and `payorch
serve` run from a directory that holds no source, importing payorch from the wheel's files only; the
server migrates a fresh database from the wheel's migrations and serves the console's pages from its
templates.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import trio

from tests.helpers import eventually
from tests.processes import free_port, serve_environment

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own tools and arguments
        [str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _install_the_wheel(tmp_path: Path) -> Path:
    """The wheel built from a copy of this checkout (setuptools writes its build files beside the
    source), installed into a directory of its own: that directory."""
    dist, site, source = tmp_path / "dist", tmp_path / "site", tmp_path / "source"
    shutil.copytree(ROOT / "payorch", source / "payorch", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    # uv, as `make` installs it; pip where `make` fell back to pip.
    build: list[str | Path]
    install: list[str | Path]
    if UV.exists():
        build = [
            UV,
            "build",
            "--wheel",
            "--no-build-isolation",
            "--python",
            sys.executable,
            "--out-dir",
            dist,
        ]
        install = [
            UV,
            "pip",
            "install",
            "--offline",
            "--no-deps",
            "--python",
            sys.executable,
            "--target",
            site,
        ]
    else:
        build = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            dist,
        ]
        install = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", site]
    built = _run(*build, source, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("payorch-*-py3-none-any.whl")
    installed = _run(*install, wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    return site


async def test_the_wheel_checks_its_configuration_migrates_and_serves_without_the_source_tree(
    database_dsn: str, tmp_path: Path
) -> None:
    site = await trio.to_thread.run_sync(_install_the_wheel, tmp_path)
    elsewhere = tmp_path / "elsewhere"  # the working directory: no source of payorch in it
    port = free_port()
    env = {**serve_environment(database_dsn, elsewhere, port), "PYTHONPATH": str(site)}
    where = _run(sys.executable, "-c", "import payorch; print(payorch.__file__)", cwd=elsewhere, env=env)
    assert where.stdout.strip() == str(site / "payorch" / "__init__.py"), where.stderr
    checked = _run(sys.executable, "-m", "payorch", "check-config", cwd=elsewhere, env=env)
    assert checked.returncode == 0, checked.stderr
    with (elsewhere / "stderr.log").open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "payorch", "serve"],
            cwd=elsewhere,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def ready() -> bool:
                assert process.returncode is None, (elsewhere / "stderr.log").read_text()[-2000:]
                try:
                    return (await http.get("/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(ready, timeout_s=60)
            sign_in = await http.get("/console/sign-in")  # a template and a stylesheet of the wheel's
            assert sign_in.status_code == 200
            assert "Sign in" in sign_in.text
            docs = await http.get("/api/v1/openapi.json")
            assert docs.status_code == 200
    finally:
        process.terminate()
        with trio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "payorch" not in os.listdir(elsewhere)
