"""Regenerate `screenshots/*.svg`: the app photographs itself during a real oracle run.

    python -m tests.tools.screenshots [--out screenshots] [--replay --base-image IMG --wheelhouse D]

It opens the app on the bundled demo release with a fresh runs directory, plans and runs the
`oracle` route (in-process, no network), and saves each main screen with
`App.save_screenshot`. With `--replay` it also builds the evaluator image and replays the run
in Docker before photographing the Replay screen (minutes; needs a Docker Engine).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
from pathlib import Path
from typing import Any

SIZE = (120, 40)
RUNS_DIR = Path("/tmp/pqid-tui-screenshots/runs")


async def shoot(
    out: Path, *, replay: bool, base_image: str | None, wheelhouse: str | None
) -> list[Path]:
    from textual.widgets import Checkbox, Input

    from engine.demo import DEMO_RELEASE_DIR
    from pqid_tui.app import make_app

    shutil.rmtree(RUNS_DIR, ignore_errors=True)
    RUNS_DIR.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    app = make_app(DEMO_RELEASE_DIR, RUNS_DIR)
    saved: list[Path] = []

    async with app.run_test(size=SIZE) as pilot:

        async def settle(delay: float = 0.3) -> None:
            await app.workers.wait_for_complete()
            await pilot.pause(delay)

        def save(name: str) -> None:
            app.save_screenshot(f"{name}.svg", str(out))
            saved.append(out / f"{name}.svg")

        await settle()
        save("home-empty")
        await pilot.press("n")
        await settle()
        save("new-run")
        await pilot.press("ctrl+s")
        await settle(0.5)
        save("run-monitor")
        await pilot.press("f1")
        await settle()
        save("help")
        await pilot.press("escape")
        await pilot.press("down", "down", "down", "enter")
        await settle()
        save("payload-inspector")
        await pilot.press("escape", "escape")
        await settle()
        save("home")
        await pilot.press("c")
        await settle()
        save("credentials")
        await pilot.press("escape")
        await pilot.press("r")
        await settle(0.5)
        screen: Any = app.screen
        if base_image:
            screen.query_one("#base_image", Input).value = base_image
        if wheelhouse:
            screen.query_one("#wheelhouse", Input).value = wheelhouse
        if replay:
            await pilot.press("b")
            await settle()
            screen.query_one("#acknowledge_execution", Checkbox).value = True
            await pilot.press("ctrl+r")
            await settle(1.0)
        else:
            await pilot.press("f5")
            await settle()
        save("replay")
        if replay:
            screen.query_one("#replay").scroll_end(animate=False)
            await settle()
            save("replay-compare")
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.tools.screenshots",
        description="Regenerate screenshots/*.svg from a real run.",
    )
    parser.add_argument("--out", type=Path, default=Path("screenshots"))
    parser.add_argument(
        "--replay",
        action="store_true",
        help="also build the evaluator image and replay the run in Docker",
    )
    parser.add_argument("--base-image", help="base image for the evaluator image")
    parser.add_argument("--wheelhouse", help="offline wheelhouse for the evaluator image")
    args = parser.parse_args(argv)
    saved = asyncio.run(
        shoot(args.out, replay=args.replay, base_image=args.base_image, wheelhouse=args.wheelhouse)
    )
    for path in saved:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
