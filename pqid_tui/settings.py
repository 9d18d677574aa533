"""The app's few remembered choices (theme, replay base image and wheelhouse), in one JSON file.

The app run from the command line keeps them in `settings.json` under the user config
directory; an app made for a test keeps them in memory only (no path), so tests never write
outside their own directories. A file that cannot be read or written is not an error: the
app starts with its defaults and says nothing (these are conveniences, not data).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KEYS = ("theme", "base_image", "wheelhouse")


def default_settings_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_config_dir("pqid-tui")) / "settings.json"


class Settings:
    """String settings by key, saved to `path` (when given) on every change."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.values: dict[str, str] = {}
        if path is not None:
            try:
                data: Any = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = {}
            if isinstance(data, dict):
                self.values = {k: v for k, v in data.items() if k in KEYS and isinstance(v, str)}

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def set(self, key: str, value: str | None) -> None:
        if key not in KEYS:
            raise KeyError(key)
        if (value or None) == self.values.get(key):
            return
        if value:
            self.values[key] = value
        else:
            self.values.pop(key, None)
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        try:
            from engine.rundir.storage import atomic_write_bytes

            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(
                self.path, (json.dumps(self.values, indent=2, sort_keys=True) + "\n").encode()
            )
        except OSError:
            pass
