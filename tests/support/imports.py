"""What importing a module loads: for the tests of the layers and of the command line's start."""

from __future__ import annotations

import subprocess
import sys


def modules_loaded_by(statements: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statements`` (``import x; ...``)."""
    code = f"import sys\n{statements}\nprint('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())
