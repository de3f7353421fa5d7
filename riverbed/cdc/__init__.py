"""Change data capture from PostgreSQL into topics (issue 7; in progress: the pgoutput
decoder, :mod:`riverbed.cdc.pgoutput`)."""
