"""Advantage estimators and policy losses: pure tensor / list functions."""
