"""riverbed.client's place in the layers (DESIGN.md): it may use riverbed.protocol and kio,
never the broker, the log or the CLI that uses it."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_client_loads_only_the_client_and_the_protocol() -> None:
    code = (  # every name of the package, those it loads on first use included
        "import sys, riverbed.client; "
        "[getattr(riverbed.client, name) for name in riverbed.client.__all__]; "
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('riverbed.')}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "['client', 'protocol']"
