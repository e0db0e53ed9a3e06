"""Arrives with its own issue; see DESIGN.md."""
