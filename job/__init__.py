"""One Hydra job, the top of the house below train.py and Hydra's plugins: check the config
(config.py), start or become the ranks (launchers/), and end through finalise.py whatever happened
(run.py); output_dir.py gives each run a directory of its own before any of it."""
