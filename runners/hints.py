"""How to spell a command in the hints morl prints (``continue with: morl resume RUN``): the form
that runs from the user's shell. A venv used without activating it has ``.venv/bin/morl`` but no
``morl`` on PATH, so the hint names the script by its path there."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path


def scripts_dir() -> Path:
    """Where this interpreter's environment installs console scripts (``.venv/bin``)."""
    return Path(sysconfig.get_path("scripts"))


def command(name: str) -> str:
    """``name`` if PATH finds this environment's own ``name``, else the script's path (relative to
    the working directory when below it); ``name`` when this environment has no such script."""
    script = scripts_dir() / name
    if not script.is_file():
        return name
    found = shutil.which(name)
    if found is not None and Path(found).resolve() == script.resolve():
        return name
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else str(script)
