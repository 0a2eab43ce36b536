"""Batches for the reasoning models from datasets on disk (arc_data's layout)."""
