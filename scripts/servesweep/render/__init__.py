"""Render side: recipe + cluster facts -> plan (pure; no processes)."""
