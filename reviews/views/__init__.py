"""The review desk's pages, one module per page."""
