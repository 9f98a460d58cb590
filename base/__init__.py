"""The ground floor: what every layer may import, and which imports nothing of the project above it.

errors (the one-line user errors), log (the console and the job log), record (the run record type),
schema (the config's type), context (what a task gets inside a rank), provenance (what the user
typed, apart from what it resolved to), interrupt (SIGINT/SIGTERM as one exception), store
(rendezvous stores bound to one address). The layer order is in pyproject.toml (import-linter) and
README "Layout, and extending it"."""
