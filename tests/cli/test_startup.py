"""``riverbed``'s start: every command imports every command module (argparse builds all
their options), so a module loads what only its own command needs where that command runs.
Loading the broker, kio (and the hypothesis it brings), DuckDB, pyarrow and tantivy up
front made each command take 0.8 s to start instead of 0.35 s."""

from __future__ import annotations

import subprocess
import sys

LOADED_WHERE_USED = ("riverbed.broker.server", "kio", "hypothesis", "duckdb", "pyarrow",
                     "tantivy")  # fmt: skip


def test_the_command_line_loads_no_command_s_heavy_modules_before_it_runs() -> None:
    code = (
        "import sys, riverbed.cli.main; "
        "print(sorted({m.split('.')[0] if not m.startswith('riverbed.') else m "
        "for m in sys.modules}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert [name for name in LOADED_WHERE_USED if f"'{name}'" in loaded] == []
