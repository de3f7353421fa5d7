"""riverbed: a streaming data platform where the log is the database.

The packages are its layers, bottom up (each uses only those before it; README, "Layout"):

- :mod:`riverbed.log`: the storage engine (no network, no protocol);
- :mod:`riverbed.protocol`: the Kafka wire codec, sans-IO, broker's and client's sides;
- :mod:`riverbed.broker`: the broker, the only socket server;
- :mod:`riverbed.client`: riverbed's own small Kafka client, for what confluent-kafka
  cannot send;
- :mod:`riverbed.spark`: the PySpark data source ``riverbed`` and ``session()``;
- :mod:`riverbed.cdc`: change data capture from PostgreSQL, in Debezium's format;
- :mod:`riverbed.eventsourcing`: commands decided into events, state derived by replay;
- :mod:`riverbed.pipelines`: stream operators on Spark, and the shop's pipelines;
- :mod:`riverbed.workloads`: the shop's data generators;
- :mod:`riverbed.testing`: helpers shared by the tests, the benchmarks and the demo;
- :mod:`riverbed.cli`: the ``riverbed`` command; :mod:`riverbed.demo`: ``make demo``.

Everything above the broker talks to it only through the Kafka protocol.
"""
