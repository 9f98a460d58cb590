"""Run records and what is made from them: sweep tables, reports, plots, W&B logs."""
