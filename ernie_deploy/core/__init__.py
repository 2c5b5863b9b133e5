"""The small core every package may import: errors, task specs, artifact layout, atomic file writes.

Imports: the standard library only.
"""
