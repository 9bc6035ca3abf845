"""A probe run in a fresh interpreter with the engine's package importable: what it printed last, as JSON.

For what one test process cannot show twice: an import seen to happen, the
collector's process-wide switch, a freeze count from zero.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def probe_json(code: str, *argv: str, timeout: float = 60) -> Any:
    """Run ``code`` with ``argv`` as its arguments; the last line of its output, decoded."""
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": str(ENGINE)},
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
