"""riverbed.client's place in the layers (DESIGN.md): it may use riverbed.protocol and kio,
never the broker, the log or the CLI that uses it."""

from __future__ import annotations

from tests.support.imports import modules_loaded_by


def test_importing_the_client_loads_only_the_client_and_the_protocol() -> None:
    # every name of the package, those it loads on first use included
    loaded = modules_loaded_by(
        "import riverbed.client\n"
        "[getattr(riverbed.client, name) for name in riverbed.client.__all__]"
    )
    layers = {name.split(".")[1] for name in loaded if name.startswith("riverbed.")}
    assert layers == {"client", "protocol"}
