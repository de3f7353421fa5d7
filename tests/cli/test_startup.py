"""``riverbed``'s start: every command imports every command module (argparse builds all
their options), so a module loads what only its own command needs where that command runs.
Loading the broker, kio (and the hypothesis it brings), DuckDB, pyarrow and tantivy up
front made each command take 0.87-1.10 s to start instead of 0.44-0.48 s."""

from __future__ import annotations

from tests.support.imports import modules_loaded_by

LOADED_WHERE_USED = {"riverbed.broker.server", "kio", "hypothesis", "duckdb", "pyarrow",
                     "tantivy"}  # fmt: skip


def test_the_command_line_loads_no_command_s_heavy_modules_before_it_runs() -> None:
    loaded = modules_loaded_by("import riverbed.cli.main")
    packages = {name.split(".")[0] for name in loaded}
    assert LOADED_WHERE_USED & (packages | loaded) == set()
