"""Metric definitions and their implementations."""
