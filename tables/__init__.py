"""Run records as rows and tables: one job's Entry, a sweep directory's jobs and their order,
repeats merged into compared configurations, the table builder. Below whatif/ and diagnosis/, which
read these rows; results/ writes the outputs (sweep table, report, plots, W&B) from them."""
