"""Nightly trends: change points in the history of each series, and their replay."""
