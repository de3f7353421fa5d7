"""riverbed.cli: the ``riverbed`` command, one module per subcommand.

- ``main`` builds the parser from the ``*_command`` modules (``broker``, ``topics``,
  ``produce``, ``consume``, ``groups``, ``transactions``, ``cdc``, ``pipeline``,
  ``workload``), each adding its own with ``add_parser(commands)``, and turns a ``CliError``
  (``errors``, the package's one exception) into one line on stderr: exit 2 for a usage
  error, 1 for a failure, never a traceback.
- ``arguments`` holds the flags the subcommands share, ``confluent`` what the Kafka tools do
  with confluent-kafka (configs, reachability, errors), ``output`` how tables and notices are
  printed.
- Beside the tools, the parts they are made of: ``properties`` and ``formatting`` (the
  ``--property`` and ``--format`` of ``produce`` and ``consume``), ``offset_reset`` (the plan
  of ``groups reset-offsets``, pure), ``group_admin`` (the admin requests of ``groups``).

Kafka requests confluent-kafka cannot send (``transactions``) go through ``riverbed.client``.
"""
