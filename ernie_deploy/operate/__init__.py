"""Operations on a running server: moving a named model between its versions (rollout, rollback).

Imports: ernie_deploy.core, repository (the configs it edits) and client (the calls it makes).
"""
