"""kcat (Debian's librdkafka command-line client) against a real broker process."""

from __future__ import annotations

import json
import subprocess

from tests.support.brokers import BrokerProcess


def kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_metadata_produce_consume(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    lines = [f"key{i}:value {i}" for i in range(100)]
    kcat("-P", "-b", bootstrap, "-t", "kc", "-K", ":", stdin="\n".join(lines) + "\n")

    metadata = json.loads(kcat("-L", "-b", bootstrap, "-t", "kc", "-J"))
    assert [b["id"] for b in metadata["brokers"]] == [0]
    (topic,) = metadata["topics"]
    assert topic["topic"] == "kc"
    assert [p["partition"] for p in topic["partitions"]] == [0]
    assert topic["partitions"][0]["leader"] == 0

    out = kcat("-C", "-b", bootstrap, "-t", "kc", "-e", "-f", "%o %k=%s\n")
    assert out.splitlines() == [f"{i} key{i}=value {i}" for i in range(100)]

    # From an offset, and the last N messages (-o -N uses ListOffsets latest).
    tail = kcat("-C", "-b", bootstrap, "-t", "kc", "-o", "-3", "-e", "-f", "%o\n")
    assert tail.split() == ["97", "98", "99"]
