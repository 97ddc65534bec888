"""Dataset and corpus loading."""
