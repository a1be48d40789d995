"""Report side: results -> summary."""
