"""Searches: Optuna through Ray Tune, the search trial, the final evaluation."""
