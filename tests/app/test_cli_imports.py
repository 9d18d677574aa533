"""Each command line loads only what it needs: no UI, Qiskit or Docker for help or a dry run."""

from __future__ import annotations

import pytest

import engine
from tests.bench.startup import DRY_RUN_ARGS, HELP_ARGS, imported_modules

# Loaded by none of the commands below; each is a top-level package or an engine module
# that does a command's work.
NEVER = {
    "textual",
    "qiskit",
    "docker",
    "keyring",
    "rich",
    "pqid_tui.app",
    "engine.run.live",
    "engine.replay.docker",
    "engine.replay.replay",
    "engine.run.batch",
    "engine.replay.compare",
    "engine.providers.oracle",
    "engine.rundir.records",
}


def loaded(modules: set[str], names: set[str]) -> list[str]:
    return sorted(n for n in names if n in modules or n in {m.split(".")[0] for m in modules})


@pytest.mark.parametrize(
    "args",
    [
        HELP_ARGS,
        *(
            ["--batch", command, "--help"]
            for command in ("run-model", "credentials", "replay", "compare", "demo")
        ),
        ["--version"],
    ],
)
def test_help_loads_no_engine_work_and_no_heavy_package(args: list[str]) -> None:
    code, modules = imported_modules(args)
    assert code == 0
    assert (
        loaded(
            modules,
            NEVER
            | {
                "httpx",
                "pydantic",
                "engine.config",
                "engine.run.plan",
                "engine.release",
                "engine.events",
            },
        )
        == []
    )


def test_dry_run_loads_no_network_ui_or_container_code() -> None:
    code, modules = imported_modules(DRY_RUN_ARGS)
    assert code == 0
    assert "engine.run.plan" in modules  # it did plan, on the bundled demo release
    assert loaded(modules, NEVER | {"httpx"}) == []


def test_parser_defaults_copied_from_compare_agree() -> None:
    from engine.replay import compare as engine_compare
    from pqid_tui.cli import compare as batch_compare

    assert batch_compare.DEFAULT_INFRA_THRESHOLD == engine_compare.DEFAULT_INFRA_THRESHOLD
    assert batch_compare.FORMATS == engine_compare.FORMATS


def test_engine_package_still_exports_its_names_lazily() -> None:
    for name in engine.__all__:
        assert getattr(engine, name) is not None
    with pytest.raises(AttributeError):
        _ = engine.no_such_name  # type: ignore[attr-defined]


def test_the_command_line_module_loads_nothing_of_the_engine_before_main_runs() -> None:
    """A Ctrl-C while the command starts is caught by `main` (one line, exit 130); what loads
    before `main` runs (the console script's import) is outside its reach, so it is kept to
    the standard library: none of the engine, whose imports take most of the start-up."""
    import subprocess
    import sys

    listing = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pqid_tui.cli.main\n"
            "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('engine', 'httpx')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listing.stdout.split() == []
