"""The measured data-parallel step: rank set-up, step loop, timers, gradient sync strategies, DDP knobs."""
