"""The size of this CPU's last-level cache, as the operating system reports it.

Whether a [K, D] Gramian is faster formed by column chunks than by one BLAS product depends on
whether the matrix stays in the last-level cache (:mod:`morl.solvers.gramian`), and machines
differ by 4x there (8 MB on a Zen 1 EPYC guest, 32 MB on a Zen 4 one), so the cut is read from
the machine instead of fixed.
"""

from __future__ import annotations

from pathlib import Path

#: Linux's description of cpu0's caches: one ``indexN`` folder per cache, with ``level`` and
#: ``size`` ("8192K") files
SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def last_level_cache_bytes(root: Path = SYSFS_CACHES) -> int | None:
    """Bytes of the highest-level data or unified cache under ``root``, or None where the
    machine does not say (not Linux, no sysfs, an unreadable or malformed entry)."""
    best: tuple[int, int] | None = None
    try:
        for entry in sorted(root.glob("index*")):
            if (entry / "type").read_text().strip() == "Instruction":
                continue
            level = int((entry / "level").read_text())
            size = _parse_size((entry / "size").read_text())
            if size is not None and (best is None or level > best[0]):
                best = (level, size)
    except (OSError, ValueError):
        return None
    return None if best is None else best[1]


def _parse_size(text: str) -> int | None:
    """``"8192K"`` -> 8388608; None for anything else."""
    text = text.strip().upper()
    unit = text[-1:] if text[-1:] in _UNITS else ""
    digits = text[: len(text) - len(unit)]
    return int(digits) * _UNITS[unit] if digits.isdigit() and int(digits) > 0 else None
