"""Reliability under load: the soak (many requests, bad ones mixed in, stubs killed on purpose, every answer
checked) and traffic through a rollout and a rollback, every answer matched to a serving version.

Imports: ernie_deploy.core, serving, repository, server, client, evaluate (the task inputs and the in-process
predictions the answers are checked against) and operate.
"""
