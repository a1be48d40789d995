"""Capacity at SLO: a result's figures against the SLO, and the search's next probe."""
