"""What the tests share, and nothing else: shared helpers live here, fixtures in the
``conftest.py`` files (which take their code from here). A helper one test module uses
stays in that module. Helpers the benchmarks and ``make demo`` need too are in
:mod:`riverbed.testing` (reading a topic to its end, the pipelines' references).

- :mod:`tests.support.cli`: ``riverbed ...`` run to completion or as a child process; what
  a CLI run must look like (``ok``, ``failed``, ``table``).
- :mod:`tests.support.brokers`: ``riverbed broker`` as a child process; creating topics.
- :mod:`tests.support.ports`: free ports.
- :mod:`tests.support.wire`: the Kafka wire client and the requests several tests send.
- :mod:`tests.support.groups`: classic and KIP-848 consumers, polling a group round-robin.
- :mod:`tests.support.transactions`: a transactional producer; a DescribeTransactions answer.
- :mod:`tests.support.topics`: producing events and records, reading JSON records back, the
  changelog they make.
- :mod:`tests.support.log_files`: batches, logs and oracles of the log tests.
- :mod:`tests.support.capture`: the CDC tests' databases, ``riverbed cdc run``, reading and
  folding a CDC topic, a writer of random transactions.
- :mod:`tests.support.fake_capture`: a fake capture of one table, without PostgreSQL.
- :mod:`tests.support.events`: generated page views and bounded disorder.
- :mod:`tests.support.pipelines`: ``riverbed pipeline run`` as a child process.
- :mod:`tests.support.spark_reader`: producing test records and short streaming queries.
- :mod:`tests.support.carts`: the carts' commands (with conflicts), sending them as Kafka's
  Java clients partition, waiting for every answer, and the contract's checks of the log.
- :mod:`tests.support.cart_workload`: what each command ``riverbed workload shop`` sends to
  the carts must get as an answer.
- :mod:`tests.support.projections`: ``riverbed es project`` as a child process, its models
  read back, the carts' replayed states.
- Programs the tests run as child processes: ``eos_worker.py`` (an exactly-once
  consume-transform-produce worker) and ``sink_job.py`` (a streaming copy job into the
  sink that can crash on purpose; its input files and output reader).
"""
