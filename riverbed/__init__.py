"""riverbed: a streaming data platform where the log is the database."""
