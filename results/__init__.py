"""The outputs made from run records (the sweep table callback, reports, plots, W&B) and the
committed results; the rows and tables they are built from are tables/."""
