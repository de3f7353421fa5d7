"""``riverbed broker`` as a user runs it: flags, config files, bad input, signals."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from riverbed.broker import Broker
from riverbed.broker.config import BrokerConfig, ConfigError, parse_properties
from tests.support.brokers import create_topic, start_broker_process
from tests.support.cli import run_riverbed


def test_sigterm_and_sigint_shut_down_cleanly_with_exit_code_0(tmp_path: Path) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        broker = start_broker_process(tmp_path / f"data-{sig}")
        create_topic(broker.bootstrap, "t", partitions=1)
        assert broker.stop(sig=sig) == 0
        assert "Traceback" not in broker.log_text()
        assert (tmp_path / f"data-{sig}" / "t-0" / "clean-shutdown").exists()


def test_config_file_and_set_overrides_use_kafka_names(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "# a Kafka server.properties\n"
        "num.partitions=3\n"
        "log.segment.bytes = 2097152\n"
        "zookeeper.connect=localhost:2181\n"
    )
    broker = start_broker_process(
        tmp_path / "data",
        extra_args=("--config", str(config), "--set", "num.partitions=5"),
    )
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("auto", value=b"x")
        assert producer.flush(30) == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics("auto", timeout=30).topics["auto"].partitions) == 5
        resource = ConfigResource(ConfigResource.Type.TOPIC, "auto")
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        assert configs["segment.bytes"].value == "2097152"
        broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        broker_configs = admin.describe_configs([broker_resource])[broker_resource].result(30)
        assert broker_configs["num.partitions"].value == "5"
    finally:
        assert broker.stop() == 0
    assert "ignoring unknown setting 'zookeeper.connect'" in broker.log_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "num.partitions=zero"], "num.partitions='zero'"),
        (["--set", "novalue"], "expected key=value"),
        (["--listen", "nowhere"], "is not HOST:PORT"),
        (["--set", "log.segment.bytes=1"], "log.segment.bytes='1': 1 is outside"),
        (["--set", "log.cleaner.min.cleanable.ratio=2"], "log.cleaner.min.cleanable.ratio='2'"),
        (["--config", "/nonexistent/server.properties"], "cannot read --config"),
    ],
)
def test_bad_settings_get_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    code = 1 if args[0] == "--config" else 2
    done = run_riverbed("broker", "--data-dir", str(tmp_path / "d"), *args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_data_dir_flag_is_a_usage_error() -> None:
    done = run_riverbed("broker")
    assert done.returncode == 2
    assert "--data-dir" in done.stderr


def test_port_in_use_and_data_dir_in_use_are_clear_errors(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_riverbed(
            "broker", "--data-dir", str(tmp_path / "a"), "--listen", f"127.0.0.1:{port}"
        )
    assert done.returncode == 1
    assert "cannot listen on" in done.stderr
    assert "Traceback" not in done.stderr

    first = start_broker_process(tmp_path / "b")
    try:
        done = run_riverbed("broker", "--data-dir", str(tmp_path / "b"), "--listen", "127.0.0.1:0")
        assert done.returncode == 1
        assert "in use by another broker" in done.stderr
    finally:
        first.stop()


def test_unwritable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = run_riverbed("broker", "--data-dir", str(blocker / "data"), "--listen", "127.0.0.1:0")
    assert done.returncode == 1
    assert "cannot create data directory" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("damaged", ["topics.json", "producer-id-block"])
def test_damaged_metadata_file_stops_start_up_with_its_name(tmp_path: Path, damaged: str) -> None:
    broker = start_broker_process(tmp_path / "data")
    create_topic(broker.bootstrap, "kept", partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    producer.produce("kept", value=b"v")  # an idempotent producer: a producer id is taken
    assert producer.flush(30) == 0
    assert broker.stop() == 0
    path = tmp_path / "data" / damaged
    original = path.read_bytes()
    path.write_bytes(b"{not json")
    done = run_riverbed("broker", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0")
    assert done.returncode == 1
    assert f"{damaged} is damaged" in done.stderr
    assert "Traceback" not in done.stderr
    assert path.read_bytes() == b"{not json", "nothing was rewritten"
    path.write_bytes(original)
    restarted = start_broker_process(tmp_path / "data")
    try:
        admin = AdminClient({"bootstrap.servers": restarted.bootstrap})
        assert "kept" in admin.list_topics(timeout=30).topics
    finally:
        assert restarted.stop() == 0


def test_in_process_broker_keeps_its_cluster_id_across_restarts(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as broker:
        first = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        cluster_id = first.list_topics(timeout=30).cluster_id
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as broker:
        again = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert again.list_topics(timeout=30).cluster_id == cluster_id
    with pytest.raises(ConfigError, match="belongs to node 0"):
        Broker(tmp_path / "data", listen="127.0.0.1:0", config={"node.id": "7"}).start()


def test_acks_1_logs_are_checkpointed_periodically(tmp_path: Path) -> None:
    config = {"log.flush.offset.checkpoint.interval.ms": "200", "log.segment.bytes": "4096"}
    with Broker(tmp_path / "data", listen="127.0.0.1:0", config=config) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "1"})
        for i in range(200):
            producer.produce("ck", value=b"%0100d" % i)
            producer.flush(30)  # one batch per message, so segments roll
        point = tmp_path / "data" / "ck-0" / "recovery-point"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if point.exists() and int(point.read_text().split()[1]) > 0:
                break
            time.sleep(0.1)
        assert int(point.read_text().split()[1]) > 0, "the recovery point moved while running"


def test_config_parsing_units() -> None:
    assert parse_properties(["a=1", "b: 2", "# c=3", "! d", "e = x=y"], source="f") == {
        "a": "1",
        "b": "2",
        "e": "x=y",
    }
    with pytest.raises(ConfigError, match="f:1"):
        parse_properties(["just words"], source="f")
    config, unknown = BrokerConfig.build(
        data_dir=Path("/d"),
        properties={"listeners": "PLAINTEXT://0.0.0.0:9093", "message.max.bytes": "2000000"},
    )
    assert (config.listen.host, config.listen.port) == ("0.0.0.0", 9093)
    assert config.log_defaults.max_message_bytes == 2_000_000
    assert config.advertised_listener(bound_port=9093).host == "127.0.0.1"
    assert unknown == []
    with pytest.raises(ConfigError, match="only PLAINTEXT"):
        BrokerConfig.build(data_dir=Path("/d"), properties={"listeners": "SSL://h:1"})
