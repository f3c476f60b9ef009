"""Execution: Ray and Tune, the driver, the worker, the hand-over, shipping data, the store,
progress, signals, reproduce."""
