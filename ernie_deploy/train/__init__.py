"""The offline bootstrap: a small ERNIE trained from random init on the local data splits, on CPU, and cached by
content. Recipes per task and kind, the vocabulary, the training loop, and the cache that finds a trained model.

Imports: ernie_deploy.core, serving and fetch (the data splits); paddle and paddlenlp lazily, inside the functions
that train.
"""
